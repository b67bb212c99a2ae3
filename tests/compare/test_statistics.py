"""Every expected value here is worked out by hand in the comment beside it."""

import math

import numpy as np
import pytest

from pods_rl.compare.statistics import (
    SeedSpeedup,
    TimeToTarget,
    band,
    bracket_speedup,
    compare_to_baseline,
    geometric_mean_interval,
    mean_accuracy,
    mean_interval,
    peak,
    resolution_warnings,
    seed_speedup,
    time_to_target,
)

T_975_1 = 12.706204736174705  # Student t, 97.5% quantile, 1 degree of freedom (tables)
T_975_2 = 4.302652729749464  # ... 2 degrees of freedom
TIMES = [0, 10, 20, 30]


def test_peak_is_the_mean_of_each_seeds_highest_evaluation():
    assert peak([(TIMES, [0.1, 0.6, 0.5, 0.2]), (TIMES, [0.1, 0.3, 0.8, 0.7])]) == pytest.approx(0.7)


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (0.6, TimeToTarget(below=10, reached=20, crossing=15, censored=False)),  # 10 + (0.6-0.4)/(0.8-0.4) x 10
        (0.4, TimeToTarget(below=0, reached=10, crossing=10, censored=False)),  # lands on the evaluation at 10
        (0.2, TimeToTarget(below=None, reached=0, crossing=0, censored=False)),  # met before training
        (0.9, TimeToTarget(below=30, reached=None, crossing=30, censored=True)),  # never: more than 30 s
        (0.4 + 1e-13, TimeToTarget(below=0, reached=10, crossing=10, censored=False)),  # float averaging absorbed
    ],
)
def test_time_to_target_brackets_interpolates_and_censors(target, expected):
    hit = time_to_target(TIMES, [0.2, 0.4, 0.8, 0.6], target)
    assert hit.below == expected.below and hit.reached == expected.reached and hit.censored == expected.censored
    assert hit.crossing == pytest.approx(expected.crossing)


def test_time_to_target_takes_the_first_crossing_only():
    hit = time_to_target([0, 10, 20, 30, 40], [0.0, 0.8, 0.2, 0.2, 0.9], 0.5)
    assert (hit.below, hit.reached, hit.crossing) == (0, 10, pytest.approx(6.25))  # 0.5 / 0.8 x 10


BASE = TimeToTarget(below=20, reached=40, crossing=30, censored=False)
ARM = TimeToTarget(below=10, reached=20, crossing=15, censored=False)
BASE_CENSORED = TimeToTarget(below=60, reached=None, crossing=60, censored=True)
ARM_CENSORED = TimeToTarget(below=60, reached=None, crossing=60, censored=True)


@pytest.mark.parametrize(
    ("baseline", "arm", "estimate", "low", "high", "bound"),
    [
        (BASE, ARM, 2.0, 1.0, 4.0, "interpolated"),  # 30/15; earliest 20 / latest 20; latest 40 / earliest 10
        (BASE, ARM_CENSORED, 0.5, 0.0, 40 / 60, "at most"),  # 30/60; the arm may never get there; 40/60
        (BASE_CENSORED, ARM, 4.0, 3.0, None, "at least"),  # 60/15; 60/20; the baseline may never get there
        (BASE_CENSORED, ARM_CENSORED, 1.0, 0.0, None, "unknown"),  # 60/60 and nothing known
        (BASE, TimeToTarget(None, 0, 0, False), None, 0.0, None, "interpolated"),  # the arm needed no training
        (BASE, TimeToTarget(0, 10, 5, False), 6.0, 2.0, None, "interpolated"),  # 30/5; 20/10; the arm's earliest 0
    ],
)
def test_seed_speedup_bounds_follow_the_brackets(baseline, arm, estimate, low, high, bound):
    result = seed_speedup(baseline, arm)
    assert result.estimate == (None if estimate is None else pytest.approx(estimate))
    assert result.low == pytest.approx(low) and result.bound == bound
    assert result.high == (None if high is None else pytest.approx(high))


def test_mean_interval_is_students_t():
    result = mean_interval([0.1, 0.3])  # mean 0.2, std 0.1 sqrt 2, standard error 0.1
    assert (result.estimate, result.seeds) == (pytest.approx(0.2), 2)
    assert (result.low, result.high) == (pytest.approx(0.2 - 0.1 * T_975_1), pytest.approx(0.2 + 0.1 * T_975_1))
    single = mean_interval([0.5])
    assert (single.estimate, single.low, single.high, single.seeds) == (0.5, None, None, 1)


def test_geometric_mean_interval_is_t_on_the_logarithms():
    two = geometric_mean_interval([1.0, 4.0])  # logs 0, 2 ln 2: mean ln 2, std sqrt 2 ln 2, standard error ln 2
    assert two.estimate == pytest.approx(2.0)
    assert (two.low, two.high) == (pytest.approx(2 ** (1 - T_975_1)), pytest.approx(2 ** (1 + T_975_1)))
    three = geometric_mean_interval([2.0, 8.0, 4.0])  # logs (1, 3, 2) ln 2: mean 2 ln 2, std ln 2
    half = T_975_2 / math.sqrt(3)
    assert three.estimate == pytest.approx(4.0)
    assert (three.low, three.high) == (pytest.approx(4 * 2**-half), pytest.approx(4 * 2**half))
    assert geometric_mean_interval([3.0, 3.0]).low == pytest.approx(3.0)  # no spread: no width


def _seed(low: float, high: float | None, estimate: float | None = 1.0) -> SeedSpeedup:
    return SeedSpeedup(estimate=estimate, low=low, high=high, bound="interpolated")


def test_bracket_speedup_takes_every_seed_at_each_end_of_its_bracket():
    result = bracket_speedup([_seed(2.0, 4.0), _seed(0.5, 2.0)])
    # Lower bounds: logs +-ln 2, mean 0, standard error ln 2; upper: logs (2, 1) ln 2, mean 1.5 ln 2, error ln 2 / 2.
    assert result.low == pytest.approx(1.0) and result.low_interval == pytest.approx(2**-T_975_1)
    assert result.high == pytest.approx(math.sqrt(8)) and result.high_interval == pytest.approx(
        2 ** (1.5 + T_975_1 / 2)
    )
    assert (result.seeds_faster, result.seeds_slower, result.seeds_undecided, result.resolved) == (1, 0, 1, "no")


@pytest.mark.parametrize(
    ("seeds", "low", "low_interval", "high", "high_interval", "counts", "resolved"),
    [
        ([_seed(2.0, None), _seed(2.0, 3.0)], 2.0, 2.0, None, None, (2, 0, 0), "faster"),  # no spread: no width
        ([_seed(0.25, 0.5), _seed(0.25, 0.5)], 0.25, 0.25, 0.5, 0.5, (0, 2, 0), "slower"),
        ([_seed(0.0, 0.5), _seed(3.0, None)], 0.0, 0.0, None, None, (1, 1, 0), "no"),  # an arm that never got there
        ([_seed(3.0, 4.0)], 3.0, None, 4.0, None, (1, 0, 0), "no"),  # one seed: no interval, nothing resolved
        ([_seed(3.0, 3.0), _seed(0.0, None, estimate=None)], 3.0, None, 3.0, None, (1, 0, 0), "no"),  # undefined out
        ([_seed(1.0, 1.0), _seed(1.0, 1.0)], 1.0, 1.0, 1.0, 1.0, (0, 0, 2), "no"),  # a tie is neither
        ([_seed(0.0, 0.0), _seed(0.5, 1.0)], 0.0, 0.0, 0.0, 0.0, (0, 1, 1), "slower"),  # baseline met it untrained
    ],
)
def test_bracket_speedup_edges(seeds, low, low_interval, high, high_interval, counts, resolved):
    result = bracket_speedup(seeds)
    assert result.low == pytest.approx(low)
    assert result.low_interval == (None if low_interval is None else pytest.approx(low_interval))
    assert result.high == (None if high is None else pytest.approx(high))
    assert result.high_interval == (None if high_interval is None else pytest.approx(high_interval))
    assert (result.seeds_faster, result.seeds_slower, result.seeds_undecided) == counts
    assert result.resolved == resolved


def test_bracket_speedup_contains_every_interpolation():
    """Brute force: any crossing inside each run's bracket gives a geometric mean inside the brackets' range."""
    rng = np.random.default_rng(0)
    times = [0, 10, 20, 30, 40, 50]
    for _ in range(200):
        curves = [np.maximum.accumulate(rng.uniform(0, 1, (2, len(times))), axis=1) for _ in range(4)]
        for curve in curves:
            curve[:, 0] = 0.0  # both start below the target, as trained models do
        baseline = [(times, curve[0].tolist()) for curve in curves]
        arm = [(times, curve[1].tolist()) for curve in curves]
        result = compare_to_baseline(baseline, arm, 0.7)
        if result["speedup"] is None:
            continue
        brackets = result["speedup_by_brackets"]
        high = math.inf if brackets["high"] is None else brackets["high"]
        assert brackets["low"] - 1e-12 <= result["speedup"]["estimate"] <= high + 1e-12
        for seed in result["speedup_per_seed"]:
            if seed["estimate"] is not None:
                seed_high = math.inf if seed["high"] is None else seed["high"]
                assert seed["low"] - 1e-12 <= seed["estimate"] <= seed_high + 1e-12


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (20, 7.5 / 20),  # areas 2.5 (0-10) + 5 (10-20)
        (15, 5 / 15),  # 2.5 + 0.5 x 5
        (5, 0.625 / 5),  # the value at 5 is 0.25: 5 x 0.25 / 2
        (30, 12.5 / 30),  # held at 0.5 after the last evaluation
    ],
)
def test_mean_accuracy_is_the_area_over_the_window(end, expected):
    assert mean_accuracy([0, 10, 20], [0.0, 0.5, 0.5], end) == pytest.approx(expected)


def test_compare_to_baseline_pairs_seeds_and_keeps_the_censored_one():
    baseline = [(TIMES, [0.0, 0.4, 0.8, 0.8]), (TIMES, [0.0, 0.2, 0.4, 0.5])]  # crosses 0.6 at 15 s; never (> 30 s)
    arm = [(TIMES, [0.0, 0.8, 0.8, 0.8]), (TIMES, [0.0, 0.3, 0.6, 0.6])]  # at 7.5 s (0.6/0.8 x 10); at 20 s
    result = compare_to_baseline(baseline, arm, 0.6)
    assert [t["crossing"] for t in result["time_to_target"]] == pytest.approx([7.5, 20.0])
    first, second = result["speedup_per_seed"]
    assert (first["estimate"], first["low"], first["high"], first["bound"]) == (
        pytest.approx(2.0),  # 15 / 7.5
        1.0,  # 10 / 10
        None,  # the arm may have got there right after its start
        "interpolated",
    )
    assert (second["estimate"], second["low"], second["high"], second["bound"]) == (1.5, 1.5, None, "at least")
    assert result["speedup"]["estimate"] == pytest.approx(math.sqrt(3))  # geometric mean of 2 and 1.5
    assert (result["seeds_faster"], result["seeds_slower"], result["seeds_undefined"]) == (2, 0, 0)
    brackets = result["speedup_by_brackets"]  # lower bounds 1.0 and 1.5, both upper bounds open
    assert (brackets["low"], brackets["high"], brackets["seeds_faster"]) == (pytest.approx(math.sqrt(1.5)), None, 1)
    assert result["censored"] == {"arm": 0, "baseline": 1}
    # Areas over 0-30 s: baseline 2 + 6 + 8 = 16 and 1 + 3 + 4.5 = 8.5; arm 4 + 8 + 8 = 20 and 1.5 + 4.5 + 6 = 12.
    assert result["mean_accuracy_difference_per_seed"] == pytest.approx([4 / 30, 3.5 / 30])
    difference = result["mean_accuracy_difference"]
    half = T_975_1 * (0.5 / 30) / 2  # standard error: |4 - 3.5| / 30 / sqrt 2 / sqrt 2
    assert difference["estimate"] == pytest.approx(3.75 / 30)
    assert (difference["low"], difference["high"]) == (pytest.approx(3.75 / 30 - half), pytest.approx(3.75 / 30 + half))


def test_compare_to_baseline_uses_the_shorter_run_as_the_window():
    result = compare_to_baseline([([0, 10, 20], [0.0, 0.5, 0.5])], [([0, 10], [0.0, 1.0])], 0.4)
    assert result["mean_accuracy_window"] == [10]
    assert result["mean_accuracy_difference_per_seed"] == pytest.approx([0.5 - 0.25])


def test_resolution_warnings():
    arm = [
        (TIMES, [0.0, 0.8, 0.8, 0.8]),  # at the first evaluation after the start
        ([0, 10, 20, 30, 40], [0.0, 0.1, 0.2, 0.3, 0.9]),  # crosses 0.6 at 35 s in [30, 40]: 10 > 35 / 4
        ([0, 10, 20, 30, 40, 50], [0.0, 0.1, 0.2, 0.3, 0.4, 0.9]),  # at 44 s in [40, 50]: 10 < 44 / 4, fine
        (TIMES, [0.0, 0.1, 0.2, 0.3]),  # censored: no resolution warning
    ]
    warnings = resolution_warnings("pods", [0, 1, 2, 3], arm, 0.6, baseline=False)
    assert len(warnings) == 2
    assert warnings[0].startswith("pods, seed 0 reaches the target at its first evaluation (10.0 s)")
    assert warnings[1].startswith("pods, seed 1 crosses the target between evaluations at 30.0 and 40.0 s")
    last = resolution_warnings("grpo", [5], [(TIMES, [0.0, 0.2, 0.4, 0.7])], 0.6, baseline=True)
    assert len(last) == 1 and "only at its last evaluation (30.0 s)" in last[0]
    assert resolution_warnings("grpo", [5], [(TIMES, [0.0, 0.2, 0.4, 0.7])], 0.6, baseline=False)[0].startswith(
        "grpo, seed 5 crosses"  # the same run as an arm: the bracket [20, 30] is wider than 26.7 / 4
    )
    assert resolution_warnings("x", [0], [(TIMES, [0.9, 0.9, 0.9, 0.9])], 0.6, baseline=False)[0].startswith(
        "x, seed 0 reaches the target at its first evaluation (0.0 s)"
    )


def test_band_interpolates_onto_the_union_of_times():
    result = band([([0, 10, 20], [0.0, 0.4, 0.8]), ([0, 5, 10], [0.2, 0.6, 0.6])])
    assert result["train_seconds"] == [0, 5, 10, 20]
    assert result["mean"] == pytest.approx([0.1, 0.4, 0.5, 0.7])  # the second seed is held at 0.6 after t = 10
    assert result["min"] == pytest.approx([0.0, 0.2, 0.4, 0.6])
    assert result["max"] == pytest.approx([0.2, 0.6, 0.6, 0.8])
