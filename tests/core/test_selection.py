"""select_rollouts against brute force over all C(n, m) subsets, its tie rule, and its error messages."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from pods_rl import select_rollouts

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
KINDS = ["continuous", "integer", "binary", "constant", "offset"]
SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def reward_batches(draw, kinds=KINDS, dtypes=DTYPES, masks=True):
    """(rewards, valid or None, m): 1-3 groups of n <= 12 rewards of one kind, cast to one dtype."""
    kind = draw(st.sampled_from(kinds))
    dtype = draw(st.sampled_from(dtypes))
    groups, n = draw(st.integers(1, 3)), draw(st.integers(1, 12))
    if kind == "continuous":
        element = st.floats(-1e4, 1e4, allow_nan=False)
    elif kind == "integer":
        element = st.integers(-3, 3).map(float)
    elif kind == "binary":
        element = st.sampled_from([0.0, 1.0])
    elif kind == "constant":
        element = st.just(draw(st.floats(-100, 100)))
    else:  # a large offset plus small noise; float16 overflows at 65504, so its offset is smaller
        offset = 3e4 if dtype == torch.float16 else 1e6
        element = st.floats(-1e-2, 1e-2).map(lambda x: offset + x)
    values = draw(st.lists(element, min_size=groups * n, max_size=groups * n))
    rewards = torch.tensor(values, dtype=torch.float64).view(groups, n).to(dtype)
    valid = None
    if masks and draw(st.booleans()):
        valid = torch.tensor(draw(st.lists(st.booleans(), min_size=groups * n, max_size=groups * n)))
        valid = valid.view(groups, n)
        valid[:, 0] = True  # at least one valid rollout per group
        rewards = rewards.masked_fill(~valid, float("nan"))  # invalid entries must be ignored
    fewest = n if valid is None else int(valid.sum(dim=1).min())
    return rewards, valid, draw(st.integers(1, fewest))


def valid_indices(valid: torch.Tensor | None, group: int, n: int) -> list[int]:
    return list(range(n)) if valid is None else valid[group].nonzero().flatten().tolist()


def check_invariants(selected: torch.Tensor, groups: int, m: int, valid: torch.Tensor | None) -> None:
    assert selected.dtype == torch.long
    assert selected.shape == (groups, m)
    assert (selected[:, 1:] > selected[:, :-1]).all()  # ascending, hence distinct
    if valid is not None:
        assert valid.gather(1, selected).all()


def reference_indices(row: list[float], candidates: list[int], m: int) -> list[int]:
    """The documented rule, in exact arithmetic: stable ranking, smallest k among the best splits."""
    ranking = sorted(candidates, key=lambda i: -row[i])  # stable: lower index first among equal rewards
    best, chosen = None, None
    for k in range(m + 1):
        subset = ranking[:k] + ranking[len(ranking) - (m - k) :]
        values = [Fraction(row[i]) for i in subset]
        mean = sum(values) / m
        variance = sum((v - mean) ** 2 for v in values) / m
        if best is None or variance > best:
            best, chosen = variance, subset
    return sorted(chosen)


@SETTINGS
@given(reward_batches())
def test_max_variance_is_optimal(batch):
    rewards, valid, m = batch
    groups, n = rewards.shape
    selected = select_rollouts(rewards, m, valid=valid)
    check_invariants(selected, groups, m, valid)
    values = rewards.double().numpy()
    for group in range(groups):
        candidates = valid_indices(valid, group, n)
        row = values[group]
        subsets = np.array(list(itertools.combinations(candidates, m)))
        best = row[subsets].var(axis=1).max()
        chosen = row[selected[group].numpy()].var()
        spread = row[candidates].max() - row[candidates].min()
        assert chosen >= best - (1e-9 * best + 1e-12 * spread**2)


@SETTINGS
@given(reward_batches(kinds=["integer", "binary", "constant"]))
def test_integer_rewards_follow_the_tie_rule_exactly(batch):
    rewards, valid, m = batch
    groups, n = rewards.shape
    selected = select_rollouts(rewards, m, valid=valid)
    for group in range(groups):
        expected = reference_indices(rewards[group].tolist(), valid_indices(valid, group, n), m)
        assert selected[group].tolist() == expected


@SETTINGS
@given(reward_batches())
def test_max_reward_takes_the_m_highest(batch):
    rewards, valid, m = batch
    groups, n = rewards.shape
    selected = select_rollouts(rewards, m, "max_reward", valid=valid)
    check_invariants(selected, groups, m, valid)
    for group in range(groups):
        row = rewards[group].tolist()
        ranking = sorted(valid_indices(valid, group, n), key=lambda i: -row[i])
        assert selected[group].tolist() == sorted(ranking[:m])  # lower index first among equal rewards


@settings(max_examples=50, deadline=None)
@given(reward_batches(), st.integers(0, 2**32))
def test_random_is_valid_and_reproducible(batch, seed):
    rewards, valid, m = batch
    first = select_rollouts(rewards, m, "random", valid=valid, generator=torch.Generator().manual_seed(seed))
    again = select_rollouts(rewards, m, "random", valid=valid, generator=torch.Generator().manual_seed(seed))
    check_invariants(first, rewards.shape[0], m, valid)
    assert torch.equal(first, again)


def test_random_is_uniform_over_subsets():
    n, m, draws = 8, 3, 5600  # 56 subsets, 100 expected draws each
    rewards = torch.zeros(draws, n)
    selected = select_rollouts(rewards, m, "random", generator=torch.Generator().manual_seed(0))
    counts = Counter(tuple(row) for row in selected.tolist())
    observed = [counts[subset] for subset in itertools.combinations(range(n), m)]
    assert sum(observed) == draws
    assert chisquare(observed).pvalue > 1e-3


def test_random_is_uniform_over_valid_rollouts():
    valid = torch.tensor([[True, False, True, True, False, True, True, False]]).repeat(4000, 1)
    rewards = torch.zeros(valid.shape).masked_fill(~valid, float("nan"))
    selected = select_rollouts(rewards, 2, "random", valid=valid, generator=torch.Generator().manual_seed(1))
    assert valid.gather(1, selected).all()
    counts = torch.bincount(selected.flatten(), minlength=8)
    assert chisquare(counts[valid[0]].numpy()).pvalue > 1e-3


def test_random_seeds_differ():
    rewards = torch.zeros(64, 16)
    first = select_rollouts(rewards, 4, "random", generator=torch.Generator().manual_seed(0))
    second = select_rollouts(rewards, 4, "random", generator=torch.Generator().manual_seed(1))
    assert not torch.equal(first, second)


def test_larger_pools_match_a_per_group_split_scan():
    generator = torch.Generator().manual_seed(0)
    rewards = (torch.rand(32, 64, generator=generator) < 0.4).double()  # accuracy reward...
    rewards += torch.randint(0, 5, (32, 64), generator=generator) * 0.025  # ...plus a small format reward
    valid = torch.rand(32, 64, generator=generator) > 0.3
    valid[:, :20] = True
    for mask in (None, valid):
        selected = select_rollouts(rewards, 16, valid=mask)
        for group in range(32):
            expected = reference_indices(rewards[group].tolist(), valid_indices(mask, group, 64), 16)
            assert selected[group].tolist() == expected


def test_documented_ties():
    assert select_rollouts(torch.full((1, 6), 0.5), 3).tolist() == [[3, 4, 5]]  # equal rewards: k = 0
    binary = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]])
    assert select_rollouts(binary, 3).tolist() == [[0, 3, 5]]  # k = 1 and k = 2 tie: one 1 and two 0s
    assert select_rollouts(binary, 2, "max_reward").tolist() == [[0, 2]]


def test_same_input_same_output_in_every_dtype():
    rewards = torch.randint(0, 3, (64, 16), generator=torch.Generator().manual_seed(0)).double()
    expected = select_rollouts(rewards, 5)
    assert torch.equal(select_rollouts(rewards.clone(), 5), expected)
    for dtype in DTYPES:  # small integers are exact in every dtype
        assert torch.equal(select_rollouts(rewards.to(dtype), 5), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_matches_cpu():
    generator = torch.Generator().manual_seed(0)
    integer = torch.randint(0, 3, (256, 64), generator=generator).float()
    continuous = torch.rand(256, 64, generator=generator) * 0.1 + integer
    valid = torch.rand(256, 64, generator=generator) > 0.2
    valid[:, :20] = True
    for rewards in (integer, continuous):
        for rule in ("max_variance", "max_reward"):
            for mask in (None, valid):
                cpu = select_rollouts(rewards, 16, rule, valid=mask)
                gpu = select_rollouts(rewards.cuda(), 16, rule, valid=None if mask is None else mask.cuda())
                assert gpu.device.type == "cuda"
                assert torch.equal(gpu.cpu(), cpu)


def test_m_equal_n_returns_all():
    rewards = torch.rand(3, 5)
    for rule in ("max_variance", "max_reward", "random"):
        assert torch.equal(select_rollouts(rewards, 5, rule), torch.arange(5).repeat(3, 1))


def test_empty_batch():
    assert select_rollouts(torch.zeros(0, 8), 2).shape == (0, 2)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reward_names_group_and_rollout(bad):
    rewards = torch.zeros(3, 6)
    rewards[1, 4] = bad
    with pytest.raises(ValueError, match=r"group 1, rollout 4"):
        select_rollouts(rewards, 2)
    valid = torch.ones(3, 6, dtype=torch.bool)
    valid[1, 4] = False
    assert select_rollouts(rewards, 2, valid=valid).shape == (3, 2)  # ignored when invalid


def test_too_few_valid_rollouts_names_the_group():
    valid = torch.ones(3, 6, dtype=torch.bool)
    valid[2, :4] = False
    with pytest.raises(ValueError, match=r"group 2 has 2 valid rollouts, fewer than m = 3"):
        select_rollouts(torch.zeros(3, 6), 3, valid=valid)


@pytest.mark.parametrize("m", [0, -1, 7])
def test_m_out_of_range(m):
    with pytest.raises(ValueError, match=r"m must be in 1..n = 1..6"):
        select_rollouts(torch.zeros(2, 6), m)


@pytest.mark.parametrize(
    ("rewards", "kwargs", "message"),
    [
        (torch.zeros(6), {}, "2-D"),
        (torch.zeros(2, 3, 6), {}, "2-D"),
        ([[0.0, 1.0]], {}, "2-D"),
        (torch.zeros(2, 6, dtype=torch.int64), {}, "float16, bfloat16, float32 or float64"),
        (torch.zeros(2, 6), {"rule": "max_entropy"}, "unknown rule 'max_entropy'"),
        (torch.zeros(2, 6), {"m": 2.0}, "m must be an integer"),
        (torch.zeros(2, 6), {"m": True}, "m must be an integer"),
        (torch.zeros(2, 6), {"valid": torch.ones(2, 5, dtype=torch.bool)}, "valid must be a bool tensor"),
        (torch.zeros(2, 6), {"valid": torch.ones(2, 6)}, "valid must be a bool tensor"),
    ],
)
def test_bad_arguments(rewards, kwargs, message):
    kwargs = {"m": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        select_rollouts(rewards, **kwargs)


# ---------------------------------------------------------------- token-aware ties: select_rollouts(..., lengths=...)
@st.composite
def batches_with_lengths(draw, kinds=KINDS):
    """A reward batch as above (float64) plus integer completion lengths, with few distinct values so lengths tie."""
    rewards, valid, m = draw(reward_batches(kinds=kinds, dtypes=[torch.float64]))
    lengths = draw(st.lists(st.integers(0, 6), min_size=rewards.numel(), max_size=rewards.numel()))
    return rewards, valid, m, torch.tensor(lengths).view(rewards.shape)


def exact_variance(values: list[float]) -> Fraction:
    exact = [Fraction(v) for v in values]
    mean = sum(exact) / len(exact)
    return sum((v - mean) ** 2 for v in exact) / len(exact)


@SETTINGS
@given(batches_with_lengths(kinds=["integer", "binary", "constant"]))
def test_shortest_is_a_max_variance_subset_with_fewest_tokens(batch):
    """Brute force over all C(n, m) subsets, in exact arithmetic: the tie set is every subset of maximal variance."""
    rewards, valid, m, lengths = batch
    groups, n = rewards.shape
    selected = select_rollouts(rewards, m, valid=valid, lengths=lengths)
    check_invariants(selected, groups, m, valid)
    for group in range(groups):
        row, sizes = rewards[group].tolist(), lengths[group].tolist()
        subsets = list(itertools.combinations(valid_indices(valid, group, n), m))
        variances = [exact_variance([row[i] for i in subset]) for subset in subsets]
        ties = [subset for subset, variance in zip(subsets, variances, strict=True) if variance == max(variances)]
        chosen = selected[group].tolist()
        assert tuple(chosen) in ties
        assert sum(sizes[i] for i in chosen) == min(sum(sizes[i] for i in subset) for subset in ties)


@SETTINGS
@given(batches_with_lengths())
def test_shortest_keeps_the_variance_and_never_costs_more_tokens(batch):
    rewards, valid, m, lengths = batch
    plain = select_rollouts(rewards, m, valid=valid)
    short = select_rollouts(rewards, m, valid=valid, lengths=lengths)
    check_invariants(short, rewards.shape[0], m, valid)
    values = rewards.numpy()
    for group in range(rewards.shape[0]):
        candidates = values[group][valid_indices(valid, group, rewards.shape[1])]
        spread = candidates.max() - candidates.min()
        best, chosen = values[group][plain[group]].var(), values[group][short[group]].var()
        assert chosen >= best - (1e-9 * best + 1e-12 * spread**2)
        assert lengths[group][short[group]].sum() <= lengths[group][plain[group]].sum()


def test_documented_ties_with_lengths():
    binary = torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0, 0.0]])
    # m = 3: one 1 and two 0s, or two 1s and one 0; the 0s are short here, so the first kind wins
    assert select_rollouts(binary, 3, lengths=torch.tensor([[5, 1, 5, 2, 4, 9]])).tolist() == [[1, 3, 4]]
    # the 1s are short: two 1s and one 0 (the shortest 0)
    assert select_rollouts(binary, 3, lengths=torch.tensor([[1, 7, 2, 3, 9, 8]])).tolist() == [[0, 2, 3]]
    # equal lengths: the lower index among equal rewards (also at the bottom, unlike the plain rule's [0, 3, 5])
    equal = torch.ones(1, 6, dtype=torch.long)
    assert select_rollouts(binary, 3, lengths=equal).tolist() == [[0, 1, 3]]
    # equal rewards: the m shortest, the lower index among equal lengths
    assert select_rollouts(torch.zeros(1, 5), 2, lengths=torch.tensor([[4, 2, 3, 2, 1]])).tolist() == [[1, 4]]
    # m = 1: every rollout has variance 0, the shortest valid one wins, even with a middle reward
    rewards, valid = torch.tensor([[0.0, 0.5, 1.0]]), torch.tensor([[True, True, False]])
    assert select_rollouts(rewards, 1, valid=valid, lengths=torch.tensor([[3, 2, 1]])).tolist() == [[1]]


def test_lengths_are_ignored_by_other_rules():
    rewards, lengths = torch.tensor([[1.0, 0.0, 1.0, 0.0]]), torch.tensor([[9, 1, 1, 9]])
    assert select_rollouts(rewards, 2, "max_reward", lengths=lengths).tolist() == [[0, 2]]


@pytest.mark.parametrize(
    ("lengths", "message"),
    [
        (torch.ones(2, 5), "lengths must be a numeric tensor of shape"),
        (torch.ones(2, 6, dtype=torch.bool), "lengths must be a numeric tensor of shape"),
        (torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, -1, 4, 5, 6]]), r"length of group 1, rollout 2 is -1.0"),
        (torch.tensor([[1.0, 2, 3, 4, 5, 6], [1, 2, 3, math.nan, 5, 6]]), r"length of group 1, rollout 3 is nan"),
    ],
)
def test_bad_lengths(lengths, message):
    with pytest.raises(ValueError, match=message):
        select_rollouts(torch.zeros(2, 6), 2, lengths=lengths)
