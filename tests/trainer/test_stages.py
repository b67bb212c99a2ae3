"""The selection stages on hand-built pools: what PODSTrainer runs on a generation batch, and what a trainer that
scores one group of n at a time would run on a batch of one group."""

import math

import pytest
import torch

from pods_rl import select_rollouts
from pods_rl.trainer import stages
from pods_rl.trainer.pools import EPS

NAN = math.nan


def settings(**overrides) -> stages.SelectionSettings:
    values = dict(
        num_selected=2,
        rule="max_variance",
        budget="per_prompt",
        tie_break="index",
        rows_per_process=2,
        aggregation="sum_then_normalize",
        scale="group",
        advantage_stats="selected",
    )
    return stages.SelectionSettings(**{**values, **overrides})


def one_group(rewards: list[float], tokens: list[int], masked: list[bool] | None = None) -> stages.Pools:
    """A batch of one group of n rollouts scored by one reward function (weight 1), in generation order."""
    n = len(rewards)
    return stages.lay_out(
        torch.tensor(rewards).unsqueeze(1),
        torch.arange(n).view(1, n),
        torch.tensor(tokens, dtype=torch.int32),
        torch.tensor(masked or [False] * n, dtype=torch.int32),
        torch.ones(1),
        "sum_then_normalize",
    )


@pytest.mark.parametrize("stats", ["selected", "pool"])
def test_one_group_gets_the_selection_advantages_and_metrics_computed_by_hand(stats):
    """Rewards [0, 3, 1, 2], m = 2: max variance keeps 0 and 3 (rows 0 and 1). Their advantages are -/+1.5 over the
    std of the kept pair (2.1213) or of the pool (1.2910), plus TRL's epsilon."""
    pools = one_group([0.0, 3.0, 1.0, 2.0], tokens=[5, 7, 2, 4])
    group = settings(advantage_stats=stats)
    selected = stages.select(pools, group)
    assert selected.tolist() == [[True, True, False, False]]
    std = math.sqrt(2 * 1.5**2 / 1) if stats == "selected" else math.sqrt((2 * 1.5**2 + 2 * 0.5**2) / 3)
    advantages = stages.advantages(pools, selected, torch.ones(1), group)
    assert advantages.tolist() == pytest.approx([-1.5 / (std + EPS), 1.5 / (std + EPS), 0.0, 0.0], rel=1e-12)
    positions, plan = stages.row_plan(selected, torch.arange(4).view(1, 4), processes=1, rows_per_process=2)
    assert positions.tolist() == [0, 1] and plan.tolist() == [[0, 1]]

    metrics = stages.selection_metrics(pools, selected, group, rows_moved=0)
    assert metrics["pods/pool_reward_mean"] == pytest.approx(1.5)
    assert metrics["pods/pool_reward_std"] == pytest.approx(math.sqrt(5 / 3))
    assert metrics["pods/selected_reward_mean"] == pytest.approx(1.5)
    assert metrics["pods/selected_reward_std"] == pytest.approx(math.sqrt(4.5))
    assert metrics["pods/selected_var_frac_of_best"] == 1.0
    assert metrics["pods/selected_var_frac_of_pool"] == pytest.approx(2.25 / 1.25)  # population variances
    assert metrics["pods/zero_variance_groups_frac"] == 0.0
    assert metrics["pods/rollouts_generated"] == 4.0 and metrics["pods/rollouts_trained"] == 2.0
    assert metrics["pods/tokens_generated"] == 18.0 and metrics["pods/tokens_trained"] == 12.0
    assert metrics["pods/rows_per_group_min"] == metrics["pods/rows_per_group_max"] == 2.0
    assert metrics["pods/groups_without_rows_frac"] == 0.0 and metrics["pods/rows_moved"] == 0.0


def test_another_rule_is_measured_against_the_best_subset():
    """max_reward keeps 3 and 2 (variance 0.25 of the best 2.25); no draw is made to measure it."""
    pools = one_group([0.0, 3.0, 1.0, 2.0], tokens=[5, 7, 2, 4])
    group = settings(rule="max_reward")
    selected = stages.select(pools, group)
    assert selected.tolist() == [[False, True, False, True]]
    metrics = stages.selection_metrics(pools, selected, group, rows_moved=0)
    assert metrics["pods/selected_var_frac_of_best"] == pytest.approx(0.25 / 2.25)


def test_the_layout_pads_with_unscorable_rows_and_masked_rows_are_not_chosen():
    """Two pools over five generated rows, the second one short (-1 pads it). Row 1 (reward 5) would make the most
    variance, but its loss is masked: selection takes the other two, and the padding is never chosen."""
    rewards = torch.tensor([[0.0], [5.0], [1.0], [2.0], [4.0]])
    layout = torch.tensor([[0, 1, 2], [3, 4, -1]])
    tokens = torch.tensor([3, 8, 2, 6, 1], dtype=torch.int32)
    masked = torch.tensor([0, 1, 0, 0, 0], dtype=torch.int32)
    pools = stages.lay_out(rewards, layout, tokens, masked, torch.ones(1), "sum_then_normalize")
    assert torch.isnan(pools.rewards[5]).all() and torch.isnan(pools.scores[1, 2])
    assert pools.scorable.tolist() == [[True, True, True], [True, True, False]]
    assert pools.selectable.tolist() == [[True, False, True], [True, True, False]]
    assert pools.model_tokens.tolist() == [[3, 8, 2], [6, 1, 0]]
    assert pools.loss_tokens.tolist() == [[3, 0, 2], [6, 1, 0]]
    selected = stages.select(pools, settings())
    assert selected.tolist() == [[True, False, True], [True, True, False]]
    positions, plan = stages.row_plan(selected, layout, processes=2, rows_per_process=2)
    assert positions.tolist() == [0, 2, 3, 4] and plan.tolist() == [[0, 2], [3, 4]]


def test_the_random_rule_draws_from_the_generator_given():
    """The random rule's draws are `select_rollouts`' on the same generator, and advance it as much."""
    pools = one_group([0.0, 3.0, 1.0, 2.0, 5.0, 4.0], tokens=[1] * 6)
    ours, reference = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    selected = stages.select(pools, settings(rule="random", num_selected=3), ours)
    expected = select_rollouts(pools.scores, 3, "random", valid=pools.selectable, generator=reference)
    assert selected.nonzero()[:, 1].tolist() == expected[0].tolist()
    assert torch.equal(ours.get_state(), reference.get_state())


def test_the_shortest_tie_break_takes_the_fewest_tokens_the_loss_sees():
    """Rewards [1, 0, 1, 0]: every pair of a 1 and a 0 has maximal variance. By index: rows 0 and 3; by length: the
    shortest 1 (row 2) and the shortest 0 (row 3)."""
    pools = one_group([1.0, 0.0, 1.0, 0.0], tokens=[8, 8, 2, 3])
    assert stages.select(pools, settings()).tolist() == [[True, False, False, True]]
    assert stages.select(pools, settings(tie_break="shortest")).tolist() == [[False, False, True, True]]


def test_the_batch_budget_spreads_each_process_rows_over_its_own_pools():
    """Two processes with two pools each and 4 rows each (m = 2). A pool whose rewards are equal gets no row when the
    other pool of its process can take them all: [0, 1, 2, 3] whole (squared deviation 5) beats 2 + 2 rows (4.5). Two
    pools of one 1 among 0s give 2 rows each (0.5 + 0.5) rather than 4 rows to one (0.75)."""
    rewards = torch.tensor([1.0, 1, 1, 1, 0, 1, 2, 3, 0, 1, 0, 0, 0, 0, 0, 1]).unsqueeze(1)
    rows = torch.ones(16, dtype=torch.int32), torch.zeros(16, dtype=torch.int32)
    pools = stages.lay_out(rewards, torch.arange(16).view(4, 4), *rows, torch.ones(1), "sum_then_normalize")
    selected = stages.select(pools, settings(budget="batch", rows_per_process=4))
    assert selected.sum(dim=1).tolist() == [0, 4, 2, 2]


def test_the_row_plan_refuses_a_selection_of_the_wrong_size():
    selected = torch.tensor([[True, True, False], [True, False, False]])
    with pytest.raises(RuntimeError, match=r"kept 3 rollouts; training needs 4 \(2 processes x 2 rows\)"):
        stages.row_plan(selected, torch.arange(6).view(2, 3), processes=2, rows_per_process=2)


def test_dynamic_sampling_keeps_the_groups_whose_scores_vary():
    """Groups of three rows: equal rewards, rewards that vary, one scorable reward among unscorable ones."""
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0, NAN, NAN]).unsqueeze(1)
    assert stages.informative(rewards, torch.ones(1), 3, "sum_then_normalize").tolist() == [False, True, False]
