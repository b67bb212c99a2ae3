"""Comparisons with a known truth, to check the statistics' coverage and power (and to size a comparison).

A simulated comparison has a baseline and one or more arms of `seeds` runs each. Every run's held-out accuracy is
`base + gain x g(u)` with `u = speedup x t / tau`: `g` is the curve's shape (`SHAPES`: a saturating exponential, an
S-shaped start, runs that jump or not, a rise then a fall), the time constant tau varies by seed (log-normal, or
heavy-tailed, `spread`), and an arm's runs are `speedup` times faster (t -> speedup x t), optionally with another gain
(a higher plateau, or a baseline that falls below its start). The runs are evaluated as `pods compare` evaluates: at
the start, then after the first step past each multiple of `every` (a delay of up to `step` x `every`), up to the
`horizon`, each evaluation a binomial draw over `questions`.

The truth at a target accuracy y is the factor by which the arm's distribution of times to y is the baseline's
scaled: `speedup` when the gains are equal (whatever y and shape), `speedup x k_baseline(y) / k_arm(y)` with
k(y) = -log(1 - (y - base) / gain) for exponential curves with other gains, and infinite where only the arm's curve
reaches y.

What is measured per case (`run_methods`): how often each speedup method's interval holds the truth, how often it
resolves (the test at s = 1 at the 5% level, in the truth's direction; any resolution is false at a truth of 1), and
how often the window-mean difference is resolved. `verdict_power` and `sequential_power` measure verdicts as
`pods compare` draws them: the primary test of every arm, Holm-adjusted over the arms, at one look or at each look of
a sequential design.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np

from pods_rl.compare.curve_fit import fit_p_at_one, fit_speedup
from pods_rl.compare.sequential import decide
from pods_rl.compare.statistics import (
    ALPHA,
    Curve,
    Speedup,
    comparison_target,
    p_at_one,
    speedup_test,
    window_difference,
)

SHAPES = ("exponential", "sigmoid", "jumps", "rise_fall")
JUMP_SHARE = 0.5  # of the runs that jump (shape "jumps"); the others rise slowly to LOW_PLATEAU of the gain
LOW_PLATEAU = 0.4
FALL = 0.5  # a "rise_fall" curve peaks at 66% of its gain (u = 2.4) and falls to 57% by u = 6
METHODS = ("permutation", "curve_fit")


@dataclass(frozen=True)
class Design:
    """The evaluation grid, horizon, curve and noise of one comparison."""

    name: str
    every: float  # eval.every_seconds (or eval.every_steps)
    horizon: float  # time_budget (or trainer.max_steps)
    base: float  # accuracy before training
    plateau: float  # the baseline's plateau
    step: float  # a step's length, as a share of `every` (evaluations wait for the step to end; 0 when by steps)
    questions: int = 200
    seeds: int = 6
    spread: float = 0.35  # standard deviation of log tau over seeds
    reaches: float = 0.9  # the median baseline run reaches this share of its gain at the horizon (`_u_at_horizon`)
    shape: str = "exponential"  # SHAPES
    tail: str = "normal"  # of log tau: "normal", or "heavy" (Student t with 3 degrees of freedom, same spread)
    arm_seeds: int | None = None  # the arms' seeds, when fewer or more than the baseline's

    @property
    def gain(self) -> float:
        return self.plateau - self.base


# The evaluation grid, horizon and curve of the four shipped comparisons (benchmarks/results).
SHIPPED = (
    Design("tiny (10 s grid, 60 s)", every=10, horizon=60, base=0.43, plateau=0.92, step=0.02),
    Design("tiny early climb (2 s grid, 20 s)", every=2, horizon=20, base=0.43, plateau=0.87, step=0.13),
    Design("SmolLM2 sums (30 s grid, 360 s)", every=30, horizon=360, base=0.48, plateau=0.92, step=0.35),
    Design("SmolLM2 3-term (150 s grid, 600 s)", every=150, horizon=600, base=0.175, plateau=0.30, step=0.17),
)


def progress(shape: str, u: np.ndarray, jumped: bool = True) -> np.ndarray:
    """The share of its gain a run of `shape` has made at scaled time u (0 at u = 0)."""
    if shape == "exponential":
        return 1 - np.exp(-u)
    if shape == "sigmoid":
        floor = 1 / (1 + math.exp(4))
        return (1 / (1 + np.exp(-4 * (u - 1))) - floor) / (1 - floor)
    if shape == "jumps":
        if not jumped:
            return LOW_PLATEAU * (1 - np.exp(-u / 2))
        floor = 1 / (1 + math.exp(20))
        return (1 / (1 + np.exp(-20 * (u - 1))) - floor) / (1 - floor)
    if shape == "rise_fall":
        return (1 - np.exp(-u)) * (1 - FALL * (1 - np.exp(-u / 3)))
    raise ValueError(f"unknown shape {shape!r}; the shapes are {list(SHAPES)}")


def peak_progress(shape: str) -> float:
    """The most of its gain a (jumping) run of `shape` ever makes."""
    return float(progress(shape, np.linspace(0, 50, 20001)).max())


@cache
def _u_at_horizon(shape: str, share: float) -> float:
    """The scaled time the median baseline run reaches at the horizon: where a (jumping) run of `shape` first makes
    `share` of the most it ever makes; for a curve that rises and falls, its peak's (the median baseline run peaks
    at the horizon, and an arm twice as fast peaks half way and falls from 66% to 60% of its gain by the end)."""
    if shape == "rise_fall":
        grid = np.linspace(0, 50, 20001)
        return float(grid[np.argmax(progress(shape, grid))])
    share *= peak_progress(shape)
    low, high = 0.0, 50.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if progress(shape, np.array([middle]))[0] < share else (low, middle)
    return high


@dataclass(frozen=True)
class Truth:
    """The arm: `speedup` times faster than the baseline, its gain raised by `higher_plateau` of the baseline's
    (capped half way to 1); `baseline_gain` and `arm_gain` scale each one's gain (negative: it falls below its
    start)."""

    speedup: float
    higher_plateau: float = 0.0
    baseline_gain: float = 1.0
    arm_gain: float = 1.0

    def plateau(self, design: Design) -> float:
        """The arm's plateau (exponential curves)."""
        gain = self.arm_gain * design.gain
        if not self.higher_plateau:
            return design.base + gain
        raised = design.base + gain + self.higher_plateau * design.gain
        return min(raised, design.plateau + 0.5 * (1 - design.plateau))

    def baseline_plateau(self, design: Design) -> float:
        return design.base + self.baseline_gain * design.gain

    def at(self, design: Design, target: float) -> float | None:
        """The true speedup at `target`: inf where only the arm's curve reaches it; None where the baseline's does
        not and the arm's does not either (or neither is defined)."""
        top = peak_progress(design.shape)
        reach_base = self.baseline_gain > 0 and target < design.base + self.baseline_gain * design.gain * top
        arm_top = self.plateau(design) if design.shape == "exponential" else design.base + self.arm_gain * design.gain
        reach_arm = arm_top > design.base and target < design.base + (arm_top - design.base) * top
        if not target > design.base:
            return None
        if not reach_base:
            return math.inf if reach_arm else None
        if not reach_arm:
            return 0.0
        base_top = self.baseline_plateau(design)
        if abs(arm_top - base_top) < 1e-12:
            return self.speedup
        if design.shape != "exponential":
            raise ValueError("other gains are simulated with exponential curves only")

        def needed(top: float) -> float:
            return -math.log(1 - (target - design.base) / (top - design.base))

        return self.speedup * needed(base_top) / needed(arm_top)


def simulate_run(
    generator: np.random.Generator, design: Design, plateau: float, speedup: float
) -> tuple[np.ndarray, np.ndarray]:
    """One run's evaluations (training seconds or steps, accuracies)."""
    draw = generator.normal() if design.tail == "normal" else generator.standard_t(3) / math.sqrt(3)
    tau = design.horizon / _u_at_horizon(design.shape, design.reaches) * math.exp(design.spread * draw)
    jumped = design.shape != "jumps" or generator.random() < JUMP_SHARE
    count = math.floor(design.horizon / design.every + 1e-9)
    delays = generator.uniform(0, design.step * design.every, count)
    times = np.concatenate([[0.0], design.every * np.arange(1, count + 1) + delays])
    truth = design.base + (plateau - design.base) * progress(design.shape, speedup * times / tau, jumped)
    return times, generator.binomial(design.questions, np.clip(truth, 0, 1)) / design.questions


def simulate_comparison(
    generator: np.random.Generator, design: Design, truth: Truth, arms: int = 1
) -> tuple[list[Curve], list[Curve]] | tuple[list[Curve], list[list[Curve]]]:
    """(baseline runs, arm runs) of one simulated comparison; with `arms` > 1, the first arm follows `truth` and the
    others are the baseline's equals: (baseline runs, [runs of each arm])."""
    arm_seeds = design.arm_seeds or design.seeds
    baseline = [simulate_run(generator, design, truth.baseline_plateau(design), 1.0) for _ in range(design.seeds)]
    arm = [simulate_run(generator, design, truth.plateau(design), truth.speedup) for _ in range(arm_seeds)]
    if arms == 1:
        return baseline, arm
    equal = replace(truth, speedup=1.0, higher_plateau=0.0, arm_gain=truth.baseline_gain)
    others = [
        [simulate_run(generator, design, equal.plateau(design), 1.0) for _ in range(arm_seeds)] for _ in range(arms - 1)
    ]
    return baseline, [arm, *others]


SPEEDUP_METHODS: dict[str, Callable[[Sequence[Curve], Sequence[Curve], float], Speedup]] = {
    "permutation": speedup_test,
    "curve_fit": fit_speedup,
}
P_AT_ONE: dict[str, Callable[[Sequence[Curve], Sequence[Curve], float], tuple[int, float]]] = {
    "permutation": p_at_one,
    "curve_fit": fit_p_at_one,
}


@dataclass(frozen=True)
class Outcome:
    """How one method did over many simulated comparisons of one design and truth."""

    comparisons: int  # with a defined truth
    coverage: float  # share of intervals (the accepted piece holding the estimate) that contain the true speedup
    resolved: float  # share resolved in the truth's direction (at a truth of 1: resolved at all, falsely)
    wrong: float  # share resolved against the truth's direction (0 at a truth of 1)
    bias: float | None  # median of log(estimate / truth), over the comparisons with an estimate and a finite truth
    unbounded: float  # share of intervals open at one end
    window_resolved: float  # share whose window-mean difference was resolved (its t interval excludes 0)
    coverage_of_set: float  # share whose accepted set (every piece) contains the true speedup


def _covers(low: float | None, high: float | None, truth: float) -> bool:
    top = math.inf if high is None else high
    if math.isinf(truth):
        return high is None
    return low is not None and low <= truth <= top


def run_methods(
    design: Design,
    truth: Truth,
    comparisons: int,
    seed: int = 0,
    gain: float = 0.75,
    methods: Sequence[str] = METHODS,
) -> dict[str, Outcome]:
    """Each speedup method of `methods` (at `gain` of the baseline's gain, or of the arm's where the baseline gains
    nothing: `comparison_target`) over the same simulated comparisons."""
    generator = np.random.default_rng(seed)
    tallies = {
        method: {"covered": 0, "set": 0, "resolved": 0, "wrong": 0, "open": 0, "errors": []} for method in methods
    }
    counted = window = 0
    for _ in range(comparisons):
        baseline, arm = simulate_comparison(generator, design, truth)
        target = comparison_target(baseline, {"arm": arm}, gain)
        true = None if target is None else truth.at(design, target.accuracy)
        if true is None or true == 0:
            continue
        counted += 1
        for method in methods:
            result, tally = SPEEDUP_METHODS[method](baseline, arm, target.accuracy), tallies[method]
            tally["covered"] += _covers(result.low, result.high, true)
            tally["set"] += any(_covers(low, high, true) for low, high in result.accepted)
            expected = 0 if true == 1 else (1 if true > 1 else -1)
            if result.p_value <= ALPHA and result.sign != 0:
                tally["resolved"] += expected == 0 or result.sign == expected
                tally["wrong"] += expected != 0 and result.sign != expected
            tally["open"] += result.low == 0.0 or result.high is None
            if result.estimate is not None and math.isfinite(true):
                tally["errors"].append(math.log(result.estimate / true))
        difference = window_test(baseline, arm)
        window += difference.p_value is not None and difference.p_value <= ALPHA
    if not counted:
        raise ValueError(f"{design.name}: no simulated comparison had a target its baseline's curve reaches")
    return {
        method: Outcome(
            counted,
            tally["covered"] / counted,
            tally["resolved"] / counted,
            tally["wrong"] / counted,
            float(np.median(tally["errors"])) if tally["errors"] else None,
            tally["open"] / counted,
            window / counted,
            tally["set"] / counted,
        )
        for method, tally in tallies.items()
    }


def run_method(
    design: Design, truth: Truth, comparisons: int, seed: int = 0, gain: float = 0.75, method: str = "permutation"
) -> Outcome:
    """`run_methods` for one method."""
    return run_methods(design, truth, comparisons, seed, gain, (method,))[method]


def window_test(baseline: Sequence[Curve], arm: Sequence[Curve]):
    """The window-mean difference as `pods compare` tests it (paired by seed; Welch where the seed counts differ)."""
    return window_difference(baseline, arm)[0]


def primary_result(
    baseline: Sequence[Curve], arm: Sequence[Curve], target: float | None, primary: str, method: str
) -> tuple[int, float]:
    """(sign, p-value) of the primary test of one arm: "speedup" (at `target`, by `method`; no target: (0, 1)) or
    "mean_accuracy" (the window mean)."""
    if primary == "mean_accuracy":
        difference = window_test(baseline, arm)
        if difference.p_value is None:
            return 0, 1.0
        return int(np.sign(difference.estimate)), difference.p_value
    if target is None:
        return 0, 1.0
    return P_AT_ONE[method](baseline, arm, target)


@dataclass(frozen=True)
class Power:
    """Verdicts over simulated comparisons: how often the first arm (the one that follows the truth) was resolved
    in the truth's direction, how often any arm was resolved against the truth (a false verdict: at a truth of 1,
    any verdict on the first arm; on the other arms, equal to the baseline, any verdict), and the mean seeds per arm
    spent (sequential designs)."""

    comparisons: int
    resolved: float
    false: float
    seeds: float


def verdict_power(
    design: Design,
    truth: Truth,
    comparisons: int,
    *,
    arms: int = 1,
    primary: str = "speedup",
    method: str = "permutation",
    seed: int = 0,
    gain: float = 0.75,
    looks: Sequence[int] | None = None,
) -> Power:
    """The verdict as `pods compare` draws it (`sequential.decide`): Holm over the primary tests of `arms` arms (the
    first follows `truth`, the others equal the baseline). With `looks` (seeds per arm at each look, the last the
    most), a sequential design: the comparison stops at the first look where every arm is resolved, and an arm's
    verdict is the first look's that resolves it."""
    looks = list(looks or [design.seeds])
    generator = np.random.default_rng(seed)
    expected = 1 if truth.speedup > 1 or truth.arm_gain > truth.baseline_gain or truth.higher_plateau > 0 else 0
    resolved = false = 0
    spent = []
    for _ in range(comparisons):
        baseline, arm_runs = simulate_comparison(generator, replace(design, seeds=looks[-1]), truth, arms=max(arms, 2))
        arm_runs = arm_runs[:arms]
        results: list[list[tuple[int, float | None]]] = []
        verdicts: list[tuple[int, int] | None] = [None] * arms
        used = looks[-1]
        for seeds in looks:
            base = baseline[:seeds]
            runs = [runs_of_arm[:seeds] for runs_of_arm in arm_runs]
            target = comparison_target(base, dict(enumerate(runs)), gain)
            accuracy = None if target is None else target.accuracy
            results.append([primary_result(base, arm, accuracy, primary, method) for arm in runs])
            verdicts = decide(results, looks, looks[-1])
            if all(verdict is not None for verdict in verdicts):
                used = seeds
                break
        spent.append(used)
        signs = [None if verdict is None else verdict[1] for verdict in verdicts]
        resolved += expected != 0 and signs[0] == expected
        wrong_first = signs[0] is not None and (expected == 0 or signs[0] != expected)
        false += wrong_first or any(sign is not None for sign in signs[1:])
    return Power(comparisons, resolved / comparisons, false / comparisons, float(np.mean(spent)))
