"""A speedup from every evaluation, not only the crossing: fit each run's learning curve, read the time at which the
fit reaches the target, and compare the two arms' fitted times.

Each run's held-out accuracy is fitted by `b + A (1 - exp(-t / tau))`: `b` is the start, pooled over every run of
both arms (their first evaluation, before training, is the same model on the same questions), and `A` (the gain, so
that `b + A` lies in [0, 1]) and `tau` (the time constant) are the run's own, by least squares over its later
evaluations (`tau` profiled over a log-spaced grid, then a finer one around the best). The fitted time to the target
y is `tau log(A / (A - (y - b)))`, and infinite where the fitted plateau `b + A` stays at or below y.

The speedup (the baseline's fitted times over the arm's, as a time-scale factor) and its interval:
- every fitted time finite: Welch's t on the logarithms of the fitted times, inverted for the interval; the estimate
  is the ratio of the geometric means;
- some fitted plateau under the target: a two-sample permutation test of the scale factor on the fitted times
  (Gehan's statistic, a time that is never reached ranking after every finite one), inverted over a scan of
  speedups as `statistics.speedup_test` does; the estimate is where the statistic changes sign.

A fit uses every evaluation of a run, so evaluation noise moves a fitted time much less than it moves the first
crossing of the target; the price is the shape: where true curves are not exponential (an S-shaped start, a run
that jumps, one that rises and falls) the fit is wrong in the same way for both arms, which a time-scale factor
between them survives, and `benchmarks/compare_coverage.py` measures what it costs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from pods_rl.compare.statistics import (
    LEVEL,
    Curve,
    Speedup,
    _splits,
    invert_scale_test,
    least_p_value,
    time_to_target,
)

GRID_POINTS = 160  # of the first, coarse grid of tau (log-spaced)
REFINE_POINTS = 41  # of the second, over one coarse step either side of the best tau
TAU_RANGE = (0.02, 200.0)  # tau spans this multiple of a run's first evaluation spacing to this multiple of its end
FIT_METHOD = (
    "per-run fits of b + A(1 - exp(-t/tau)) (b pooled over the first evaluations), each run's fitted time to the "
    f"target; Welch's t on the log fitted times ({LEVEL:.0%} interval), or, where some fitted plateau stays under the "
    "target, a permutation test of the scale factor on the fitted times (Gehan), inverted"
)


@dataclass(frozen=True)
class Fit:
    """One run's fitted curve `start + gain (1 - exp(-t / tau))`."""

    start: float
    gain: float
    tau: float

    def time_to(self, target: float) -> float:
        """The time at which the fitted curve reaches `target` (0 if it starts there; inf if it never does)."""
        needed = target - self.start
        if needed <= 0:
            return 0.0
        if self.gain <= needed:
            return math.inf
        return self.tau * math.log(self.gain / (self.gain - needed))


def pooled_start(curves: Sequence[Curve]) -> float:
    """The mean first evaluation over the runs (every run's evaluation before training)."""
    return float(np.mean([values[0] for _, values in curves]))


def fit_curves(curves: Sequence[Curve], start: float) -> list[Fit]:
    """Each run's least-squares fit with its start fixed at `start` (module docstring)."""
    return [_fit_one(np.asarray(t, dtype=float), np.asarray(y, dtype=float), start) for t, y in curves]


def _fit_one(times: np.ndarray, values: np.ndarray, start: float) -> Fit:
    later = times > 0
    t, y = times[later], values[later] - start
    if len(t) == 0:
        return Fit(start, 0.0, math.inf)
    spacing = float(np.min(np.diff(np.concatenate([[0.0], t])))) or float(t[0])
    low, high = math.log(TAU_RANGE[0] * spacing), math.log(TAU_RANGE[1] * float(t[-1]))
    grid = np.exp(np.linspace(low, high, GRID_POINTS))
    best = _best(t, y, start, grid)
    step = (high - low) / (GRID_POINTS - 1)
    fine = np.exp(np.linspace(math.log(grid[best]) - step, math.log(grid[best]) + step, REFINE_POINTS))
    index = _best(t, y, start, fine)
    tau = float(fine[index])
    return Fit(start, _gain(t, y, start, np.array([tau]))[0], tau)


def _gain(t: np.ndarray, y: np.ndarray, start: float, taus: np.ndarray) -> np.ndarray:
    """The least-squares gain at each tau, kept where the curve stays in [0, 1]."""
    shape = 1 - np.exp(-t[None, :] / taus[:, None])
    gain = (shape * y[None, :]).sum(axis=1) / (shape**2).sum(axis=1)
    return np.clip(gain, -start, 1 - start)


def _best(t: np.ndarray, y: np.ndarray, start: float, taus: np.ndarray) -> int:
    shape = 1 - np.exp(-t[None, :] / taus[:, None])
    gain = _gain(t, y, start, taus)
    errors = ((y[None, :] - gain[:, None] * shape) ** 2).sum(axis=1)
    return int(np.argmin(errors))


def fitted_times(curves: Sequence[Curve], start: float, target: float) -> np.ndarray:
    """Each run's fitted time to `target` (inf: its fitted plateau stays under it)."""
    return np.array([fit.time_to(target) for fit in fit_curves(curves, start)])


def fit_speedup(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> Speedup:
    """The speedup of `arm` over `baseline` in reaching `target` from per-run curve fits (module docstring)."""
    base_times, arm_times = _both_fitted_times(baseline, arm, target)
    reached = {
        "arm": sum(not time_to_target(*curve, target).censored for curve in arm),
        "baseline": sum(not time_to_target(*curve, target).censored for curve in baseline),
    }
    if _welch_applies(base_times, arm_times):
        return _welch(np.log(base_times), np.log(arm_times), reached, len(baseline))
    return _rank_inversion(base_times, arm_times, reached, len(baseline))


def fit_p_at_one(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> tuple[int, float]:
    """(sign, p-value) of `fit_speedup`'s test at s = 1 alone (+1: the arm leans faster)."""
    base_times, arm_times = _both_fitted_times(baseline, arm, target)
    if _welch_applies(base_times, arm_times):
        result = _welch(np.log(base_times), np.log(arm_times), {}, len(baseline))
        return result.sign, result.p_value
    columns = np.ascontiguousarray(_splits(len(arm_times), len(base_times)).T).astype(np.int64)
    statistics, p_values = _gehan(arm_times, base_times, np.array([1.0]), columns)
    return int(np.sign(statistics[0])), float(p_values[0])


def _both_fitted_times(baseline: Sequence[Curve], arm: Sequence[Curve], target: float) -> tuple[np.ndarray, ...]:
    start = pooled_start([*baseline, *arm])
    return fitted_times(baseline, start, target), fitted_times(arm, start, target)


def _welch_applies(base_times: np.ndarray, arm_times: np.ndarray) -> bool:
    """Every fitted time finite and positive, and two or more per arm."""
    times = np.concatenate([base_times, arm_times])
    return bool(np.all(np.isfinite(times)) and np.all(times > 0) and min(len(base_times), len(arm_times)) >= 2)


def _welch(base: np.ndarray, arm: np.ndarray, reached: dict[str, int], seeds: int) -> Speedup:
    """Welch's t on log times: log speedup = mean log baseline time - mean log arm time."""
    difference = float(base.mean() - arm.mean())
    variances = base.var(ddof=1) / len(base), arm.var(ddof=1) / len(arm)
    error = math.sqrt(sum(variances))
    direction = "faster" if difference > 0 else "slower" if difference < 0 else "tie"
    if error == 0:
        p_value = 1.0 if difference == 0 else 0.0
        low = high = math.exp(difference)
    else:
        freedom = sum(variances) ** 2 / sum(v**2 / (len(x) - 1) for v, x in zip(variances, (base, arm), strict=True))
        half = float(stats.t.ppf(0.5 + LEVEL / 2, freedom)) * error
        p_value = float(2 * stats.t.sf(abs(difference) / error, freedom))
        low, high = math.exp(difference - half), math.exp(difference + half)
    least = 0.0  # a continuous test: any p-value can be reached
    return Speedup(math.exp(difference), low, high, p_value, direction, reached, seeds, least, ((low, high),))


def _gehan(arm: np.ndarray, base: np.ndarray, scales: np.ndarray, columns: np.ndarray) -> tuple:
    """Statistics (arm faster: > 0) and two-sided permutation p-values of Gehan's test at each scale, on times that
    do not depend on the scale but through the arm's `times x scale` (inf: never)."""
    runs = np.concatenate([scales[:, None] * arm[None, :], np.broadcast_to(base, (len(scales), len(base)))], axis=1)
    finite = np.isfinite(runs)
    before = finite[:, :, None] & (~finite[:, None, :] | (runs[:, :, None] < runs[:, None, :]))
    scores = before.sum(axis=2, dtype=np.int64) - before.sum(axis=1, dtype=np.int64)
    permuted = scores @ columns
    observed = permuted[:, 0]
    p_values = np.mean(np.abs(permuted) >= np.abs(observed)[:, None], axis=1)
    return observed.astype(float), p_values


def _rank_inversion(base: np.ndarray, arm: np.ndarray, reached: dict[str, int], seeds: int) -> Speedup:
    columns = np.ascontiguousarray(_splits(len(arm), len(base)).T).astype(np.int64)

    def test(scales: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
        return _gehan(arm, base, np.asarray(scales, dtype=float), columns)

    least = least_p_value(seeds) if len(base) == len(arm) else float(2 / columns.shape[1])
    return invert_scale_test(test, reached, seeds, least)
