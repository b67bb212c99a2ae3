"""Comparisons with a known truth, to check the statistics' coverage and power (and to size a comparison).

A simulated comparison has two arms of `seeds` runs each. Every run's held-out accuracy follows a learning curve
`base + (plateau - base) x (1 - exp(-t / tau))` whose time constant tau varies by seed (log-normal, `spread`); the
arm's curve is the baseline's run `speedup` times faster (t -> speedup x t), optionally with a higher plateau. The
runs are evaluated as `pods compare` evaluates: at the start, then after the first step past each multiple of
`every` (a delay of up to `step` x `every`), up to the `horizon`, each evaluation a binomial draw over `questions`.
The truth at a target accuracy y is the ratio of the noiseless curves' crossing times: `speedup` when the plateaus
are equal (whatever y), `speedup x k_baseline(y) / k_arm(y)` with k(y) = -log(1 - (y - base) / (plateau - base))
otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pods_rl.compare.statistics import ALPHA, gain_target, paired_difference, speedup_test, window_differences


@dataclass(frozen=True)
class Design:
    """The evaluation grid, horizon, curve and noise of one shipped comparison."""

    name: str
    every: float  # eval.every_seconds
    horizon: float  # time_budget
    base: float  # accuracy before training
    plateau: float  # the baseline's plateau
    step: float  # a step's length, as a share of `every` (evaluations wait for the step to end)
    questions: int = 200
    seeds: int = 6
    spread: float = 0.35  # standard deviation of log tau over seeds
    reaches: float = 0.9  # the median baseline run reaches this share of its gain at the horizon


# The evaluation grid, horizon and curve of the four shipped comparisons (benchmarks/results).
SHIPPED = (
    Design("tiny (10 s grid, 60 s)", every=10, horizon=60, base=0.43, plateau=0.92, step=0.02),
    Design("tiny early climb (2 s grid, 20 s)", every=2, horizon=20, base=0.43, plateau=0.87, step=0.13),
    Design("SmolLM2 sums (30 s grid, 360 s)", every=30, horizon=360, base=0.48, plateau=0.92, step=0.35),
    Design("SmolLM2 3-term (150 s grid, 600 s)", every=150, horizon=600, base=0.175, plateau=0.30, step=0.17),
)


@dataclass(frozen=True)
class Truth:
    """The arm: `speedup` times faster than the baseline, its plateau raised by `higher_plateau` of the baseline's
    gain (capped half way to 1)."""

    speedup: float
    higher_plateau: float = 0.0

    def plateau(self, design: Design) -> float:
        if not self.higher_plateau:
            return design.plateau
        raised = design.plateau + self.higher_plateau * (design.plateau - design.base)
        return min(raised, design.plateau + 0.5 * (1 - design.plateau))

    def at(self, design: Design, target: float) -> float | None:
        """The true speedup at `target`; None where the baseline's noiseless curve never reaches it."""
        plateau = self.plateau(design)
        if not design.base < target < min(design.plateau, plateau):
            return None

        def needed(top: float) -> float:
            return -math.log(1 - (target - design.base) / (top - design.base))

        return self.speedup * needed(design.plateau) / needed(plateau)


def simulate_run(
    generator: np.random.Generator, design: Design, plateau: float, speedup: float
) -> tuple[np.ndarray, np.ndarray]:
    """One run's evaluations (training seconds, accuracies)."""
    tau = design.horizon / -math.log(1 - design.reaches) * math.exp(design.spread * generator.normal())
    count = math.floor(design.horizon / design.every + 1e-9)
    delays = generator.uniform(0, design.step * design.every, count)
    times = np.concatenate([[0.0], design.every * np.arange(1, count + 1) + delays])
    truth = design.base + (plateau - design.base) * (1 - np.exp(-speedup * times / tau))
    return times, generator.binomial(design.questions, np.clip(truth, 0, 1)) / design.questions


def simulate_comparison(
    generator: np.random.Generator, design: Design, truth: Truth
) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """(baseline runs, arm runs) of one simulated comparison."""
    baseline = [simulate_run(generator, design, design.plateau, 1.0) for _ in range(design.seeds)]
    arm = [simulate_run(generator, design, truth.plateau(design), truth.speedup) for _ in range(design.seeds)]
    return baseline, arm


@dataclass(frozen=True)
class Outcome:
    """How one method did over many simulated comparisons of one design and truth."""

    comparisons: int  # with a defined truth
    coverage: float  # share of intervals that contain the true speedup
    resolved: float  # share called faster or slower: p <= 5% and the interval wholly on one side of 1
    bias: float | None  # median of log(estimate / truth), over the comparisons with an estimate
    unbounded: float  # share of intervals open at one end
    window_resolved: float  # share whose window-mean difference was resolved (its t interval excludes 0)


def run_method(design: Design, truth: Truth, comparisons: int, seed: int = 0, gain: float = 0.75) -> Outcome:
    """`pods compare`'s statistics (`speedup_test` at `gain` of the baseline's gain) over simulated comparisons."""
    generator = np.random.default_rng(seed)
    covered = resolved = counted = unbounded = window = 0
    errors = []
    for _ in range(comparisons):
        baseline, arm = simulate_comparison(generator, design, truth)
        target = gain_target(baseline, gain)
        true = None if target is None else truth.at(design, target.accuracy)
        if true is None:
            continue
        counted += 1
        result = speedup_test(baseline, arm, target.accuracy)
        high = math.inf if result.high is None else result.high
        covered += result.low is not None and result.low <= true <= high
        resolved += result.p_value <= ALPHA and result.side != 0
        unbounded += result.low == 0.0 or result.high is None
        if result.estimate is not None:
            errors.append(math.log(result.estimate / true))
        difference = paired_difference(window_differences(baseline, arm)[1])
        window += difference.p_value is not None and difference.p_value <= ALPHA
    if not counted:
        raise ValueError(f"{design.name}: no simulated comparison had a target its baseline's curve reaches")
    return Outcome(
        counted,
        covered / counted,
        resolved / counted,
        float(np.median(errors)) if errors else None,
        unbounded / counted,
        window / counted,
    )
