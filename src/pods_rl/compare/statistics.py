"""What a comparison can claim from its evaluation curves: a target set by the baseline's gain, times to target with
censoring, a speedup with an interval whose coverage is checked by simulation, and window-mean differences.

Pure functions of evaluation curves (x in training seconds or in optimizer steps, accuracies in [0, 1]); no
knowledge of arms, folders or files. Seeds are paired by position (curve i of every arm is seed i) for the window
mean and the per-seed table; the speedup compares the two arms' seeds as two samples.

- Target: `base + fraction x (plateau - base)`, a fraction of the baseline's gain. Its base is the mean over seeds
  of the first evaluation (before training); its plateau the mean over seeds of each curve's mean accuracy over the
  last quarter of the window (up to the end of the shortest baseline run). Both are means of many evaluations, so
  no single noisy evaluation sets the target (the highest evaluation of each seed did, before). Where the baseline
  gained nothing (flat, or it degraded), the same fraction of the largest gain among the other arms, from the
  baseline's start (`comparison_target`).
- Time to target of one run: the bracket [last evaluation below the target, first at or above it] and the
  linearly interpolated crossing inside it; a run that never reaches the target is censored at its last
  evaluation (it needed more than that).
- Speedup (`SPEEDUP_METHOD`): the factor s by which the arm's times to target, multiplied by s, match the
  baseline's. For each candidate s, the arm's evaluation times are multiplied by s; whichever arm's evaluations
  are denser in that time by more than THIN_ABOVE is thinned to the nearest of the other's spacing, by at most a
  factor THIN_AT_MOST (so that both are read at the same resolution and evaluation noise makes neither cross early
  more often); every run is censored at the common horizon (the shorter of the baseline's and the scaled arm's
  runs); and a Gehan two-sample statistic (every arm run against every baseline run: +1 when the arm's crossing is
  earlier, -1 when later, 0 for ties or two runs censored) is referred to its exact permutation distribution over
  all splits of the runs into two groups. The p-value is the test at s = 1, which on the clock's own axis (one grid
  for every arm) is the plain test on every evaluation, and a verdict's side is the sign of its statistic there.
  The speedups the test does
  not reject at the 5% level need not form one interval (thinning and the horizon make the p-value jump with s):
  all of them are kept (`Speedup.accepted`), and the interval reported is the piece that holds the estimate, which
  is where the statistic changes sign (nearest to 1, on the side the test leans to there). Censored runs rank
  after every run that reached the target and tie with each other: a seed where neither arm reached the target
  counts for neither. Its coverage is checked by simulation (`pods_rl.compare.simulation`,
  benchmarks/compare_coverage.py); `pods_rl.compare.curve_fit` reads a speedup from every evaluation instead.
- Mean accuracy over the window: the area under the linearly interpolated curve from the first evaluation to the
  end of the shorter run of the pair, divided by the window's length; the paired difference has a Student-t
  interval and p-value (`window_difference`: Welch's t on each run's mean where the seed counts differ).
- Several comparisons: `holm` adjusts their p-values (Holm-Bonferroni); a verdict is drawn from the adjusted one.
  The permutation test's p-values are discrete (`least_p_value`), so few seeds cannot resolve a time to target
  however large the speedup; `seeds_to_resolve` says how many can, given the family's size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy import stats

LEVEL = 0.95  # of every interval
ALPHA = 1 - LEVEL
TOLERANCE = 1e-12  # an accuracy this close below the target reaches it (float averaging over examples)
WIDE_BRACKET = 0.25  # a bracket wider than this fraction of the time it bounds is flagged
PLATEAU_SHARE = 0.25  # the plateau is the mean curve over this last share of the window
EXACT_SPLITS = 20_000  # enumerate every split of the runs up to this many (8 seeds per arm: 12,870)
SAMPLED_SPLITS = 5_000  # beyond: this many random splits (and the observed one)
SEARCH = (1 / 64, 64)  # the speedups the test is scanned over; an interval reaching an end is open there
SCAN_STEP = 2 ** (1 / 8)  # between scanned speedups (9%)
BISECTIONS = 5  # halvings of a SCAN_STEP bracket: an interval end to 0.3%
# The denser grid is thinned by at most this factor: far from the truth the test rejects without it, and a grid thinned
# further keeps little more than a run's start and end, which say nothing about a curve that rises and falls.
THIN_AT_MOST = 4.0
# ...and only where it is denser by more than this factor. On the clock's own axis the arms share one grid (their
# spacings differ by a step's delay at most), so the test at s = 1, which gives the p-value and the side of a verdict,
# is the plain test on every evaluation. Grids that differ more (the steps of a comparison clocked by seconds, where
# one arm takes more steps between evaluations) are thinned at every s alike, s = 1 included: the plain test there
# would let the denser arm cross early (a concave curve interpolated over a coarse bracket crosses late).
THIN_ABOVE = 1.25

SPEEDUP_METHOD = (
    "two-sample permutation test of a time-scale factor s (Gehan statistic on the interpolated crossings, every run "
    "censored at the common horizon, an evaluation grid denser by more than "
    f"{THIN_ABOVE:g}x thinned to the other's spacing in scaled time, at most {THIN_AT_MOST:g}x), "
    f"inverted for a {LEVEL:.0%} interval (the piece of the accepted speedups that holds the estimate); the "
    "estimate is where the statistic changes sign; a verdict is the test at s = 1 and the sign of its statistic"
)

Curve = tuple[Sequence[float], Sequence[float]]  # one run's evaluations: (seconds or steps, accuracies)
# The key of an evaluation record that each comparison clock reads a curve's times from.
CLOCK_AXES = {"seconds": "train_seconds", "steps": "step"}


def peak(curves: Sequence[Curve]) -> float:
    """The mean over seeds of each seed's highest evaluation (reported; no longer the target's basis)."""
    return float(np.mean([max(values) for _, values in curves]))


def mean_accuracy(times: Sequence[float], values: Sequence[float], end: float, start: float | None = None) -> float:
    """The area under the linearly interpolated curve from `start` (default: its first time) to `end`, divided by
    the length."""
    times_array = np.asarray(times, dtype=float)
    start = float(times_array[0]) if start is None else start
    inside = [t for t in times_array if start < t < end]
    grid = np.array([start, *inside, end], dtype=float)
    curve = np.interp(grid, times_array, np.asarray(values, dtype=float))
    if grid[-1] <= grid[0]:
        return float(curve[0])
    area = float(np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(grid)))
    return area / float(grid[-1] - grid[0])


@dataclass(frozen=True)
class Target:
    """A target accuracy: `fraction` of a gain from `base` to `plateau` (None for an absolute one); the gain is the
    baseline's, or, where the baseline gained nothing, the arm's named by `of`."""

    accuracy: float
    fraction: float | None
    base: float | None
    plateau: float | None
    of: str | None = None  # whose gain, when not the baseline's


def gain_target(baseline: Sequence[Curve], fraction: float) -> Target | None:
    """`fraction` of the baseline's gain; None when the baseline gained nothing (its plateau is not above its base)."""
    base, plateau = _start_and_plateau(baseline)
    if plateau <= base:
        return None
    return Target(base + fraction * (plateau - base), fraction, base, plateau)


def _start_and_plateau(curves: Sequence[Curve]) -> tuple[float, float]:
    """The mean first evaluation and the mean over runs of each curve's mean over the last PLATEAU_SHARE of the
    window (up to the end of the shortest run)."""
    end = min(times[-1] for times, _ in curves)
    start = (1 - PLATEAU_SHARE) * end
    base = float(np.mean([values[0] for _, values in curves]))
    plateau = float(np.mean([mean_accuracy(times, values, end, start) for times, values in curves]))
    return base, plateau


def comparison_target(baseline: Sequence[Curve], arms: dict[str, Sequence[Curve]], fraction: float) -> Target | None:
    """`fraction` of the baseline's gain; where the baseline gained nothing (it stayed flat or degraded), `fraction`
    of the largest gain among the other arms, from the baseline's start, so that an arm that learned is still timed
    (the baseline then never reaches the target, and the speedups are open above). None when no arm gained."""
    target = gain_target(baseline, fraction)
    if target is not None:
        return target
    base = _start_and_plateau(baseline)[0]
    plateaus = {name: _start_and_plateau(curves)[1] for name, curves in arms.items() if len(curves)}
    best = max(plateaus, key=plateaus.__getitem__, default=None)
    if best is None or plateaus[best] <= base:
        return None
    return Target(base + fraction * (plateaus[best] - base), fraction, base, plateaus[best], of=best)


@dataclass(frozen=True)
class TimeToTarget:
    """When one run reached the target, to the resolution of its evaluations."""

    below: float | None  # the last evaluation below the target before it was reached; None: reached at the first
    reached: float | None  # the first evaluation at or above the target; None: never (censored)
    crossing: float  # interpolated crossing; for a censored run, its last evaluation (a lower bound)
    censored: bool

    @property
    def low(self) -> float:
        """The earliest the target can have been reached (before the first evaluation: at 0)."""
        return self.crossing if self.censored else (self.below or 0.0)


def time_to_target(times: Sequence[float], values: Sequence[float], target: float) -> TimeToTarget:
    """The bracket around the first crossing of `target`, its interpolation, or censoring at the last time."""
    for index, (time, value) in enumerate(zip(times, values, strict=True)):
        if value >= target - TOLERANCE:
            if index == 0:
                return TimeToTarget(below=None, reached=float(time), crossing=float(time), censored=False)
            before, previous = float(times[index - 1]), float(values[index - 1])
            fraction = (target - previous) / (value - previous)
            crossing = before + min(max(fraction, 0.0), 1.0) * (float(time) - before)
            return TimeToTarget(below=before, reached=float(time), crossing=crossing, censored=False)
    return TimeToTarget(below=float(times[-1]), reached=None, crossing=float(times[-1]), censored=True)


@dataclass(frozen=True)
class SeedSpeedup:
    """One seed: the baseline's time to target over the arm's, and what its brackets decide.

    verdict: "faster" (the arm's whole bracket lies before the baseline's, censoring included), "slower", "undecided"
    (the brackets overlap) or "neither reached" (both censored: no direction).
    """

    estimate: float | None  # interpolated crossings' ratio, both runs having reached the target; else None
    low: float | None  # the least the brackets allow; None: no bound (neither reached)
    high: float | None  # the most; None: unbounded
    verdict: str


def seed_speedup(baseline: TimeToTarget, arm: TimeToTarget) -> SeedSpeedup:
    """Bounds: the baseline's earliest over the arm's latest possible time, and its latest over the arm's earliest
    (a censored run's latest is unbounded). A bracket is open at its start, so touching brackets decide."""
    if baseline.censored and arm.censored:
        return SeedSpeedup(None, None, None, "neither reached")
    arm_low, arm_high = arm.low, math.inf if arm.censored else float(arm.reached)
    base_low, base_high = baseline.low, math.inf if baseline.censored else float(baseline.reached)
    if arm_high == base_high == 0:  # both met the target before training: no ratio
        return SeedSpeedup(None, None, None, "undecided")
    low = 0.0 if math.isinf(arm_high) else (None if arm_high == 0 else base_low / arm_high)
    high = None if math.isinf(base_high) or arm_low == 0 else base_high / arm_low
    estimate = None
    if not (baseline.censored or arm.censored) and arm.crossing > 0:
        estimate = baseline.crossing / arm.crossing
    if arm_high <= base_low < base_high:
        verdict = "faster"
    elif base_high <= arm_low < arm_high:
        verdict = "slower"
    else:
        verdict = "undecided"
    return SeedSpeedup(estimate, low, high, verdict)


# ---------------------------------------------------------------- the speedup test


def least_p_value(seeds: int) -> float:
    """The smallest two-sided p-value the speedup test can give with `seeds` runs per arm: 2 over the number of
    splits it refers the statistic to (every split of the 2 x seeds runs in two, or the sampled ones and the
    observed)."""
    splits = math.comb(2 * seeds, seeds)
    splits = splits if splits <= EXACT_SPLITS else SAMPLED_SPLITS + 1
    return 2 / splits if splits > 1 else 1.0


def least_adjusted_p_value(seeds: int, permutation_tests: int) -> float:
    """The smallest Holm-adjusted p-value a time (or steps) to target can reach with `seeds` runs per arm in a
    family holding `permutation_tests` such tests besides continuous ones: at best every continuous test ranks
    first, and the first permutation test after them is multiplied by the number of tests left."""
    return min(1.0, permutation_tests * least_p_value(seeds))


def seeds_to_resolve(permutation_tests: int) -> int:
    """The fewest seeds per arm with which a time to target can be resolved at ALPHA after Holm's adjustment over a
    family holding `permutation_tests` permutation tests (`least_adjusted_p_value`)."""
    seeds = 1
    while least_adjusted_p_value(seeds, permutation_tests) > ALPHA:
        seeds += 1
    return seeds


@cache
def _splits(first: int, second: int) -> np.ndarray:
    """Rows: every way (beyond EXACT_SPLITS, SAMPLED_SPLITS random ways) to pick `first` of `first + second` runs, as
    0/1 indicators; the observed split (the first `first` runs) is row 0."""
    runs = first + second
    if math.comb(runs, first) <= EXACT_SPLITS:
        chosen = itertools.combinations(range(runs), first)
    else:
        generator = np.random.default_rng(0)
        chosen = itertools.chain([range(first)], (generator.permutation(runs)[:first] for _ in range(SAMPLED_SPLITS)))
    rows = []
    for picked in chosen:
        row = np.zeros(runs)
        row[list(picked)] = 1.0
        rows.append(row)
    return np.array(rows)


def _median_spacing(curves: Sequence[Curve]) -> float:
    gaps = [np.median(np.diff(np.asarray(x, dtype=float))) for x, _ in curves if len(x) > 1]
    return float(np.median(gaps)) if gaps else 0.0


def _padded(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs as rows: times (inf after a run's end), accuracies (-inf after it) and each run's length."""
    width = max(len(x) for x, _ in curves)
    times = np.full((len(curves), width), np.inf)
    values = np.full((len(curves), width), -np.inf)
    for row, (x, y) in enumerate(curves):
        times[row, : len(x)], values[row, : len(y)] = x, y
    return times, values, np.array([len(x) for x, _ in curves])


def _thinned(times: np.ndarray, lengths: np.ndarray, spacing: np.ndarray) -> np.ndarray:
    """Which evaluations to keep, per scale (axis 0) and run (axis 1): the one nearest to each of 0, spacing,
    2 x spacing, ... up to the run's end, and its last one. `times`: (scales, runs, evaluations)."""
    scales, runs, _ = times.shape
    last = np.broadcast_to(lengths - 1, (scales, runs))
    ends = np.take_along_axis(times, last[..., None], axis=2)[..., 0]
    count = int(np.ceil(np.max(ends / spacing[:, None]))) + 2
    grid = spacing[:, None] * np.arange(count)  # (scales, points)
    after = (times[:, :, None, :] < grid[:, None, :, None]).sum(axis=3)
    after = np.minimum(np.maximum(after, 1), last[..., None])
    before_time = np.take_along_axis(times, after - 1, axis=2)
    after_time = np.take_along_axis(times, after, axis=2)
    nearest = after - (grid[:, None, :] - before_time <= after_time - grid[:, None, :])
    inside = grid[:, None, :] <= ends[..., None] + spacing[:, None, None] / 2
    keep = np.zeros(times.shape, dtype=bool)
    index_scale, index_run, _ = np.nonzero(inside)
    keep[index_scale, index_run, nearest[inside]] = True
    keep[np.arange(scales)[:, None], np.arange(runs)[None, :], last] = True
    return keep


def _crossings(times: np.ndarray, values: np.ndarray, keep: np.ndarray, target: float) -> np.ndarray:
    """Per scale and run, the interpolated first crossing among the kept evaluations (as `time_to_target`); inf:
    never. `times`, `values`, `keep`: (scales, runs, evaluations)."""
    columns = np.arange(times.shape[2])
    hits = keep & (values >= target - TOLERANCE)
    first = hits.argmax(axis=2)[..., None]
    last_kept = np.maximum.accumulate(np.where(keep, columns, -1), axis=2)
    previous = np.where(first > 0, np.take_along_axis(last_kept, np.maximum(first - 1, 0), axis=2), -1)
    time, value = np.take_along_axis(times, first, axis=2), np.take_along_axis(values, first, axis=2)
    before = np.maximum(previous, 0)
    before_time, before_value = np.take_along_axis(times, before, axis=2), np.take_along_axis(values, before, axis=2)
    with np.errstate(divide="ignore", invalid="ignore"):
        fraction = np.clip((target - before_value) / (value - before_value), 0.0, 1.0)
    crossing = np.where(previous >= 0, before_time + fraction * (time - before_time), time)[..., 0]
    return np.where(hits.any(axis=2), crossing, np.inf)


class _ScaleTest:
    """The permutation test of 'the arm's times x s are distributed as the baseline's', for many s at once."""

    def __init__(self, baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> None:
        self.target = target
        self.arm, self.baseline = _padded(arm), _padded(baseline)
        self.spacing = (_median_spacing(baseline), _median_spacing(arm))
        self.ends = tuple(
            float(times[np.arange(len(times)), lengths - 1].min()) for times, _, lengths in (self.baseline, self.arm)
        )
        self.splits = _splits(len(arm), len(baseline))
        # (runs, splits) as integers: numpy's own integer product, not a threaded BLAS call that can stall on a busy
        # machine
        self.columns = np.ascontiguousarray(self.splits.T).astype(np.int64)

    def crossings(self, scales: np.ndarray) -> np.ndarray:
        """(scales, runs): every run's crossing, the arm's runs first with their times x scale (inf: never)."""
        scales = np.asarray(scales, dtype=float)
        reference = np.maximum(self.spacing[0], scales * self.spacing[1])
        parts = []
        for factors, own, (times, values, lengths) in (
            (scales, scales * self.spacing[1], self.arm),
            (np.ones_like(scales), np.full_like(scales, self.spacing[0]), self.baseline),
        ):
            scaled = factors[:, None, None] * times[None]
            keep = np.broadcast_to(np.isfinite(times), scaled.shape).copy()
            thin = (reference > own * THIN_ABOVE) & (reference > 0)
            if thin.any() and times.shape[1] > 1:
                spacing = np.minimum(reference[thin], THIN_AT_MOST * own[thin])
                keep[thin] = _thinned(scaled[thin], lengths, spacing)
            parts.append(_crossings(scaled, np.broadcast_to(values, scaled.shape), keep, self.target))
        return np.concatenate(parts, axis=1)

    def __call__(self, scales: Sequence[float] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(statistics, two-sided permutation p-values) at each scale; a statistic > 0: the scaled arm is sooner."""
        scales = np.asarray(scales, dtype=float)
        crossings = self.crossings(scales)
        horizon = np.minimum(self.ends[0], scales * self.ends[1])
        reached = crossings <= horizon[:, None]
        # before[k, i, j]: run i reached the target, and earlier than run j (or j never did, within the horizon)
        before = reached[:, :, None] & (~reached[:, None, :] | (crossings[:, :, None] < crossings[:, None, :]))
        scores = before.sum(axis=2, dtype=np.int64) - before.sum(axis=1, dtype=np.int64)  # Gehan: beaten - beaten by
        permuted = scores @ self.columns
        statistics = permuted[:, 0]  # split 0 is the observed one
        p_values = np.mean(np.abs(permuted) >= np.abs(statistics)[:, None], axis=1)
        return statistics.astype(float), p_values


def _boundary(inside, inner: float, outer: float) -> float:
    """Where `inside` turns false between `inner` (true) and `outer` (false), by geometric bisection: the midpoint
    of the last bracket."""
    for _ in range(BISECTIONS):
        middle = math.sqrt(inner * outer)
        inner, outer = (middle, outer) if inside(middle) else (inner, middle)
    return float(math.sqrt(inner * outer))


@dataclass(frozen=True)
class Speedup:
    """A speedup over seeds (the baseline's times to target over the arm's), by `SPEEDUP_METHOD`."""

    estimate: float | None  # None when the data bound it only on one side (e.g. every run of one arm censored)
    low: float | None  # of the 95% interval (the accepted piece holding the estimate); 0.0: no lower bound
    high: float | None  # None: unbounded
    p_value: float  # of 'no speedup' (s = 1)
    direction: str  # "faster", "slower" or "tie": the sign of the statistic at s = 1
    reached: dict[str, int]  # runs that reached the target, per arm ("arm", "baseline")
    seeds: int
    least_p_value: float  # the smallest p-value this many runs can give (under ALPHA: a difference is resolvable)
    # Every speedup the test does not reject, as pieces [low, high] (low 0.0 / high None: open at that end of the
    # scanned range), to the scan's resolution; the interval is the piece that holds the estimate.
    accepted: tuple[tuple[float, float | None], ...] = ()

    @property
    def sign(self) -> int:
        """+1 when the statistic at s = 1 says the arm is faster, -1 slower, 0 a tie: the side of a verdict, which
        the test at s = 1 resolves (its p-value at most the level). The interval then excludes 1 as well."""
        return {"faster": 1, "slower": -1}.get(self.direction, 0)


def speedup_test(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> Speedup:
    """The speedup of `arm` over `baseline` in reaching `target` (module docstring; `SPEEDUP_METHOD`).

    The test is scanned over speedups SCAN_STEP apart within SEARCH, and the ends of every accepted piece refined
    by bisection. The estimate is where the statistic changes sign, nearest to 1 on the side it leans to at 1 (so it
    is above 1 exactly when the arm leans faster), refined by bisection; a run of speedups where the statistic is 0
    gives its geometric middle. The accepted speedups need not be one interval (thinning and the horizon that
    shrinks with s make the p-value jump): the interval reported is the piece holding the estimate (without an
    estimate, the piece at the end of the range the statistic leans to), and every piece is kept in `accepted`.
    """
    test = _ScaleTest(baseline, arm, target)
    reached = {
        "arm": sum(not time_to_target(*curve, target).censored for curve in arm),
        "baseline": sum(not time_to_target(*curve, target).censored for curve in baseline),
    }
    least = least_p_value(len(baseline)) if len(baseline) == len(arm) else float(2 / len(test.splits))
    return invert_scale_test(test, reached, len(baseline), least)


ScaleTest = Callable[[Sequence[float]], tuple[np.ndarray, np.ndarray]]  # scales -> (statistics, p-values)


def p_at_one(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> tuple[int, float]:
    """(sign, p-value) of `speedup_test` at s = 1 alone (+1: the arm leans faster): what a verdict needs."""
    statistics, p_values = _ScaleTest(baseline, arm, target)([1.0])
    return int(np.sign(statistics[0])), float(p_values[0])


def invert_scale_test(test: ScaleTest, reached: dict[str, int], seeds: int, least: float) -> Speedup:
    """A `Speedup` from a test of 'the arm's times x s match the baseline's' at any s (a statistic > 0: the scaled
    arm is sooner): scanned SCAN_STEP apart within SEARCH, the p-value and direction at s = 1, the estimate where
    the statistic changes sign, the accepted pieces refined by bisection (`speedup_test`)."""
    exponents = np.arange(
        math.floor(math.log(SEARCH[0], SCAN_STEP)), math.ceil(math.log(SEARCH[1], SCAN_STEP)) + 1, dtype=float
    )
    scales = SCAN_STEP**exponents
    statistics, p_values = test(scales)
    one = int(np.argmin(np.abs(exponents)))
    statistic, p_value = float(statistics[one]), float(p_values[one])
    direction = "faster" if statistic > 0 else "slower" if statistic < 0 else "tie"
    estimate = _sign_change(test, scales, statistics, one)
    runs = _accepted_runs(p_values > ALPHA)
    if not runs:  # every scanned speedup rejected: the arm is beyond one end of the range
        low, high = (0.0, SEARCH[0]) if statistics.max() < 0 else (SEARCH[1], None)
        return Speedup(estimate, low, high, p_value, direction, reached, seeds, least, ((low, high),))

    def inside(scale: float) -> bool:
        return bool(test([scale])[1][0] > ALPHA)

    pieces = []
    for first, last in runs:
        low = 0.0 if first == 0 else _boundary(inside, scales[first], scales[first - 1])
        high = None if last == len(scales) - 1 else _boundary(inside, scales[last], scales[last + 1])
        pieces.append((low, high))
    if estimate is not None and not any(_within(estimate, piece) for piece in pieces) and inside(estimate):
        # The estimate is accepted between two rejected scanned speedups: its own piece, refined both ways.
        after = int(np.searchsorted(scales, estimate))
        piece = (_boundary(inside, estimate, scales[after - 1]), _boundary(inside, estimate, scales[after]))
        pieces = sorted([*pieces, piece], key=lambda item: item[0])
    chosen = next((piece for piece in pieces if estimate is not None and _within(estimate, piece)), None)
    if chosen is None:
        chosen = pieces[_holding(runs, scales, estimate, int(np.sign(statistic)))]
    return Speedup(estimate, *chosen, p_value, direction, reached, seeds, least, tuple(pieces))


def _within(value: float, piece: tuple[float, float | None]) -> bool:
    return piece[0] <= value <= (math.inf if piece[1] is None else piece[1])


def _accepted_runs(accepted: np.ndarray) -> list[tuple[int, int]]:
    """The runs of consecutive True in `accepted`, as (first, last) indices."""
    runs, first = [], None
    for index, value in enumerate(accepted):
        if value and first is None:
            first = index
        if not value and first is not None:
            runs.append((first, index - 1))
            first = None
    if first is not None:
        runs.append((first, len(accepted) - 1))
    return runs


def _holding(runs: list[tuple[int, int]], scales: np.ndarray, estimate: float | None, lean: int) -> int:
    """The index of the run of accepted scales that holds `estimate` (the nearest in log scale when the estimate
    falls between scanned speedups); without an estimate, the run at the end of the range the statistic leans to
    (the highest speedups when the arm leans faster)."""
    if estimate is None:
        return len(runs) - 1 if lean > 0 else 0
    where = math.log(estimate)

    def distance(run: tuple[int, int]) -> float:
        low, high = math.log(scales[run[0]]), math.log(scales[run[1]])
        return max(low - where, where - high, 0.0)

    return min(range(len(runs)), key=lambda index: distance(runs[index]))


def _sign_change(test: ScaleTest, scales: np.ndarray, statistics: np.ndarray, one: int) -> float | None:
    """The speedup where the statistic changes sign, walking from `one` (the index of 1) the way it leans there;
    None when it keeps its sign to the end of the scanned range, or is 0 everywhere."""
    sign = np.sign(statistics)
    if sign[one] == 0:
        start, end = one, one
    else:
        step = 1 if sign[one] > 0 else -1
        index = one
        while 0 <= index + step < len(scales) and sign[index + step] == sign[one]:
            index += step
        if not 0 <= index + step < len(scales):
            return None
        if sign[index + step] != 0:
            positive = sign[one] > 0
            return _boundary(lambda scale: (test([scale])[0][0] > 0) == positive, scales[index], scales[index + step])
        start = end = index + step
    while start > 0 and sign[start - 1] == 0:
        start -= 1
    while end < len(scales) - 1 and sign[end + 1] == 0:
        end += 1
    if start == 0 or end == len(scales) - 1:
        return None
    return math.sqrt(scales[start] * scales[end])


# ---------------------------------------------------------------- differences and families


@dataclass(frozen=True)
class Difference:
    """A paired mean difference over seeds with its Student-t interval and p-value (None with fewer than 2 seeds
    or no spread)."""

    estimate: float
    low: float | None
    high: float | None
    p_value: float | None
    seeds: int


def paired_difference(differences: Sequence[float]) -> Difference:
    """The mean of the per-seed differences and its Student-t interval and two-sided p-value against 0; neither
    with fewer than two seeds or no spread at all (every seed the same)."""
    array = np.asarray(differences, dtype=float)
    mean = float(array.mean())
    if len(array) < 2:
        return Difference(mean, None, None, None, len(array))
    spread = float(array.std(ddof=1))
    if spread == 0:  # every seed the same: Student's t is undefined, and nothing is claimed
        return Difference(mean, None, None, None, len(array))
    half = float(stats.t.ppf(0.5 + LEVEL / 2, len(array) - 1) * spread / math.sqrt(len(array)))
    p_value = float(stats.ttest_1samp(array, 0.0).pvalue)
    return Difference(mean, mean - half, mean + half, p_value, len(array))


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values, in the given order (None stays None and is not counted)."""
    present = [(p, index) for index, p in enumerate(p_values) if p is not None]
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(sorted(present)):
        running = max(running, min(1.0, (len(present) - rank) * p))
        adjusted[index] = running
    return adjusted


def band(curves: Sequence[Curve], axis: str = "train_seconds") -> dict[str, list[float]]:
    """Mean, min and max over seeds of curves interpolated onto the union of their times (held after the end), the
    times under the key `axis` ("train_seconds" or "step")."""
    grid = np.array(sorted({t for times, _ in curves for t in times}), dtype=float)
    stacked = np.array([np.interp(grid, times, values) for times, values in curves])
    return {
        axis: grid.tolist(),
        "mean": stacked.mean(axis=0).tolist(),
        "min": stacked.min(axis=0).tolist(),
        "max": stacked.max(axis=0).tolist(),
    }


def window_differences(baseline: Sequence[Curve], arm: Sequence[Curve]) -> tuple[list[float], list[float]]:
    """Per seed (paired by position): the window (the end of the shorter run of the pair) and the arm's minus the
    baseline's mean accuracy over it. Seeds present in one arm only (unequal counts) are not paired."""
    pairs = list(zip(baseline, arm, strict=False))
    windows = [min(b[0][-1], a[0][-1]) for b, a in pairs]
    differences = [mean_accuracy(*a, end) - mean_accuracy(*b, end) for (b, a), end in zip(pairs, windows, strict=True)]
    return windows, differences


def window_difference(baseline: Sequence[Curve], arm: Sequence[Curve]) -> tuple[Difference, str]:
    """The window-mean difference over seeds and how it was tested: "paired" (Student's t on the per-seed
    differences, `window_differences`) when both arms have the same seeds, else "welch" (Welch's t on each run's
    mean accuracy over the common window, up to the end of the shortest run of either arm)."""
    if len(baseline) == len(arm):
        return paired_difference(window_differences(baseline, arm)[1]), "paired"
    end = min(times[-1] for times, _ in (*baseline, *arm))
    base = np.array([mean_accuracy(*curve, end) for curve in baseline])
    other = np.array([mean_accuracy(*curve, end) for curve in arm])
    estimate = float(other.mean() - base.mean())
    seeds = min(len(base), len(other))
    if seeds < 2 or (base.std() == 0 and other.std() == 0):
        return Difference(estimate, None, None, None, seeds), "welch"
    test = stats.ttest_ind(other, base, equal_var=False)
    interval = test.confidence_interval(LEVEL)
    return Difference(estimate, float(interval.low), float(interval.high), float(test.pvalue), seeds), "welch"


def resolution_warnings(
    name: str, seeds: Sequence[int], curves: Sequence[Curve], target: float, *, baseline: bool
) -> list[str]:
    """Where the evaluation schedule, not the training, decides a time to target, one line per kind (`seeds` label
    the curves): a target reached at the first evaluation after the start, a baseline that reaches it only at its
    last, a bracket wider than WIDE_BRACKET of the time it bounds."""
    first, last, wide = [], [], []
    for seed, (times, values) in zip(seeds, curves, strict=True):
        hit = time_to_target(times, values, target)
        if hit.censored:
            continue
        if hit.below is None or (len(times) > 1 and hit.reached == times[1]):
            first.append(f"{seed} ({hit.reached:.1f})")
        elif baseline and hit.reached == times[-1]:
            last.append(f"{seed} ({hit.reached:.1f})")
        elif hit.reached - hit.below > WIDE_BRACKET * hit.crossing:
            wide.append(f"{seed} ({hit.below:.1f}-{hit.reached:.1f})")
    who = f"{name} (the baseline)" if baseline else name
    warnings = []
    if first:
        warnings.append(
            f"{who} reaches the target at its first evaluation on seed(s) {', '.join(first)}: those times are only "
            "known to be at most that, which the speedups' intervals carry; evaluate more often."
        )
    if last:
        warnings.append(
            f"{who} reaches the target only at its last evaluation on seed(s) {', '.join(last)}: the speedups over "
            "it rest on one evaluation there; train longer."
        )
    if wide:
        warnings.append(
            f"{who} crosses the target between evaluations wider apart than {WIDE_BRACKET:g} of the time they bound "
            f"on seed(s) {', '.join(wide)}; evaluate more often."
        )
    return warnings
