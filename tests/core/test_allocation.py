"""Rollout allocation: exact values against exact arithmetic, the knapsack and ragged selection against brute force,
the pass-rate history's posterior, draws and bit-exact state round trip, the step plans' rules, and the errors."""

from __future__ import annotations

import hashlib
import io
import itertools
import math
import random
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pods_rl import select_batch, select_rollouts
from pods_rl.core.allocation import (
    PassRateHistory,
    allocate,
    beta_binomial_pmf,
    binomial_pmf,
    captured_deviation,
    count_outcomes,
    pad_pools,
    plan_from_history,
    plan_screening,
    prompt_id,
    screen_passes,
    size_histogram,
    value_table,
)

SETTINGS = settings(max_examples=150, deadline=None)


def deviation(values) -> Fraction:
    """Total squared deviation from the mean, exactly."""
    exact = [Fraction(v) for v in values]
    if not exact:
        return Fraction(0)
    mean = sum(exact) / len(exact)
    return sum((v - mean) ** 2 for v in exact)


# ------------------------------------------------------------------ 1. what a group is worth


@pytest.mark.parametrize("k", range(1, 9))
def test_captured_deviation_is_what_max_variance_selection_keeps(k):
    """For every count of successes, the deviation the formula gives is select_rollouts' choice's, and the best of
    all m-subsets (brute force), with the rollouts in a shuffled order."""
    order = random.Random(k)
    for m in range(1, k + 2):
        expected = captured_deviation(k, m)
        for successes in range(k + 1):
            rewards = [1.0] * successes + [0.0] * (k - successes)
            order.shuffle(rewards)
            kept = min(m, k)
            best = max(deviation(subset) for subset in itertools.combinations(rewards, kept))
            assert expected[successes].item() == float(best)  # one correctly rounded division
            if m <= k:
                chosen = select_rollouts(torch.tensor([rewards]), m)[0].tolist()
                assert deviation([rewards[i] for i in chosen]) == best


def test_captured_deviation_values():
    assert captured_deviation(4, 2).tolist() == [0.0, 0.5, 0.5, 0.5, 0.0]
    assert captured_deviation(4, 4).tolist() == [0.0, 0.75, 1.0, 0.75, 0.0]
    assert captured_deviation(6, 3).tolist() == [0.0, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 0.0]
    assert captured_deviation(3, 8).tolist() == [0.0, 2 / 3, 2 / 3, 0.0]  # a pool smaller than m is kept whole
    assert captured_deviation(0, 2).tolist() == [0.0]


def test_value_tables_exact():
    half = torch.tensor([0.5])
    # p = 1/2, k = 4, m = 2: both outcomes present with probability 14/16, then a balanced pair (deviation 1/2).
    assert value_table([4], 2, pass_rate=half).item() == 0.4375
    assert value_table([4], 2, pass_rate=half, objective="informative").item() == 0.875
    assert value_table([0, 1], 2, pass_rate=half).tolist() == [[0.0, 0.0]]  # no pair, no variance
    # Keeping all k (m >= k): E[s (k - s) / k] = (k - 1) p (1 - p), GRPO's expected squared deviation.
    for p in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
        for k in (2, 3, 8, 16):
            value = value_table([k], k, pass_rate=torch.tensor([p], dtype=torch.float64)).item()
            assert value == pytest.approx((k - 1) * p * (1 - p), abs=1e-13)
            informative = value_table(
                [k], 2, pass_rate=torch.tensor([p], dtype=torch.float64), objective="informative"
            ).item()
            assert informative == pytest.approx(1 - p**k - (1 - p) ** k, abs=1e-13)


def test_values_rise_with_the_pool_and_saturate_at_a_balanced_subset():
    sizes = list(range(4, 65, 4))
    values = value_table(sizes, 4, pass_rate=torch.tensor([0.5, 0.05]))
    assert (values.diff(dim=1) >= 0).all()
    assert values[0, -1].item() == pytest.approx(1.0, abs=1e-12)  # m / 4: two successes and two failures
    assert values[1, 0] < values[1, -1] < 1.0  # a hard prompt needs many rollouts to show a success


def test_binomial_and_beta_binomial_pmfs_are_exact():
    assert binomial_pmf(3, torch.tensor([0.5])).tolist() == [[0.125, 0.375, 0.375, 0.125]]
    assert binomial_pmf(2, torch.tensor([0.0, 1.0])).tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    for alpha, beta, k in [(1, 1, 5), (9, 1, 8), (2, 3, 4), (17, 25, 16), (1, 9, 8)]:
        pmf = beta_binomial_pmf(k, torch.tensor([float(alpha)]), torch.tensor([float(beta)]))[0]
        for s in range(k + 1):
            assert pmf[s].item() == pytest.approx(float(beta_binomial_exact(k, s, alpha, beta)), rel=1e-12)
        assert pmf.sum().item() == pytest.approx(1.0, abs=1e-13)
    uniform = beta_binomial_pmf(7, torch.tensor([1.0]), torch.tensor([1.0]))[0]
    assert uniform.tolist() == pytest.approx([1 / 8] * 8, rel=1e-12)


def beta_binomial_exact(k: int, s: int, alpha: int, beta: int) -> Fraction:
    """C(k, s) B(s + alpha, k - s + beta) / B(alpha, beta) with integer parameters, in exact arithmetic."""

    def beta_function(a: int, b: int) -> Fraction:
        return Fraction(math.factorial(a - 1) * math.factorial(b - 1), math.factorial(a + b - 1))

    return math.comb(k, s) * beta_function(s + alpha, k - s + beta) / beta_function(alpha, beta)


@pytest.mark.parametrize("objective", ["variance", "informative", "knapsack_rl"])
def test_posterior_values_average_over_the_pass_rate(objective):
    """The Beta-posterior value is the point-estimate value averaged over the posterior (checked by quadrature)."""
    alpha, beta, sizes = torch.tensor([3.0]), torch.tensor([2.0]), [2, 4, 8]
    grid = torch.linspace(0, 1, 20001, dtype=torch.float64)[1:-1]
    weights = grid.pow(2) * (1 - grid)  # Beta(3, 2) density up to a constant
    weights = weights / weights.sum()
    point = value_table(sizes, 4, pass_rate=grid, objective=objective)
    expected = (weights.unsqueeze(1) * point).sum(dim=0)
    posterior = value_table(sizes, 4, alpha=alpha, beta=beta, objective=objective)[0]
    assert posterior.tolist() == pytest.approx(expected.tolist(), abs=1e-7)


def knapsack_rl_exact(p: Fraction, k: int) -> Fraction:
    """Knapsack RL's value of k rollouts at pass rate p: (1 - p^k - (1 - p)^k) x p (1 - p)^2."""
    return (1 - p**k - (1 - p) ** k) * p * (1 - p) ** 2


def test_knapsack_rl_values_exact():
    """Point estimates against the formula in exact arithmetic; 0 below two kept rollouts and at p = 0 or 1."""
    for p in (Fraction(1, 2), Fraction(1, 4), Fraction(3, 4), Fraction(1, 32), Fraction(0), Fraction(1)):
        for k, m in ((2, 2), (4, 2), (4, 4), (7, 3), (16, 4)):
            value = value_table(
                [k], m, pass_rate=torch.tensor([float(p)], dtype=torch.float64), objective="knapsack_rl"
            )
            assert value.item() == pytest.approx(float(knapsack_rl_exact(p, k)), rel=1e-14, abs=1e-300)
    assert value_table([4], 2, pass_rate=torch.tensor([0.5]), objective="knapsack_rl").item() == 0.109375  # 14/16 x 1/8
    assert value_table([0, 1, 2], 2, pass_rate=torch.tensor([0.5]), objective="knapsack_rl").tolist() == [
        [0.0, 0.0, 0.0625]
    ]


@pytest.mark.parametrize(("alpha", "beta", "k"), [(1, 1, 2), (1, 1, 5), (3, 2, 4), (2, 9, 16), (17, 5, 8)])
def test_knapsack_rl_posterior_values_exact(alpha, beta, k):
    """Under a Beta(alpha, beta) posterior the value is the formula's expectation over the pass rate: a sum of Beta
    moments E[p^i (1 - p)^j] = B(alpha + i, beta + j) / B(alpha, beta), here in exact arithmetic. Beta(1, 1), k = 2:
    E[2 p^2 (1 - p)^3] = 1/30."""

    def beta_function(a: int, b: int) -> Fraction:
        return Fraction(math.factorial(a - 1) * math.factorial(b - 1), math.factorial(a + b - 1))

    def moment(i: int, j: int) -> Fraction:
        return beta_function(alpha + i, beta + j) / beta_function(alpha, beta)

    expected = moment(1, 2) - moment(k + 1, 2) - moment(1, k + 2)
    value = value_table(
        [k], 2, alpha=torch.tensor([float(alpha)]), beta=torch.tensor([float(beta)]), objective="knapsack_rl"
    )
    assert value.item() == pytest.approx(float(expected), rel=1e-12)
    if (alpha, beta, k) == (1, 1, 2):
        assert expected == Fraction(1, 30)


def test_the_objectives_allocate_an_example_step_as_documented():
    """p = .03, .15, .5, .85, .97, m = 4, 80 rollouts of 4..32 each: `variance` and `informative` treat easy and hard
    prompts alike, Knapsack RL's value moves rollouts from the easy to the hard ones. Each is the brute-force optimum
    (every choice of five sizes adding up to 80)."""
    p = torch.tensor([0.03, 0.15, 0.5, 0.85, 0.97], dtype=torch.float64)
    sizes = list(range(4, 33))
    grid = torch.cartesian_prod(*[torch.arange(len(sizes))] * 4)  # the first four prompts' size indices
    last = 80 - (grid + sizes[0]).sum(dim=1) - sizes[0]  # the fifth prompt's size index
    feasible = (last >= 0) & (last < len(sizes))
    choices = torch.cat([grid, last.unsqueeze(1)], dim=1)[feasible]
    expected = {"variance": [19, 17, 8, 17, 19], "informative": [22, 14, 7, 15, 22], "knapsack_rl": [30, 24, 9, 13, 4]}
    for objective, allocation in expected.items():
        values = value_table(sizes, 4, pass_rate=p, objective=objective)
        totals = values.gather(1, choices.T).sum(dim=0)
        best = choices[totals.argmax()] + sizes[0]
        assert allocate(values, sizes, 80, exact=True).tolist() == best.tolist() == allocation


@pytest.mark.parametrize("m", [2, 3])
def test_variance_and_informative_coincide_below_four_kept(m):
    """With m = 2 or 3 kept of pools of m or more, every varied pool keeps a squared deviation of 1/2 (m = 2) or 2/3
    (m = 3): `variance` is that constant times `informative`, so both allocate alike."""
    generator = torch.Generator().manual_seed(m)
    sizes = list(range(m, 17))
    p = torch.rand(6, generator=generator, dtype=torch.float64)
    alpha, beta = (
        1 + 9 * torch.rand(6, generator=generator, dtype=torch.float64),
        torch.rand(6, generator=generator, dtype=torch.float64) + 0.5,
    )
    for table in (dict(pass_rate=p), dict(alpha=alpha, beta=beta)):
        variance = value_table(sizes, m, **table)
        informative = value_table(sizes, m, objective="informative", **table)
        torch.testing.assert_close(variance, informative * (m - 1) / m, rtol=1e-12, atol=0)
        for budget in (6 * m, 40, 6 * 16):
            assert (
                allocate(variance, sizes, budget, exact=True).tolist()
                == allocate(informative, sizes, budget, exact=True).tolist()
            )
    # From m = 4 on they differ: of a varied pool, one success (or failure) keeps 3/4, more keep 1.
    assert (
        value_table([8], 4, pass_rate=torch.tensor([0.5])).item()
        > 0.75 * value_table([8], 4, pass_rate=torch.tensor([0.5]), objective="informative").item()
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(pass_rate=torch.tensor([1.5])), r"pass_rate must lie in \[0, 1\], got 1.5"),
        (dict(alpha=torch.tensor([1.0]), beta=torch.tensor([0.0])), "beta must be finite and > 0, got 0.0"),
        (dict(alpha=torch.tensor([1.0])), "give either pass_rate or both alpha and beta"),
        (dict(), "give either pass_rate or both alpha and beta"),
        (dict(pass_rate=torch.tensor([0.5]), objective="gain"), "unknown objective 'gain'"),
    ],
)
def test_value_table_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        value_table([2, 4], 2, **kwargs)


# ------------------------------------------------------------------ 2. the knapsack


def brute_force(
    values: list[list[float]], sizes: list[int], budget: int, count: int | None, exact: bool = False
) -> tuple[int, ...] | None:
    """The documented optimum over every choice: the largest value, then the fewest rollouts, then the smallest sum of
    squares, then the lexicographically smallest. Values are multiples of 1/8, so float sums are exact."""
    best_key, best = None, None
    for choice in itertools.product(range(len(sizes)), repeat=len(values)):
        chosen = [sizes[j] for j in choice]
        terms = [values[g][j] for g, j in enumerate(choice)]
        if sum(chosen) > budget or (exact and sum(chosen) != budget) or any(t == float("-inf") for t in terms):
            continue
        if count is not None and sum(size > 0 for size in chosen) != count:
            continue
        key = (-sum(terms), sum(chosen), sum(size * size for size in chosen), tuple(chosen))
        if best_key is None or key < best_key:
            best_key, best = key, tuple(chosen)
    return best


@pytest.mark.parametrize("seed", range(300))
def test_allocate_matches_brute_force(seed):
    rng = random.Random(seed)
    groups = rng.randint(1, 4)
    sizes = sorted(rng.sample(range(0, 7), rng.randint(1, 4)))
    values = [[float("-inf") if rng.random() < 0.1 else rng.randint(0, 6) / 8 for _ in sizes] for _ in range(groups)]
    if rng.random() < 0.3:  # identical prompts: ties decided by the spread and the order
        values = [values[0]] * groups
    budget = rng.randint(0, groups * sizes[-1])
    count = rng.choice([None, rng.randint(0, groups)])
    exact = rng.random() < 0.3
    expected = brute_force(values, sizes, budget, count, exact)
    if expected is None:
        with pytest.raises(ValueError, match="no choice of sizes"):
            allocate(torch.tensor(values), sizes, budget, count=count, exact=exact)
        return
    assert tuple(allocate(torch.tensor(values), sizes, budget, count=count, exact=exact).tolist()) == expected


@pytest.mark.parametrize("seed", range(50))
def test_allocate_reaches_the_best_total_on_real_valued_tables(seed):
    """Tables from the value model itself (no ties): the DP's total is the brute-force maximum."""
    generator = torch.Generator().manual_seed(seed)
    groups = 4
    sizes = [0, 2, 4, 6, 8]
    values = value_table(sizes, 2, pass_rate=torch.rand(groups, generator=generator, dtype=torch.float64))
    budget = int(torch.randint(0, groups * 8 + 1, (1,), generator=generator))
    chosen = allocate(values, sizes, budget)
    total = sum(values[g, sizes.index(k)].item() for g, k in enumerate(chosen.tolist()))
    best = max(
        sum(values[g, j].item() for g, j in enumerate(choice))
        for choice in itertools.product(range(len(sizes)), repeat=groups)
        if sum(sizes[j] for j in choice) <= budget
    )
    assert total == pytest.approx(best, rel=1e-12)
    assert chosen.sum().item() <= budget


def test_allocate_tie_rules():
    sizes = [2, 3, 4, 5]
    linear = torch.tensor([[2.0, 3.0, 4.0, 5.0]]).repeat(3, 1)  # value = size: every allocation of 13 ties
    assert allocate(linear, sizes, 13).tolist() == [4, 4, 5]  # most even spread, then lexicographically smallest
    flat = torch.zeros(3, 4)
    assert allocate(flat, sizes, 15).tolist() == [2, 2, 2]  # nothing to gain: the fewest rollouts
    assert allocate(flat, sizes, 14, exact=True).tolist() == [4, 5, 5]  # unless the whole budget must be spent


def test_allocate_is_not_greedy():
    """Steps in value (a pair shows variance only with both outcomes) defeat greedy marginal allocation."""
    sizes = [0, 1, 2, 3]
    values = torch.tensor([[0.0, 0.0, 1.0, 1.1], [0.0, 0.6, 0.6, 0.6]])
    # Greedy by marginal gain per rollout would give the first prompt 2 (gain 0.5 each), then the second 1 (0.6).
    assert allocate(values, sizes, 3).tolist() == [2, 1]
    assert allocate(values, sizes, 2).tolist() == [2, 0]
    assert allocate(values, sizes, 1).tolist() == [0, 1]


def test_allocate_with_a_count_chooses_which_prompts_to_generate():
    sizes = [0, 4, 8]
    values = torch.tensor([[0.0, 0.1, 0.2], [0.0, 0.9, 1.0], [0.0, 0.5, 0.9], [0.0, 0.0, 0.0]])
    assert allocate(values, sizes, 16, count=2).tolist() == [0, 8, 8, 0]
    assert allocate(values, sizes, 12, count=3).tolist() == [4, 4, 4, 0]
    assert allocate(values, sizes, 12, count=0).tolist() == [0, 0, 0, 0]


def test_allocate_a_realistic_step():
    """One process's step of the tiny comparison: 32 candidates, 16 trained, 16 x 16 rollouts, sizes 0 or 4..16."""
    sizes = [0, *range(4, 17)]
    values = value_table(sizes, 4, pass_rate=torch.linspace(0, 1, 32, dtype=torch.float64))
    chosen = allocate(values, sizes, 256, count=16)
    assert (chosen > 0).sum().item() == 16 and chosen.sum().item() <= 256
    assert chosen[0].item() == 0 and chosen[-1].item() == 0  # pass rates 0 and 1 teach nothing
    middle = chosen[14:18]
    assert (middle > 0).all() and (middle <= chosen[chosen > 0].max()).all()


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((torch.zeros(2, 3), [0, 2], 4), {}, r"values must be a \(prompts, 2 sizes\) tensor, got \(2, 3\)"),
        ((torch.zeros(2, 2), [2, 2], 4), {}, "sizes must be a non-empty, strictly increasing list"),
        ((torch.zeros(2, 2), [], 4), {}, "sizes must be a non-empty"),
        ((torch.zeros(2, 2), [0, 2], -1), {}, "budget must be an integer >= 0, got -1"),
        ((torch.zeros(2, 2), [0, 2], 2.0), {}, "budget must be an integer >= 0, got 2.0"),
        ((torch.full((2, 2), float("nan")), [0, 2], 4), {}, "values must be finite or -inf"),
        ((torch.zeros(2, 2), [0, 2], 4), {"count": 3}, r"count \(3\) exceeds the 2 prompts"),
        ((torch.zeros(2, 2), [2, 4], 3), {}, r"no choice of sizes \[2, 4\] for 2 prompts fits a budget of 3 rollouts"),
        ((torch.zeros(2, 2), [0, 4], 4), {"count": 2}, "with exactly 2 prompts above size 0"),
        ((torch.zeros(2, 2), [2, 4], 5), {"exact": True}, r"for 2 prompts adds up to a budget of 5 rollouts"),
    ],
)
def test_allocate_errors(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        allocate(*args, **kwargs)


# ------------------------------------------------------------------ 3. the pass-rate history


def test_history_counts_successes_at_the_threshold_and_fractions_without_one():
    scores = torch.tensor([[1.0, 0.0, 0.5, float("nan")], [0.25, 0.25, 0.25, 0.25]])
    # (successes per group, failures per group)
    assert [t.tolist() for t in count_outcomes(scores, 0.5)] == [[2.0, 0.0], [1.0, 4.0]]
    assert [t.tolist() for t in count_outcomes(scores, None)] == [[1.5, 1.0], [1.5, 3.0]]
    with pytest.raises(ValueError, match=r"score 1.5 of group 0, rollout 1 is outside \[0, 1\]"):
        count_outcomes(torch.tensor([[0.0, 1.5]]), None)


def test_history_posterior_and_decay():
    history = PassRateHistory(prior_successes=1.0, prior_failures=2.0, decay=0.5)
    history.observe(["a", "b"], torch.tensor([[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]))
    history.observe(["a"], torch.tensor([[0.0, 0.0, 0.0, 1.0]]))
    alpha, beta = history.posterior(["a", "b", "never"])
    assert alpha.tolist() == [1.0 + 0.5 * 3 + 1, 1.0, 1.0]
    assert beta.tolist() == [2.0 + 0.5 * 1 + 3, 2.0 + 4, 2.0]
    assert history.pass_rate(["never"]).item() == pytest.approx(1 / 3)
    assert history.seen(["a", "never"]).tolist() == [True, False]
    assert len(history) == 2


def test_zero_variance_and_skip_probabilities_exact():
    history = PassRateHistory(exploration=0.1)
    history.observe(["solved"], torch.ones(1, 8))  # Beta(9, 1)
    all_equal = beta_binomial_exact(8, 8, 9, 1) + beta_binomial_exact(8, 0, 9, 1)
    assert all_equal == Fraction(9, 17) + Fraction(9 * math.factorial(8) ** 2, math.factorial(17))
    assert history.zero_variance_probability(["solved"], 8).item() == pytest.approx(float(all_equal), rel=1e-12)
    skip = history.skip_probability(["solved", "unseen"], 8)
    assert skip.tolist() == pytest.approx([0.9 * float(all_equal), 0.0], rel=1e-12)
    assert PassRateHistory(exploration=1.0).skip_probability(["solved"], 8).item() == 0.0


def test_skips_are_drawn_at_their_probability():
    """Simulation with a known truth: 4000 prompts with one posterior are skipped at the predicted rate."""
    history = PassRateHistory(exploration=0.2, seed=3)
    ids = [str(i) for i in range(4000)]
    history.observe(ids, torch.tensor([[1.0] * 7 + [0.0]]).repeat(4000, 1))
    probability = history.skip_probability(ids[:1], 8).item()
    skipped = history.draw_skips(ids, 8).double().mean().item()
    assert abs(skipped - probability) < 4 * math.sqrt(probability * (1 - probability) / 4000)


def test_history_state_round_trips_bit_exactly():
    """Save mid-run (through torch.save, as a checkpoint would), restore into a fresh history: the posteriors and
    every later draw are bit-identical to the uninterrupted history's."""
    generator = torch.Generator().manual_seed(0)
    ids = [prompt_id(f"question {i}") for i in range(50)]
    original = PassRateHistory(decay=0.7, exploration=0.3, seed=11, success_threshold=None)
    original.observe(ids[:30], torch.rand(30, 8, generator=generator, dtype=torch.float64))
    original.draw_skips(ids, 8)
    buffer = io.BytesIO()
    torch.save(original.state_dict(), buffer)
    buffer.seek(0)
    restored = PassRateHistory(decay=0.7, exploration=0.3, seed=999, success_threshold=None)
    restored.load_state_dict(torch.load(buffer))
    for history in (original, restored):  # the same further steps on both
        history.observe(ids[20:], torch.full((30, 8), 1 / 3, dtype=torch.float64))
    assert torch.equal(original.draw_skips(ids, 8), restored.draw_skips(ids, 8))
    for left, right in zip(original.posterior(ids), restored.posterior(ids), strict=True):
        assert torch.equal(left, right)
    assert original.state_dict()["ids"] == restored.state_dict()["ids"]
    assert torch.equal(original.generator.get_state(), restored.generator.get_state())


def test_history_refuses_a_state_saved_with_other_settings():
    state = PassRateHistory(exploration=0.3).state_dict()
    with pytest.raises(ValueError, match=r"other settings: exploration 0.3 -> 0.1"):
        PassRateHistory(exploration=0.1).load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(exploration=1.5), r"exploration must be in \[0, 1\], got 1.5"),
        (dict(exploration=-0.1), r"exploration must be in \[0, 1\], got -0.1"),
        (dict(decay=0.0), r"decay must be in \(0, 1\], got 0.0"),
        (dict(prior_failures=0), "prior_failures must be a finite number > 0, got 0"),
        (dict(success_threshold=float("nan")), "success_threshold must be finite or None"),
    ],
)
def test_history_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PassRateHistory(**kwargs)


def test_history_needs_string_ids_and_matching_scores():
    history = PassRateHistory()
    with pytest.raises(TypeError, match="prompt ids must be str"):
        history.observe([3], torch.zeros(1, 2))
    with pytest.raises(ValueError, match=r"scores must be a \(2 prompts, rollouts\) tensor, got \(1, 2\)"):
        history.observe(["a", "b"], torch.zeros(1, 2))


def test_prompt_ids_are_stable_hashes():
    assert prompt_id("2+2=") == hashlib.sha256(b'"2+2="').hexdigest()
    assert prompt_id([{"role": "user", "content": "x"}]) == prompt_id([{"content": "x", "role": "user"}])
    assert prompt_id("a") != prompt_id("b")


# ------------------------------------------------------------------ 4. step plans


def test_screen_passes():
    nan = float("nan")
    scores = torch.tensor(
        [[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, nan, nan, nan], [0.0, 1.0, 0.0, 0.0]]
    )
    assert screen_passes(scores).tolist() == [True, False, False, False, True]
    assert screen_passes(scores, band=(0.25, 0.5)).tolist() == [False, False, False, False, True]
    assert screen_passes(scores, band=(0.0, 0.0)).tolist() == [False, False, True, False, False]
    assert screen_passes(scores, band=(0.75, 1.0)).tolist() == [True, True, False, True, False]
    with pytest.raises(ValueError, match=r"band must be \[low, high\] with 0 <= low <= high <= 1, got \[0.6, 0.4\]"):
        screen_passes(scores, band=(0.6, 0.4))


def test_plan_screening_extends_the_first_that_pass_in_order():
    scores = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    plan = plan_screening(scores, groups=2, pool_size=8, min_size=4)
    assert plan.chosen.tolist() == [1, 3]
    assert plan.sizes.tolist() == [8, 8]
    assert plan.qualified.tolist() == [True, True]


def test_plan_screening_fills_with_varied_then_the_rest_unextended():
    """Too few pass the band: the fill takes the varied screens first, then candidate order, at the screen's size;
    `extend` extends fills too (every process extends as many as the most that passed on any)."""
    scores = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    passes = screen_passes(scores, band=(0.0, 0.4))  # [F, T, F, T, T]: 1/3 and 0 pass
    plan = plan_screening(scores, groups=5, pool_size=8, min_size=2, passes=passes)
    assert plan.chosen.tolist() == [1, 3, 4, 2, 0]  # passing in order, then the varied one (2) before candidate 0
    assert plan.sizes.tolist() == [8, 8, 8, 3, 3]
    assert plan.qualified.tolist() == [True, True, True, False, False]
    plan = plan_screening(scores, groups=5, pool_size=8, min_size=2, passes=passes, extend=4)
    assert plan.sizes.tolist() == [8, 8, 8, 8, 3]
    nothing = torch.zeros(3, 2)
    plan = plan_screening(nothing, groups=2, pool_size=8, min_size=4)
    assert plan.chosen.tolist() == [0, 1] and plan.sizes.tolist() == [8, 8]  # a screen of 2 < m = 4: extended


def test_plan_screening_errors():
    with pytest.raises(ValueError, match=r"the screen \(8 rollouts\) must be smaller than the pool \(8\)"):
        plan_screening(torch.zeros(4, 8), groups=2, pool_size=8, min_size=2)
    with pytest.raises(ValueError, match="1 candidates cannot fill a step of 2 prompts"):
        plan_screening(torch.zeros(1, 2), groups=2, pool_size=8, min_size=2)
    varied = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="extend must lie between the 2 chosen that passed and all 3, got 1"):
        plan_screening(varied, groups=3, pool_size=8, min_size=2, extend=1)
    with pytest.raises(
        ValueError, match=r"a screen of 2 rollouts is smaller than the 4 selection keeps: .* got extend=2"
    ):
        plan_screening(varied, groups=3, pool_size=8, min_size=4, extend=2)


def test_plan_from_history_skips_then_fills_then_allocates():
    history = PassRateHistory(exploration=0.0, seed=5)
    ids = [prompt_id(i) for i in range(6)]
    solved = torch.ones(1, 8)
    for _ in range(100):  # prompts 0, 2 and 4 always solved: all-equal with probability ~0.99
        history.observe([ids[0], ids[2], ids[4]], solved.repeat(3, 1))
    history.observe([ids[1]], torch.tensor([[1.0, 0.0] * 4]))
    draws = torch.rand(6, generator=history.generator.clone_state(), dtype=torch.float64)
    probability = history.skip_probability(ids, 8)
    expected_skips = draws < probability
    plan, skipped = plan_from_history(history, ids, 4, [4, 8, 12], 32, 4, skip_at=8)
    assert skipped.tolist() == expected_skips.tolist()
    assert skipped.tolist()[1::2] == [False, False, False]  # never-seen and varied prompts are kept
    kept = [i for i in range(6) if not expected_skips[i]]
    fill = sorted((i for i in range(6) if expected_skips[i]), key=lambda i: (probability[i].item(), i))
    assert plan.chosen.tolist() == (kept + fill)[:4]
    alpha, beta = history.posterior([ids[i] for i in plan.chosen.tolist()])
    expected_sizes = allocate(value_table([4, 8, 12], 4, alpha=alpha, beta=beta), [4, 8, 12], 32, exact=True)
    assert plan.sizes.tolist() == expected_sizes.tolist() and plan.sizes.sum().item() == 32
    assert plan.qualified.tolist() == [not expected_skips[i] for i in plan.chosen.tolist()]


def test_plan_from_history_takes_skips_drawn_before_without_drawing():
    """A trainer draws the skips round by round for every process's candidates, then plans each process with them:
    the same plan as drawing them there, and the history's generator does not move."""
    history = PassRateHistory(exploration=0.0, seed=5)
    ids = [prompt_id(i) for i in range(6)]
    history.observe(ids[::2], torch.ones(3, 8))
    drawn = history.draw_skips(ids, 8)
    state = history.generator.get_state()
    plan, skipped = plan_from_history(history, ids, 4, [4, 8], 24, 4, skip_at=8, skipped=drawn)
    assert torch.equal(history.generator.get_state(), state) and torch.equal(skipped, drawn)
    replay = PassRateHistory(exploration=0.0, seed=5)
    replay.observe(ids[::2], torch.ones(3, 8))
    again, _ = plan_from_history(replay, ids, 4, [4, 8], 24, 4, skip_at=8)
    assert [t.tolist() for t in plan] == [t.tolist() for t in again]
    with pytest.raises(ValueError, match=r"skipped must be a \(6,\) bool tensor"):
        plan_from_history(history, ids, 4, [4, 8], 24, 4, skip_at=8, skipped=drawn[:3])


def test_plan_from_history_errors():
    history = PassRateHistory()
    with pytest.raises(ValueError, match="every size must hold the m = 4 rollouts"):
        plan_from_history(history, ["a", "b"], 2, [2, 4], 8, 4, skip_at=8)
    with pytest.raises(ValueError, match="1 candidates cannot fill a step of 2 prompts"):
        plan_from_history(history, ["a"], 2, [4], 8, 4, skip_at=8)


# ------------------------------------------------------------------ 5. ragged pools


@st.composite
def ragged(draw):
    """1-4 pools of 2-6 rewards from a few levels (ties), and an m every pool can give."""
    pools = [
        torch.tensor(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=2, max_size=6)), dtype=torch.float64)
        for _ in range(draw(st.integers(1, 4)))
    ]
    return pools, draw(st.integers(1, min(len(pool) for pool in pools)))


@SETTINGS
@given(ragged())
def test_ragged_pools_select_like_brute_force(case):
    pools, m = case
    rewards, valid = pad_pools(pools)
    assert valid.sum(dim=1).tolist() == [len(pool) for pool in pools]
    chosen = select_rollouts(rewards, m, valid=valid)
    for group, pool in enumerate(pools):
        values = pool.tolist()
        assert all(i < len(values) for i in chosen[group].tolist())
        best = max(deviation(subset) for subset in itertools.combinations(values, m))
        assert deviation([values[i] for i in chosen[group].tolist()]) == best


@SETTINGS
@given(ragged(), st.data())
def test_ragged_pools_spread_a_row_budget_like_brute_force(case, data):
    pools, _ = case
    rewards, valid = pad_pools(pools)
    choices = [[0, *range(2, len(pool) + 1)] for pool in pools]
    budget = data.draw(st.sampled_from(sorted({sum(sizes) for sizes in itertools.product(*choices)})))
    mask = select_batch(rewards, budget, valid=valid)
    assert not (mask & ~valid).any() and mask.sum().item() == budget
    captured = sum(deviation(pool[mask[g, : len(pool)]].tolist()) for g, pool in enumerate(pools))
    best = max(
        sum(
            max(deviation(subset) for subset in itertools.combinations(pool.tolist(), size)) if size else 0
            for pool, size in zip(pools, sizes, strict=True)
        )
        for sizes in itertools.product(*choices)
        if sum(sizes) == budget
    )
    assert captured == best


def test_pad_pools_and_histogram():
    rewards, valid = pad_pools([torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0.5])])
    assert valid.tolist() == [[True, True, True], [True, False, False]]
    assert rewards[0].tolist() == [1.0, 0.0, 1.0] and rewards[1, 0].item() == 0.5 and rewards[1, 1:].isnan().all()
    histogram = size_histogram(torch.tensor([0, 4, 4, 8, 16]), 16).tolist()
    assert histogram == [1, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]
