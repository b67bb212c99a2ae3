"""`pods advise`'s forecast (`pods_rl.advice.forecast`): exact closed forms on a small case, unbiased per-prompt
estimates, and every step figure against brute-force enumerations that run the trainer's own rules (selection,
dynamic sampling's rounds, screening's plan, the history's skips)."""

import itertools
import math
from fractions import Fraction

import pytest
import torch

from pods_rl.advice import report
from pods_rl.advice.forecast import (
    METHODS,
    Setup,
    all_equal_probability,
    bootstrap,
    forecast,
    graded_share,
    hypergeometric_pmf,
    prompt_terms,
    rate_terms,
    rounds_until_full,
    skip_given_history,
    step_figures,
)
from pods_rl.compare.cost_model import StepCost
from pods_rl.core.allocation import PassRateHistory, binomial_pmf, plan_screening, screen_passes
from pods_rl.core.dynamic_sampling import another_round_needed, plan_groups
from pods_rl.core.selection import select_rollouts


def squared_deviation(rewards) -> float:
    mean = sum(rewards) / len(rewards)
    return sum((r - mean) ** 2 for r in rewards)


def by_name(forecasts):
    return {f.name: f for f in forecasts}


def test_the_hypergeometric_estimate_is_unbiased_where_powers_of_s_over_k_are_not():
    for samples, k, p in itertools.product((4, 7), (1, 2, 4), (0.0, 0.3, 0.5, 1.0)):
        weights = binomial_pmf(samples, torch.tensor([p], dtype=torch.float64))[0]
        mean = sum(w * hypergeometric_pmf(samples, s, k) for s, w in enumerate(weights))
        assert torch.allclose(mean, binomial_pmf(k, torch.tensor([p], dtype=torch.float64))[0], atol=1e-14)
    # One success of 4: a group of 2 varies with probability 1/2 (3 of the 6 pairs hold the success), not 3/8.
    assert hypergeometric_pmf(4, 1, 2).tolist() == [0.5, 0.5, 0.0]


def test_small_case_equals_the_closed_form():
    """Pass rates 0, 1/4, 1/2 and 1 read from exactly 0, 1, 2 and 4 passes of K = n = 4, m = 2, 2 prompts a step, up
    to 3 rounds: every figure of GRPO, GRPO n/n, PODS, dynamic sampling and screening computed by hand."""
    setup = Setup(n=4, m=2, prompts_per_step=2, max_generation_rounds=3)
    got = by_name(forecast([0, 1, 2, 4], [4] * 4, setup))
    # A group of 2 of the 4 sampled varies with probability 0, 3/6, 4/6, 0 and then keeps 1/2 of squared deviation.
    q = Fraction(0 + Fraction(1, 2) + Fraction(2, 3) + 0) / 4  # 7/24
    assert got["grpo"].informative_share == pytest.approx(float(q), abs=1e-15)
    assert got["grpo"].signal == pytest.approx(float(2 * q / 2), abs=1e-15)  # G x E[D] = 2 x 7/48
    assert got["grpo"].variance_per_row == pytest.approx(7 / 96, abs=1e-15)
    assert (got["grpo"].generated, got["grpo"].trained, got["grpo"].rounds) == (4, 4, 1)
    # K = n: the pool is the sample. PODS keeps one success and one failure of 1 or 2 successes: 1/2 each.
    assert got["pods"].informative_share == pytest.approx(1 / 2)
    assert got["pods"].signal == pytest.approx(2 * (1 / 2 + 1 / 2) / 4)
    assert (got["pods"].generated, got["pods"].trained) == (8, 4)
    # GRPO n/n keeps s (4 - s) / 4: 3/4 and 1.
    assert got["grpo-pool"].signal == pytest.approx(2 * (3 / 4 + 1) / 4)
    assert got["grpo-pool"].variance_per_row == pytest.approx(7 / 64)
    assert (got["grpo-pool"].generated, got["grpo-pool"].trained) == (8, 8)

    def dynamic(share: float, size: int, kept_per_varied: float):
        rounds = 1 + (1 - share**2) + ((1 - share) ** 4 + 4 * share * (1 - share) ** 3)  # P(T_1 < 2), P(T_2 < 2)
        varied = 2 - 2 * (1 - share) ** 6 - 6 * share * (1 - share) ** 5  # E[min(T_3, 2)]
        return rounds * 2 * size, rounds, varied / 2, varied * kept_per_varied

    for name, expected in (
        ("grpo-ds", dynamic(float(q), 2, 1 / 2)),
        ("pods-ds", dynamic(1 / 2, 4, 1 / 2)),
    ):
        f = got[name]
        assert (f.generated, f.rounds, f.informative_share, f.signal) == pytest.approx(expected, abs=1e-14)
    assert got["pods-ds"].rounds == pytest.approx(33 / 16) and got["pods-ds"].signal == pytest.approx(15 / 16)
    # Screening 2 of 4 (m = 2): a screen varies exactly as a group of 2 does; the passing pools keep 1/2, the fills
    # (all-equal screens, kept whole) nothing; generation: the screens, then 2 more rollouts of each passing prompt.
    generated, rounds, share, signal = dynamic(float(q), 2, 1 / 2)
    varied = share * 2
    f = got["pods-screen"]
    assert (f.generated, f.rounds, f.informative_share, f.signal) == pytest.approx(
        (generated + 2 * varied, rounds, share, signal), abs=1e-14
    )


def test_the_history_holds_the_trainers_skip_probabilities():
    """After one pool of n with a successes, `PassRateHistory` skips with (1 - exploration) x the Beta-binomial chance
    of an all-equal pool: the forecast's table, for each a."""
    setup = Setup(n=4, m=2, prompts_per_step=2, history_exploration=0.2, history_prior=(1.0, 2.0))
    history = PassRateHistory(prior_successes=1.0, prior_failures=2.0, exploration=0.2)
    for a in range(5):
        history.observe([f"prompt {a}"], torch.tensor([[1.0] * a + [0.0] * (4 - a)]))
    ids = [f"prompt {a}" for a in range(5)]
    assert torch.allclose(skip_given_history(setup), history.skip_probability(ids, 4), atol=1e-13)


@pytest.mark.parametrize(("n", "m", "screen"), [(4, 2, 2), (4, 3, 2), (5, 3, 3)])
def test_every_estimate_is_unbiased(n, m, screen):
    """For every per-prompt term (K = 2n, so the history's too), the mean of the estimate over the Binomial(K, p) count
    of passes equals the term at the true pass rate."""
    setup = Setup(n=n, m=m, prompts_per_step=2, screen_size=screen)
    samples = 2 * n
    estimates = prompt_terms(list(range(samples + 1)), [samples] * (samples + 1), setup)
    for p in (0.0, 0.13, 0.5, 0.77, 1.0):
        weights = binomial_pmf(samples, torch.tensor([p], dtype=torch.float64))[0]
        truth = rate_terms([p], setup)
        for key, value in truth.items():
            assert float(weights @ estimates[key]) == pytest.approx(float(value[0]), abs=1e-12), key


def test_kept_variance_equals_an_enumeration_over_all_subsets():
    """E[squared deviation] of GRPO's m, GRPO's n and the max-variance m of n (the best of every m-subset), and the
    chance that a group varies, by enumerating every 0/1 pool at pass rate p."""
    n, m = 5, 3
    setup = Setup(n=n, m=m, prompts_per_step=1)
    for p in (0.2, 0.5, 0.9):
        expected = dict.fromkeys(("signal_m", "signal_pool", "signal_pods", "vary_m", "vary_n"), 0.0)
        for pool in itertools.product((0.0, 1.0), repeat=n):
            weight = p ** sum(pool) * (1 - p) ** (n - sum(pool))
            expected["signal_pods"] += weight * max(map(squared_deviation, itertools.combinations(pool, m)))
            expected["signal_pool"] += weight * squared_deviation(pool)
            expected["vary_n"] += weight * (len(set(pool)) > 1)
            expected["signal_m"] += weight * squared_deviation(pool[:m])
            expected["vary_m"] += weight * (len(set(pool[:m])) > 1)
        terms = rate_terms([p], setup)
        for key, value in expected.items():
            assert float(terms[key][0]) == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("share", [0.0, 0.3, 0.75, 1.0])
def test_dynamic_sampling_rounds_follow_the_trainers_rule(share):
    """Rounds of G = 2 candidates that vary with probability q, at most 3: every outcome enumerated, the rounds run
    and the varied groups trained decided by `another_round_needed` and `plan_groups`."""
    groups, max_rounds = 2, 3
    rounds_expected = kept_expected = 0.0
    for outcome in itertools.product((False, True), repeat=groups * max_rounds):
        weight = math.prod(share if varied else 1 - share for varied in outcome)
        masks = [torch.tensor([outcome[:groups]])]
        while another_round_needed(masks, max_rounds):
            start = len(masks) * groups
            masks.append(torch.tensor([outcome[start : start + groups]]))
        plan = plan_groups(masks)[0]
        rounds_expected += weight * len(masks)
        kept_expected += weight * sum(bool(masks[r][0, g]) for r, g in plan.tolist())
    rounds, kept = rounds_until_full(torch.tensor([share], dtype=torch.float64), groups, max_rounds)
    assert (float(rounds[0]), float(kept[0])) == pytest.approx((rounds_expected, kept_expected), abs=1e-12)


@pytest.mark.parametrize(("n", "m", "screen", "groups"), [(3, 2, 2, 2), (4, 3, 2, 1)])
def test_screening_follows_the_trainers_plan(n, m, screen, groups):
    """Screening of candidates at pass rate p, 2 rounds at most: every candidate's screen enumerated (its first k
    rollouts) and every extension of a chosen one (the rest of its pool), the plan made by `plan_screening`, the kept
    rows chosen by `select_rollouts`: expected rollouts generated, rounds, informative groups and kept squared
    deviation. Both branches: fills kept unextended (k >= m), and every trained prompt extended (k < m)."""
    max_rounds, p = 2, 0.4
    setup = Setup(n=n, m=m, prompts_per_step=groups, max_generation_rounds=max_rounds, screen_size=screen)

    def chance(bits) -> float:
        return p ** sum(bits) * (1 - p) ** (len(bits) - sum(bits))

    def kept(pool: tuple) -> tuple[float, float]:  # squared deviation and variation of the m rows selection keeps
        rows = torch.tensor([pool])
        chosen = rows[0, select_rollouts(rows, m)[0]].tolist()
        return squared_deviation(chosen), float(len(set(chosen)) > 1)

    expected = dict.fromkeys(("generated", "rounds", "informative", "signal"), 0.0)
    candidates = groups * max_rounds
    for bits in itertools.product((0.0, 1.0), repeat=screen * candidates):
        screens = torch.tensor(bits).view(candidates, screen)
        passes = []
        while True:
            passes.append(screen_passes(screens[len(passes) * groups : (len(passes) + 1) * groups]).view(1, groups))
            if not another_round_needed(passes, max_rounds):
                break
        ran = len(passes) * groups
        plan = plan_screening(screens[:ran], groups, n, m, passes=torch.cat(passes, dim=1)[0])
        signal = informative = 0.0
        for candidate, size in zip(plan.chosen.tolist(), plan.sizes.tolist(), strict=True):
            screen_bits = tuple(screens[candidate].tolist())
            for extension in itertools.product((0.0, 1.0), repeat=size - screen):  # one empty one when not extended
                deviation, varied = kept(screen_bits + extension)
                signal += chance(extension) * deviation
                informative += chance(extension) * varied
        extended = int((plan.sizes == n).sum())
        for key, value in (
            ("generated", ran * screen + extended * (n - screen)),
            ("rounds", len(passes)),
            ("informative", informative),
            ("signal", signal),
        ):
            expected[key] += chance(bits) * value
    figures = step_figures(rate_terms([p], setup), setup)["pods-screen"]
    for key, value in expected.items():
        assert float(figures[key][0]) == pytest.approx(value, abs=1e-12), key


def test_a_step_cost_prices_each_method_and_the_break_even_share():
    setup = Setup(n=8, m=2, prompts_per_step=4)
    cost = StepCost("test", "by hand", 0.5, 0.01, 0.1, 8)  # c, a, b at GRPO's 4 x 2 = 8 rows: no rescaling
    forecasts = by_name(forecast([1, 3, 5, 8, 0, 2], [8] * 6, setup, cost))
    for f in forecasts.values():
        assert f.seconds == pytest.approx(0.5 + 0.01 * f.generated + 0.1 * f.trained)
        assert f.signal_per_second == pytest.approx(f.signal / f.seconds)
    versus = report.versus_baseline(list(forecasts.values()))
    grpo, pods = forecasts["grpo"], forecasts["pods"]
    assert versus["pods"]["break_even_share"] == pytest.approx(grpo.seconds / pods.seconds)  # when_pods_pays'
    assert versus["pods"]["forecast_step_share"] == pytest.approx(grpo.signal / pods.signal)
    assert versus["pods"]["signal_per_second"] == pytest.approx(pods.signal_per_second / grpo.signal_per_second)
    # The generation cost at which the runner-up catches the first: there both earn the same signal per second.
    first, second = report.ranking(list(forecasts.values()))[:2]
    factor = report.generation_flip(first, second, cost, grpo.trained)
    assert factor is not None
    scaled = StepCost("test", "by hand", 0.5, 0.01 * factor, 0.1, 8)
    rescored = by_name(forecast([1, 3, 5, 8, 0, 2], [8] * 6, setup, scaled))
    assert rescored[first.name].signal_per_second == pytest.approx(rescored[second.name].signal_per_second)
    # A step cost without an update cost prices only the methods that train GRPO's rows.
    paper = StepCost("paper", "no update cost", 7.0, 0.05, None, 16)
    priced = by_name(forecast([1, 3, 5, 8], [8] * 4, setup, paper))
    assert priced["grpo-pool"].seconds is None and priced["pods"].seconds == pytest.approx(7.0 + 0.05 * 2 * 8 * 4)


def test_the_paragraph_names_the_first_method_and_when_it_would_flip():
    setup = Setup(n=16, m=4, prompts_per_step=4)
    cost = StepCost("test", "cheap generation", 0.0, 0.001, 0.1, 16)
    counts = [1, 0, 15, 2, 16, 0, 1, 3]  # mostly hard or easy prompts: groups of 4 rarely vary
    forecasts = forecast(counts, [16] * len(counts), setup, cost)
    first = report.ranking(forecasts)[0]
    text = report.paragraph(forecasts, cost, {}, "On this machine")
    share = report.versus_baseline(forecasts)[first.name]["break_even_share"]
    assert first.name != "grpo" and f"ranks {first.label} first" in text
    assert f"{first.label} pays here if it needs fewer than {share:.0%} of GRPO m/m's steps" in text


def test_the_bootstrap_over_prompts_is_seeded_and_collapses_on_identical_prompts():
    setup = Setup(n=4, m=2, prompts_per_step=2)
    counts = [0, 1, 2, 3, 4, 2, 1]
    first = bootstrap(counts, [4] * len(counts), setup, resamples=300, seed=3)
    assert first == bootstrap(counts, [4] * len(counts), setup, resamples=300, seed=3)
    assert set(first) == set(METHODS) and first["grpo"] == (1.0, 1.0)
    same = bootstrap([2] * 5, [4] * 5, setup, resamples=50)
    point = by_name(forecast([2] * 5, [4] * 5, setup))
    assert same["pods"] == pytest.approx((point["pods"].signal / point["grpo"].signal,) * 2)
    low, high = first["pods-ds"]
    assert low < high


def test_graded_rewards_that_vary_while_passes_do_not():
    # Rewards 1.1, 1.0 (passes) and 0.1, 0.0 (failures): a pair is all-pass or all-fail with probability 2/6 and
    # all-equal in reward never; with 1.0, 1.0, 0.0, 0.0 only the pass/fail variation is left.
    assert graded_share([[1, 1, 1, 1]], [2], [4], 2) == pytest.approx(1 / 3)
    assert graded_share([[2, 2]], [2], [4], 2) == pytest.approx(0.0)
    assert all_equal_probability([3, 1], 2) == pytest.approx(3 / 6)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n": 4, "m": 4}, "2 <= m < n"),
        ({"n": 4, "m": 2, "screen_size": 4}, "screen_size must satisfy 2 <= screen_size < n"),
        ({"n": 4, "m": 2, "history_exploration": 1.5}, "history_exploration must lie in [0, 1]"),
        ({"n": 4, "m": 2, "prompts_per_step": 0}, "prompts_per_step must be an integer >= 1"),
    ],
)
def test_a_setup_that_cannot_be_forecast_is_refused(fields, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Setup(**{"prompts_per_step": 2, **fields})


def test_counts_below_n_are_refused():
    with pytest.raises(ValueError, match="K >= n = 4"):
        prompt_terms([1], [3], Setup(n=4, m=2, prompts_per_step=1))


def test_prompts_that_never_vary_give_no_signal_and_the_advice_says_so():
    setup = Setup(n=4, m=2, prompts_per_step=2, max_generation_rounds=3)
    cost = StepCost("test", "by hand", 0.0, 0.01, 0.02, 4)
    forecasts = by_name(forecast([0, 4, 0], [4] * 3, setup, cost))
    assert all(f.signal == 0 and f.informative_share == 0 for f in forecasts.values())
    assert forecasts["pods-ds"].rounds == 3 and forecasts["pods-ds"].generated == 3 * 2 * 4  # every round runs
    text = report.paragraph(list(forecasts.values()), cost, {}, "On this machine")
    assert text.startswith("On this machine, no method gets a learning signal from the sampled prompts")
