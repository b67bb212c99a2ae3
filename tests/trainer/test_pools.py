"""Selection scores, per-group selection with unscorable rollouts, and advantages with TRL's options."""

import itertools
import math

import pytest
import torch

from pods_rl import select_batch, select_rollouts
from pods_rl.trainer.pools import (
    EPS,
    _can_spread,
    advantages,
    grpo_metrics,
    select_per_block,
    select_per_group,
    selection_scores,
)

NAN = math.nan


def one_function(rewards: list[float]) -> torch.Tensor:
    return torch.tensor(rewards, dtype=torch.float32).unsqueeze(1)


def test_pool_statistics_leave_unscorable_rollouts_out():
    """The issue's example: [4, None, 2, 4, None, 2] with pool statistics is [0.866, -0.866], not [1.118, 0.0]."""
    rewards = one_function([4, NAN, 2, 4, NAN, 2])
    scores, scorable = selection_scores(rewards, torch.ones(1), 6, "sum_then_normalize")
    chosen = select_per_group(scores, scorable, 2, "max_variance")
    assert chosen.tolist() == [[True, False, False, False, False, True]]  # a highest and a lowest: 4 and 2
    result = advantages(
        rewards, torch.ones(1), 6, chosen, aggregation="sum_then_normalize", scale="group", stats="pool"
    )
    std = torch.tensor([4.0, 2, 4, 2]).std().item()
    assert result[chosen].tolist() == pytest.approx([1 / (std + EPS), -1 / (std + EPS)])
    assert result[chosen].tolist() == pytest.approx([0.866, -0.866], abs=1e-3)


@pytest.mark.parametrize("m", [3, 4])
def test_groups_short_of_scorable_rollouts_keep_them_all(m):
    """Group 0 has 2 scorable rollouts of 4: both are kept, the rest filled with unscorable ones (advantage 0)."""
    rewards = one_function([NAN, 1.0, NAN, 3.0, 0.0, 1.0, 5.0, 2.0])
    scores, scorable = selection_scores(rewards, torch.ones(1), 4, "sum_then_normalize")
    chosen = select_per_group(scores, scorable, m, "max_variance")
    assert chosen.sum(dim=1).tolist() == [m, m]
    assert chosen[0].tolist() == ([True, True, False, True] if m == 3 else [True] * 4)
    expected = torch.zeros(2, 4, dtype=torch.bool)
    expected[1, select_rollouts(scores[1:], m)[0]] = True
    assert torch.equal(chosen[1], expected[1])
    for stats in ("selected", "pool"):
        result = advantages(
            rewards, torch.ones(1), 4, chosen, aggregation="sum_then_normalize", scale="group", stats=stats
        )
        assert result[0].tolist() == pytest.approx([0.0, -1 / (2**0.5 + EPS), 0.0, 1 / (2**0.5 + EPS)])


def test_a_group_with_no_scorable_rollout_trains_with_zero_advantages():
    rewards = one_function([NAN] * 4)
    scores, scorable = selection_scores(rewards, torch.ones(1), 4, "sum_then_normalize")
    chosen = select_per_group(scores, scorable, 2, "max_variance")
    assert chosen.tolist() == [[True, True, False, False]]
    result = advantages(
        rewards, torch.ones(1), 4, chosen, aggregation="sum_then_normalize", scale="group", stats="selected"
    )
    assert result.tolist() == [[0.0] * 4]


def test_batch_scale_divides_by_the_std_of_every_selected_reward():
    rewards = one_function([0.0, 1.0, 2.0, 9.0, 4.0, 4.0, 6.0, 0.0])
    chosen = torch.tensor([[True, False, True, False], [False, True, True, True]])
    result = advantages(
        rewards, torch.ones(1), 4, chosen, aggregation="sum_then_normalize", scale="batch", stats="selected"
    )
    batch_std = torch.tensor([0.0, 2.0, 4.0, 6.0, 0.0]).std().item()
    expected = [[-1, 0, 1, 0], [0, 4 - 10 / 3, 6 - 10 / 3, -10 / 3]]
    assert result.tolist() == [pytest.approx([x / (batch_std + EPS) for x in row]) for row in expected]


def normalize_then_sum(values: torch.Tensor, weights: list[float]) -> torch.Tensor:
    """TRL's formula, by hand, for (G, n, F) rewards without NaN: per function per group, then over the batch."""
    normalized = (values - values.mean(dim=1, keepdim=True)) / (values.std(dim=1, keepdim=True) + EPS)
    summed = (normalized * torch.tensor(weights, dtype=values.dtype)).sum(dim=2)
    return (summed - summed.mean()) / (summed.std() + EPS)


def test_normalize_then_sum_selects_on_the_normalised_aggregate():
    """A small-scale format reward weighs as much as accuracy once normalised, so it moves the selection."""
    accuracy = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    fmt = [0.0, 0.1, 0.1, 0.1, 0.1, 0.1]
    rewards = torch.tensor([accuracy, fmt]).T.contiguous()
    weights = torch.ones(2)
    raw, _ = selection_scores(rewards, weights, 6, "sum_then_normalize")
    normalized, _ = selection_scores(rewards, weights, 6, "normalize_then_sum")
    values = rewards.double().view(1, 6, 2)
    by_hand = ((values - values.mean(dim=1, keepdim=True)) / (values.std(dim=1, keepdim=True) + EPS)).sum(dim=2)
    torch.testing.assert_close(normalized, by_hand)
    assert select_rollouts(raw, 2).tolist() == [[1, 5]]  # raw sums 1.0, 1.1, 0.1, ...: accuracy decides
    assert select_rollouts(normalized, 2).tolist() == [[0, 1]]  # the right answer without format is the worst
    chosen = torch.ones(1, 6, dtype=torch.bool)
    result = advantages(rewards, weights, 6, chosen, aggregation="normalize_then_sum", scale="group", stats="selected")
    torch.testing.assert_close(result, normalize_then_sum(values, [1.0, 1.0]))


def test_grpo_metrics_describe_the_pool_as_grpo_logs_it():
    rewards = torch.tensor([[1.0, NAN], [NAN, NAN], [0.0, 0.5], [2.0, NAN], [1.0, 1.0], [1.0, 1.0]])
    metrics = grpo_metrics(rewards, torch.tensor([1.0, 2.0]), ["a", "b"], 3, "sum_then_normalize", "group")
    assert metrics["rewards/a/mean"] == pytest.approx(1.0)
    assert metrics["rewards/b/mean"] == pytest.approx(2.5 / 3)
    assert metrics["reward"] == pytest.approx((1 + 1 + 2 + 3 + 3) / 5)  # the unscorable row is left out
    assert metrics["reward_std"] == pytest.approx(torch.tensor([1.0, 1, 2, 3, 3]).std().item())
    assert metrics["frac_reward_zero_std"] == 0.5  # group 0's scorable rewards are 1 and 1
    same = grpo_metrics(torch.ones(6, 1), torch.ones(1), ["a"], 3, "sum_then_normalize", "group")
    assert same["frac_reward_zero_std"] == 1.0


@pytest.mark.parametrize("counts", [c for size in (1, 2, 3) for c in itertools.product(range(5), repeat=size)])
def test_can_spread_matches_brute_force(counts):
    reachable = {sum(sizes) for sizes in itertools.product(*[[0, *range(2, c + 1)] for c in counts])}
    for budget in range(0, 14):
        assert _can_spread(torch.tensor(counts), budget) == (budget in reachable), (counts, budget)


def test_batch_blocks_spread_each_process_rows_over_its_own_pools():
    generator = torch.Generator().manual_seed(3)
    scores = torch.randint(0, 2, (4, 6), generator=generator).double()
    scores[0] = 1.0  # an equal group: gets rows only if nothing else can take them
    scorable = torch.ones_like(scores, dtype=torch.bool)
    lengths = torch.randint(1, 50, (4, 6), generator=generator)
    chosen = select_per_block(scores, scorable, 2, 2, lengths=lengths)
    for block in (slice(0, 2), slice(2, 4)):  # each block of 2 pools gets its own 2 x m = 4 rows
        expected = select_batch(scores[block], 4, valid=scorable[block], lengths=lengths[block])
        assert torch.equal(chosen[block], expected)


def test_batch_block_short_of_scorable_rollouts_takes_m_per_group():
    scores = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    scorable = torch.tensor([[True, False, False, False], [True, True, False, False]])  # 3 scorable, budget 4
    scores = scores.masked_fill(~scorable, math.nan)
    chosen = select_per_block(scores, scorable, 2, 2)
    assert torch.equal(chosen, select_per_group(scores, scorable, 2, "max_variance"))
    assert chosen.sum(dim=1).tolist() == [2, 2]


def test_shortest_tie_break_reaches_the_per_group_selection():
    scores = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.0, 1.0]], dtype=torch.float64)
    scorable = torch.ones_like(scores, dtype=torch.bool)
    lengths = torch.tensor([[9, 3, 8, 2, 1, 7], [5, 5, 1, 4, 9, 2]])
    chosen = select_per_group(scores, scorable, 2, "max_variance", lengths=lengths)
    assert chosen.nonzero()[:, 1].view(2, 2).tolist() == [[3, 4], [2, 3]]  # the shortest right and wrong rollouts
    assert torch.equal(chosen.nonzero()[:, 1].view(2, 2), select_rollouts(scores, 2, valid=scorable, lengths=lengths))
