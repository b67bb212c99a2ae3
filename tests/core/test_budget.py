"""select_batch against brute force over all allocations and all subsets, its tie rules, and its error messages."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods_rl import group_advantages, select_batch, select_rollouts

SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def batches(draw, kinds=("integer", "binary", "constant", "continuous")):
    """(rewards, valid or None, lengths or None, budget): 1-4 groups of n <= 5, some all-equal, some masked."""
    groups, n = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    rows = []
    for _ in range(groups):
        kind = draw(st.sampled_from(kinds))
        if kind == "integer":
            element = st.integers(-2, 2).map(float)
        elif kind == "binary":
            element = st.sampled_from([0.0, 1.0])
        elif kind == "constant":
            element = st.just(draw(st.sampled_from([0.0, 1.0, 2.5])))
        else:
            element = st.floats(-100, 100, allow_nan=False)
        rows.append(draw(st.lists(element, min_size=n, max_size=n)))
    rewards = torch.tensor(rows, dtype=torch.float64)
    valid = None
    if draw(st.booleans()):
        valid = torch.tensor(draw(st.lists(st.booleans(), min_size=groups * n, max_size=groups * n))).view(groups, n)
        rewards = rewards.masked_fill(~valid, float("nan"))  # invalid entries must be ignored
    lengths = None
    if draw(st.booleans()):
        lengths = torch.tensor(draw(st.lists(st.integers(0, 4), min_size=groups * n, max_size=groups * n)))
        lengths = lengths.view(groups, n)
    feasible = sorted({sum(sizes) for sizes in itertools.product(*map(size_choices, counts(rewards, valid)))})
    return rewards, valid, lengths, draw(st.sampled_from(feasible))


def counts(rewards: torch.Tensor, valid: torch.Tensor | None) -> list[int]:
    return [rewards.shape[1]] * rewards.shape[0] if valid is None else valid.sum(dim=1).tolist()


def size_choices(count: int) -> list[int]:
    return [0, *range(2, count + 1)]


def candidates(valid: torch.Tensor | None, group: int, n: int) -> list[int]:
    return list(range(n)) if valid is None else valid[group].nonzero().flatten().tolist()


def deviation(values: list[float]) -> Fraction:
    """Total squared deviation from the mean, exactly."""
    if not values:
        return Fraction(0)
    exact = [Fraction(v) for v in values]
    mean = sum(exact) / len(exact)
    return sum((v - mean) ** 2 for v in exact)


def best_deviation(row: list[float], members: list[int], size: int) -> Fraction:
    """The largest total squared deviation of any `size` of `members`: all subsets."""
    return max(deviation([row[i] for i in subset]) for subset in itertools.combinations(members, size))


def allocations(rewards: torch.Tensor, valid: torch.Tensor | None, budget: int) -> dict[tuple[int, ...], Fraction]:
    """Every allocation of the budget (each group 0 or 2..its valid rollouts) and its best objective value."""
    n = rewards.shape[1]
    members = [candidates(valid, g, n) for g in range(rewards.shape[0])]
    rows = rewards.tolist()
    best = [
        {s: best_deviation(rows[g], members[g], s) for s in size_choices(len(members[g]))} for g in range(len(rows))
    ]
    return {
        sizes: sum(best[g][s] for g, s in enumerate(sizes))
        for sizes in itertools.product(*(size_choices(len(m)) for m in members))
        if sum(sizes) == budget
    }


def check_shape(selected: torch.Tensor, rewards: torch.Tensor, valid: torch.Tensor | None, budget: int) -> list[int]:
    assert selected.dtype == torch.bool and selected.shape == rewards.shape
    sizes = selected.sum(dim=1).tolist()
    assert sum(sizes) == budget
    assert all(size != 1 for size in sizes)
    if valid is not None:
        assert not (selected & ~valid).any()
    return sizes


@SETTINGS
@given(batches(kinds=("integer", "binary", "constant")))
def test_optimal_over_all_allocations_and_subsets_with_the_tie_rules(batch):
    """Exact arithmetic: the best objective, then fewest rows in all-equal groups, then the smallest sum of squares,
    then the lexicographically smallest sizes; and within each group select_rollouts' subset at that size."""
    rewards, valid, lengths, budget = batch
    selected = select_batch(rewards, budget, valid=valid, lengths=lengths)
    sizes = check_shape(selected, rewards, valid, budget)
    options = allocations(rewards, valid, budget)
    best = max(options.values())
    rows = rewards.tolist()
    n = rewards.shape[1]
    assert (
        sum(deviation([rows[g][i] for i in selected[g].nonzero().flatten().tolist()]) for g in range(len(rows))) == best
    )
    flat = [len({rows[g][i] for i in candidates(valid, g, n)}) <= 1 for g in range(len(rows))]

    def preference(option: tuple[int, ...]) -> tuple:
        return (sum(s for s, equal in zip(option, flat, strict=True) if equal), sum(s * s for s in option), option)

    assert tuple(sizes) == min((o for o, value in options.items() if value == best), key=preference)
    for group, size in enumerate(sizes):
        if size:
            row_valid = None if valid is None else valid[group : group + 1]
            row_lengths = None if lengths is None else lengths[group : group + 1]
            expected = select_rollouts(rewards[group : group + 1], size, valid=row_valid, lengths=row_lengths)
            assert selected[group].nonzero().flatten().tolist() == expected[0].tolist()


@SETTINGS
@given(batches())
def test_continuous_rewards_reach_the_optimum(batch):
    rewards, valid, lengths, budget = batch
    selected = select_batch(rewards, budget, valid=valid, lengths=lengths)
    check_shape(selected, rewards, valid, budget)
    values = torch.where(selected, rewards, 0.0)
    count = selected.sum(dim=1, keepdim=True)
    mean = values.sum(dim=1, keepdim=True) / count.clamp(min=1)
    achieved = torch.where(selected, (values - mean).square(), 0.0).sum().item()
    best = float(max(allocations(rewards, valid, budget).values()))
    spread = torch.nan_to_num(rewards, nan=0.0).abs().max().item() * 2
    assert achieved >= best - (1e-9 * best + 1e-9 * budget * spread**2)


def test_equal_groups_get_no_rows_and_free_rows_go_where_they_gain():
    rewards = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # all right: nothing to learn
            [1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0],  # balanced
            [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # one right
            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],  # all wrong
        ]
    )
    selected = select_batch(rewards, 16)
    # Captured squared deviation: balanced 8 rows -> 2, one right 8 rows -> 7/8, in all 2.875. Per prompt (4 each)
    # captures 1 + 3/4 = 1.75; 8 balanced + 2 one-right rows + 6 rows on equal groups only 2.5.
    assert selected.sum(dim=1).tolist() == [0, 8, 8, 0]


def test_balanced_groups_keep_the_per_prompt_allocation():
    rewards = torch.tensor([[1.0, 0.0] * 4, [0.0, 1.0] * 4, [1.0, 1.0, 0.0, 0.0] * 2])
    selected = select_batch(rewards, 12)
    assert selected.sum(dim=1).tolist() == [4, 4, 4]
    assert torch.equal(selected.nonzero()[:, 1].view(3, 4), select_rollouts(rewards, 4))


def test_beats_or_matches_per_prompt_selection():
    generator = torch.Generator().manual_seed(0)
    rewards = (torch.rand(16, 16, generator=generator) < torch.rand(16, 1, generator=generator)).double()
    rewards += torch.randint(0, 3, (16, 16), generator=generator) * 0.025
    rewards[:4] = 1.125  # all right and well formatted

    def captured(mask: torch.Tensor) -> float:
        values = torch.where(mask, rewards, 0.0)
        mean = values.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
        return torch.where(mask, (values - mean).square(), 0.0).sum().item()

    per_prompt = torch.zeros_like(rewards, dtype=torch.bool).scatter(1, select_rollouts(rewards, 4), True)
    batch = select_batch(rewards, 64)
    assert batch.sum().item() == 64 and batch[:4].sum().item() == 0
    assert captured(batch) > captured(per_prompt)


@pytest.mark.parametrize("scale", [1e3, 1e7, 1e12])
@pytest.mark.parametrize("huge_group_first", [True, False])
def test_a_huge_reward_range_does_not_blur_the_other_groups(scale, huge_group_first):
    """The huge group takes 4 rows; the spare 2 go where they capture more: squared deviation 2.0 (second group)
    rather than 0.5 (third). A tolerance scaled to the largest range made them a tie, won by the wrong group."""
    rows = [[2.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 0.0]]
    huge = [scale, scale, 0.0, 0.0]
    rewards = torch.tensor([huge, *rows] if huge_group_first else [*rows, huge], dtype=torch.float64)
    sizes = select_batch(rewards, 6).sum(dim=1).tolist()
    assert sizes == ([4, 2, 0] if huge_group_first else [2, 0, 4])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_matches_cpu():
    generator = torch.Generator().manual_seed(0)
    integer = torch.randint(0, 3, (32, 16), generator=generator).double()
    continuous = torch.rand(32, 16, generator=generator, dtype=torch.float64) * 0.1 + integer
    scaled = integer.clone()
    scaled[::4] *= 1e7  # groups of very different ranges in one batch
    for rewards in (integer, continuous, scaled):
        cpu = select_batch(rewards, 32 * 4)
        gpu = select_batch(rewards.cuda(), 32 * 4)
        assert gpu.device.type == "cuda"
        assert torch.equal(gpu.cpu(), cpu)


def test_all_equal_batch_still_fills_the_budget_evenly():
    selected = select_batch(torch.zeros(4, 6), 10)
    assert selected.sum(dim=1).tolist() == [2, 2, 3, 3]  # the smallest sum of squares, then lexicographic


def test_advantages_per_group_of_the_selection():
    rewards = torch.tensor(
        [[1.0, 0.0, 1.0, 0.0, 0.5, 0.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0], [3.0, 1.0, 2.0, 2.0, 5.0, 0.0]]
    )
    selected = select_batch(rewards, 10)
    advantages = group_advantages(rewards, mask=selected)
    for group in range(3):
        chosen = selected[group]
        if chosen.any():
            torch.testing.assert_close(advantages[group, chosen], group_advantages(rewards[group, chosen][None])[0])
        assert (advantages[group, ~chosen] == 0).all()


def test_zero_budget_and_empty_batch():
    assert not select_batch(torch.rand(3, 4), 0).any()
    assert select_batch(torch.zeros(0, 4), 0).shape == (0, 4)


@pytest.mark.parametrize(
    ("rewards", "budget", "valid", "message"),
    [
        (torch.zeros(2, 4), 9, None, r"cannot spread a budget of 9 rows over groups with \[4, 4\] valid rollouts"),
        (torch.zeros(2, 2), 3, None, r"cannot spread a budget of 3 rows"),  # groups of 2 take 0 or 2
        (torch.zeros(2, 4), 3, torch.tensor([[True, False, False, False], [True, True, False, False]]), "cannot"),
        (torch.zeros(2, 4), 1, None, "cannot spread a budget of 1 rows"),
        (torch.zeros(2, 4), -1, None, "budget must be >= 0"),
        (torch.zeros(2, 4), 2.0, None, "budget must be an integer"),
        (torch.zeros(2, 4), True, None, "budget must be an integer"),
        (torch.zeros(4), 2, None, "2-D"),
        (torch.tensor([[0.0, float("nan")]]), 2, None, r"group 0, rollout 1"),
    ],
)
def test_bad_arguments(rewards, budget, valid, message):
    with pytest.raises(ValueError, match=message):
        select_batch(rewards, budget, valid=valid)
