"""Verdicts at several looks: a comparison that adds seeds in batches until every primary verdict is resolved
(`pods compare --until-resolved`), with the chance of any false verdict over all its looks held at ALPHA.

- **Looks**: after the first `first` seeds per arm, then after every `batch` more, up to `max_seeds`
  (`planned_looks`). A look's information fraction is its seeds over `max_seeds`.
- **Alpha spending** (Lan and DeMets 1983, the O'Brien-Fleming-like function): by information fraction t, at most
  `spending(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))` of the error rate is spent, so that early looks, with few
  seeds, resolve only overwhelming differences and the last look keeps most of alpha. A look's boundary is the
  two-sided z whose crossing, not crossed before, has the probability the function allows at that look under the
  canonical joint law of group-sequential statistics (look i and j correlate as sqrt(t_i / t_j)); `nominal_levels`
  turns the boundaries into the p-value each look's test must reach. The permutation and t tests' statistics follow
  that law only approximately (rank statistics asymptotically), and the permutation test's p-values are discrete:
  the simulation (`pods_rl.compare.simulation.verdict_power`, benchmarks/compare_coverage.py) measures the error
  rate over the looks.
- **Many arms**: Holm's step-down at every look with the boundaries recycled as in Maurer and Bretz (2013): with k
  arms unresolved, each is tested against the boundary of level alpha / k; a verdict frees its share for the others,
  which are tested again at the same look. With one look this is Holm's procedure exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

import numpy as np
from scipy import optimize, stats

from pods_rl.compare.statistics import ALPHA

SPENDING = "Lan-DeMets O'Brien-Fleming"


def spending(fraction: float, alpha: float = ALPHA) -> float:
    """The error rate spent by information fraction `fraction` (two-sided O'Brien-Fleming-like spending)."""
    if fraction <= 0:
        return 0.0
    return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(min(fraction, 1.0))))


def planned_looks(first: int, batch: int, max_seeds: int) -> list[int]:
    """Seeds per arm at each look: `first`, then `batch` more each time, and `max_seeds` last."""
    if not 1 <= first <= max_seeds or batch < 1:
        raise ValueError(f"need 1 <= first <= max_seeds and batch >= 1, got {first}, {batch}, {max_seeds}")
    looks = list(range(first, max_seeds, batch))
    return [*looks, max_seeds]


def _inside(bounds: Sequence[float], fractions: Sequence[float]) -> float:
    """P(|Z_i| < bounds[i] for every look i) under the canonical joint law (a multivariate normal integral)."""
    if len(bounds) == 1:
        return float(2 * stats.norm.cdf(bounds[0]) - 1)
    times = np.asarray(fractions, dtype=float)
    covariance = np.sqrt(np.minimum.outer(times, times) / np.maximum.outer(times, times))
    law = stats.multivariate_normal(mean=np.zeros(len(times)), cov=covariance, seed=0)
    upper = np.asarray(bounds, dtype=float)
    return float(law.cdf(upper, lower_limit=-upper))


@cache
def boundaries(fractions: tuple[float, ...], alpha: float = ALPHA) -> tuple[float, ...]:
    """The two-sided z boundary of each look at these information fractions (increasing, the last at most 1)."""
    bounds: list[float] = []
    for index, fraction in enumerate(fractions):
        allowed = spending(fraction, alpha)  # P(crossing at this look or before)
        if allowed <= 0:
            bounds.append(math.inf)
            continue

        def excess(bound: float, index: int = index, allowed: float = allowed) -> float:
            return (1 - _inside([*bounds, bound], fractions[: index + 1])) - allowed

        if excess(40.0) > 0:  # even an infinite boundary would spend more (fractions barely apart)
            bounds.append(math.inf)
            continue
        bounds.append(float(optimize.brentq(excess, 1e-6, 40.0, xtol=1e-6)))
    return tuple(bounds)


def nominal_levels(looks: Sequence[int], max_seeds: int, alpha: float = ALPHA) -> list[float]:
    """The p-value each look's test must reach, for looks at these seeds of `max_seeds` (a single look at
    `max_seeds`: alpha itself)."""
    if list(looks) == [max_seeds]:
        return [alpha]
    fractions = tuple(seeds / max_seeds for seeds in looks)
    return [float(2 * stats.norm.sf(bound)) for bound in boundaries(fractions, alpha)]


def decide(
    results: Sequence[Sequence[tuple[int, float | None]]], looks: Sequence[int], max_seeds: int, alpha: float = ALPHA
) -> list[tuple[int, int] | None]:
    """The verdict of each arm from its primary test at each look so far: `results[j][i]` is (sign, p-value) of arm
    i at look j (p None: not tested). Returns per arm (the look index, the sign) where it was first resolved, or None.

    Holm over the arms at every look, each unresolved arm tested against the boundary of alpha / (arms unresolved)
    (module docstring); the looks are those planned so far (`looks`, at least as many as `results`), of
    `max_seeds` at most: a single look at `max_seeds` is Holm's procedure at alpha."""
    arms = len(results[0]) if results else 0
    verdicts: list[tuple[int, int] | None] = [None] * arms
    fractions = [seeds / max_seeds for seeds in looks]
    for look, row in enumerate(results):
        while True:
            open_arms = [i for i in range(arms) if verdicts[i] is None and row[i][1] is not None]
            if not open_arms:
                break
            unresolved = len(open_arms)  # arms tested at this look and not resolved before
            level = _level(tuple(fractions[: look + 1]), alpha / unresolved, single=list(looks) == [max_seeds])
            newly = [i for i in open_arms if row[i][0] != 0 and row[i][1] <= level]
            if not newly:
                break
            for i in newly:
                verdicts[i] = (look, row[i][0])
    return verdicts


def _level(fractions: tuple[float, ...], alpha: float, *, single: bool) -> float:
    if single:
        return alpha
    return float(2 * stats.norm.sf(boundaries(fractions, alpha)[-1]))
