"""What a comparison can claim at the resolution of its evaluations: times to target as brackets, speedups with
bounds and a 95% interval over seeds, censored runs kept, and warnings where a figure is bound by the schedule.

Pure functions of evaluation curves (times in training seconds, accuracies in [0, 1]); no knowledge of arms,
folders or files. Seeds are paired by position: curve i of every arm is seed i.

- Peak: the mean over seeds of each seed's highest evaluation (one definition, used for the target and tables).
- Time to target of one run: the bracket [last evaluation below the target, first evaluation at or above it] and
  the linearly interpolated crossing inside it. A run that never reaches the target is censored at its training
  time (its last evaluation, taken at the end): it needed more than that.
- Speedup of one seed: the baseline's crossing / the arm's; bounds from the two brackets. Censored runs enter at
  their censoring time, which bounds the speedup (an arm censored: at most; the baseline censored: at least).
- Across seeds: the geometric mean of the speedups with a 95% Student-t interval on their logarithms. That
  estimate interpolates inside the brackets; what the brackets alone allow is the geometric mean of every seed's
  lower bound and of every seed's upper bound, each with the far end of its interval, and the seeds whose whole
  bracket lies on one side of 1.
- Mean accuracy over the window: the area under the linearly interpolated curve from the first evaluation to the
  end of the shorter run of the pair, divided by the window's length; the paired difference has a t interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

LEVEL = 0.95  # of every interval
TOLERANCE = 1e-12  # an accuracy this close below the target reaches it (float averaging over examples)
WIDE_BRACKET = 0.25  # a bracket wider than this fraction of the time it bounds is flagged

Curve = tuple[Sequence[float], Sequence[float]]  # one run's evaluations: (training seconds, accuracies)


def peak(curves: Sequence[Curve]) -> float:
    """The mean over seeds of each seed's highest evaluation."""
    return float(np.mean([max(values) for _, values in curves]))


@dataclass(frozen=True)
class TimeToTarget:
    """When one run reached the target, to the resolution of its evaluations."""

    below: float | None  # the last evaluation below the target before it was reached; None: reached at the first
    reached: float | None  # the first evaluation at or above the target; None: never (censored)
    crossing: float  # interpolated crossing; for a censored run, its training time (a lower bound)
    censored: bool

    @property
    def low(self) -> float:
        """The earliest the target can have been reached (before the first evaluation: at 0 s)."""
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
    """The baseline's time to target over the arm's, for one seed."""

    estimate: float | None  # from the crossings (censored runs at their censoring time); None when the arm's is 0
    low: float  # what the brackets allow at the least
    high: float | None  # ... and at the most; None: unbounded
    bound: str  # "interpolated", "at most" (arm censored), "at least" (baseline censored), "unknown" (both)


def seed_speedup(baseline: TimeToTarget, arm: TimeToTarget) -> SeedSpeedup:
    """Bounds: the baseline's earliest over the arm's latest, and its latest over the arm's earliest possible time."""
    bound = {
        (False, False): "interpolated",
        (False, True): "at most",
        (True, False): "at least",
        (True, True): "unknown",
    }[(baseline.censored, arm.censored)]
    return SeedSpeedup(
        estimate=baseline.crossing / arm.crossing if arm.crossing > 0 else None,
        low=baseline.low / arm.reached if arm.reached else 0.0,
        high=baseline.reached / arm.low if baseline.reached is not None and arm.low > 0 else None,
        bound=bound,
    )


@dataclass(frozen=True)
class Interval:
    """An estimate over seeds with its 95% interval (None with fewer than two seeds)."""

    estimate: float
    low: float | None
    high: float | None
    seeds: int


def mean_interval(values: Sequence[float]) -> Interval:
    """The mean and its Student-t interval."""
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if len(array) < 2:
        return Interval(mean, None, None, len(array))
    half = float(stats.t.ppf(0.5 + LEVEL / 2, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array)))
    return Interval(mean, mean - half, mean + half, len(array))


def geometric_mean_interval(ratios: Sequence[float]) -> Interval:
    """The geometric mean of positive ratios and the interval of the t interval on their logarithms."""
    logs = mean_interval(np.log(np.asarray(ratios, dtype=float)))
    low, high = (None, None) if logs.low is None else (math.exp(logs.low), math.exp(logs.high))
    return Interval(math.exp(logs.estimate), low, high, logs.seeds)


@dataclass(frozen=True)
class BracketSpeedup:
    """The geometric mean over seeds that the brackets alone allow, with no interpolation inside any of them."""

    low: float  # the geometric mean of the per-seed lower bounds; 0 when one is 0 (that arm never got there)
    low_interval: float | None  # the lower end of the 95% t interval on those bounds; None from one seed
    high: float | None  # the geometric mean of the per-seed upper bounds; None: unbounded (one seed's is)
    high_interval: float | None  # the upper end of the 95% t interval on those bounds
    seeds_faster: int  # the lower bound above 1: faster whenever between evaluations each crossing fell
    seeds_slower: int  # the upper bound below 1
    seeds_undecided: int
    resolved: str  # "faster" (low_interval above 1), "slower" (high_interval below 1) or "no"


def bracket_speedup(speedups: Sequence[SeedSpeedup]) -> BracketSpeedup:
    """The range of geometric means the brackets allow, over the seeds whose speedup is defined."""
    defined = [s for s in speedups if s.estimate is not None]
    lows = [s.low for s in defined]
    highs = [s.high for s in defined]
    if min(lows) > 0:
        low_mean = geometric_mean_interval(lows)
        low, low_interval = low_mean.estimate, low_mean.low
    else:
        low, low_interval = 0.0, 0.0
    if None in highs:
        high, high_interval = None, None
    elif min(highs) == 0:  # a baseline that met the target before training
        high, high_interval = 0.0, 0.0
    else:
        high_mean = geometric_mean_interval(highs)
        high, high_interval = high_mean.estimate, high_mean.high
    faster = sum(low > 1 for low in lows)
    slower = sum(high is not None and high < 1 for high in highs)
    if low_interval is not None and low_interval > 1:
        resolved = "faster"
    elif high_interval is not None and high_interval < 1:
        resolved = "slower"
    else:
        resolved = "no"
    return BracketSpeedup(
        low, low_interval, high, high_interval, faster, slower, len(defined) - faster - slower, resolved
    )


def mean_accuracy(times: Sequence[float], values: Sequence[float], end: float) -> float:
    """The area under the linearly interpolated curve from its first time to `end`, divided by the length."""
    inside = [t for t in times if t < end]
    grid = np.array([*inside, end], dtype=float)
    curve = np.interp(grid, np.asarray(times, dtype=float), np.asarray(values, dtype=float))
    if grid[-1] == grid[0]:
        return float(curve[0])
    area = float(np.sum((curve[1:] + curve[:-1]) / 2 * np.diff(grid)))
    return area / float(grid[-1] - grid[0])


def band(curves: Sequence[Curve]) -> dict[str, list[float]]:
    """Mean, min and max over seeds of curves interpolated onto the union of their times (held after the end)."""
    grid = np.array(sorted({t for times, _ in curves for t in times}), dtype=float)
    stacked = np.array([np.interp(grid, times, values) for times, values in curves])
    return {
        "train_seconds": grid.tolist(),
        "mean": stacked.mean(axis=0).tolist(),
        "min": stacked.min(axis=0).tolist(),
        "max": stacked.max(axis=0).tolist(),
    }


def compare_to_baseline(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> dict[str, Any]:
    """One arm against the baseline, seed by seed and over seeds: times, speedups, mean-accuracy differences."""
    base_times = [time_to_target(*curve, target) for curve in baseline]
    arm_times = [time_to_target(*curve, target) for curve in arm]
    speedups = [seed_speedup(b, a) for b, a in zip(base_times, arm_times, strict=True)]
    estimates = [s.estimate for s in speedups if s.estimate is not None]
    windows = [min(b[0][-1], a[0][-1]) for b, a in zip(baseline, arm, strict=True)]
    differences = [
        mean_accuracy(*a, end) - mean_accuracy(*b, end) for b, a, end in zip(baseline, arm, windows, strict=True)
    ]
    return {
        "time_to_target": [asdict(t) for t in arm_times],
        "speedup_per_seed": [asdict(s) for s in speedups],
        "speedup": asdict(geometric_mean_interval(estimates)) if estimates else None,
        "speedup_by_brackets": asdict(bracket_speedup(speedups)) if estimates else None,
        "seeds_faster": sum(e > 1 for e in estimates),
        "seeds_slower": sum(e < 1 for e in estimates),
        "seeds_undefined": len(speedups) - len(estimates),  # the arm met the target before training
        "censored": {"arm": sum(t.censored for t in arm_times), "baseline": sum(t.censored for t in base_times)},
        "mean_accuracy_window": windows,
        "mean_accuracy_difference_per_seed": differences,
        "mean_accuracy_difference": asdict(mean_interval(differences)),
    }


def resolution_warnings(
    name: str, seeds: Sequence[int], curves: Sequence[Curve], target: float, *, baseline: bool
) -> list[str]:
    """Where the evaluation schedule, not the training, decides a time to target (`seeds` label the curves)."""
    warnings = []
    for seed, (times, values) in zip(seeds, curves, strict=True):
        hit = time_to_target(times, values, target)
        where = f"{name}, seed {seed}"
        if hit.censored:
            continue
        if hit.below is None or (len(times) > 1 and hit.reached == times[1]):
            warnings.append(
                f"{where} reaches the target at its first evaluation ({hit.reached:.1f} s): its time is only known "
                "to be at most that, so a speedup over it has no upper bound; evaluate more often."
            )
        elif baseline and hit.reached == times[-1]:
            warnings.append(
                f"{where} (the baseline) reaches the target only at its last evaluation ({hit.reached:.1f} s): the "
                "speedups over it rest on one evaluation; train longer."
            )
        elif hit.reached - hit.below > WIDE_BRACKET * hit.crossing:
            warnings.append(
                f"{where} crosses the target between evaluations at {hit.below:.1f} and {hit.reached:.1f} s, a bracket "
                f"wider than {WIDE_BRACKET:g} of the time it bounds; evaluate more often."
            )
    return warnings
