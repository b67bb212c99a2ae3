"""Coverage, false verdicts and power of `pods compare`'s statistics, by simulation with a known truth.

Every table draws simulated comparisons (`pods_rl.compare.simulation`): learning curves on a shipped comparison's
evaluation grid and horizon, seeds that differ in their time constant, binomial noise over the held-out questions,
and an arm whose runs are a known factor faster (or reach a higher plateau, or whose baseline falls). Tables:

1. Coverage of each speedup method (the permutation test on the crossings, the report's; the curve fits, reported
   beside it) per design, number of questions, curve shape and truth: how often the 95% interval (the accepted
   piece holding the estimate) contains the true speedup, how often the whole accepted set does, how often the
   test at s = 1 resolves in the truth's direction (at a truth of 1: falsely), how often against it, the median
   log-bias of the estimate, how often an interval is open at one end.
2. Verdict power: the share of comparisons whose verdict resolves a true 1.5x or 2x, as `pods compare` draws it
   now (one primary question per arm, Holm over the arms) and as it drew it before (Holm over every arm's time,
   steps and window tests, an interval wholly on one side of 1), with one arm and with three (the other two equal
   to the baseline).
3. Sequential designs (`--until-resolved`): false verdicts at a true 1x over all looks, power and the seeds spent,
   against fixed designs at the first look's and at the most seeds.
4. A baseline that falls below its start: the verdicts on the window mean and on the steps to target, and with
   both arms falling (no difference).
5. Seeds per arm for a design: verdict power at 6, 10 and 16 seeds.

    .venv/bin/python benchmarks/compare_coverage.py                     # 500 comparisons a case; about an hour
    .venv/bin/python benchmarks/compare_coverage.py --comparisons 50    # a quick look
    .venv/bin/python benchmarks/compare_coverage.py --only coverage     # one table
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
from rich.console import Console
from rich.table import Table

from pods_rl.compare.sequential import planned_looks
from pods_rl.compare.simulation import (
    SHIPPED,
    Design,
    Truth,
    run_methods,
    simulate_comparison,
    verdict_power,
    window_test,
)
from pods_rl.compare.statistics import ALPHA, LEVEL, comparison_target, holm, speedup_test

EXPONENTIAL = {
    "no difference": Truth(1.0),
    "1.5x faster": Truth(1.5),
    "2x faster": Truth(2.0),
    "higher plateau": Truth(1.0, higher_plateau=0.2),
}
# Cases beyond exponential curves: (label, how the design changes, truths).
HARDER = (
    ("S-shaped", {"shape": "sigmoid"}, (1.0, 2.0)),
    ("half the runs jump", {"shape": "jumps"}, (1.0, 2.0)),
    ("rise then fall", {"shape": "rise_fall"}, (1.0, 2.0)),
    ("heavy-tailed tau", {"tail": "heavy"}, (1.0, 2.0)),
    ("4 arm seeds vs 6", {"arm_seeds": 4}, (1.0, 2.0)),
)
FALLS = Truth(1.0, baseline_gain=-0.3)  # the baseline loses 30% of the design's gain; the arm gains it all
BOTH_FALL = Truth(1.0, baseline_gain=-0.3, arm_gain=-0.3)
# The questions each shipped comparison evaluated on (benchmarks/results).
SHIPPED_QUESTIONS = {SHIPPED[0].name: 200, SHIPPED[1].name: 200, SHIPPED[2].name: 50, SHIPPED[3].name: 200}


def _cell(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def coverage_table(comparisons: int) -> Table:
    table = Table(
        "design",
        "questions",
        "case",
        "truth",
        "method",
        "coverage",
        "set coverage",
        "resolved",
        "against",
        "median log-bias",
        "open",
        title=f"{LEVEL:.0%} intervals of each speedup method, {comparisons} simulated 6-seed comparisons a case "
        "(target: 75% of the baseline's gain)",
    )
    cases = []
    for design in SHIPPED:
        for questions in (50, 200):
            for label, truth in EXPONENTIAL.items():
                cases.append((replace(design, questions=questions), "exponential", label, truth))
    for design, questions in ((SHIPPED[0], 50), (SHIPPED[0], 200), (SHIPPED[3], 200)):
        for label, change, truths in HARDER:
            for speedup in truths:
                case = replace(design, questions=questions, **change)
                cases.append((case, label, f"{speedup:g}x", Truth(speedup)))
        cases.append((replace(design, questions=questions), "baseline falls", "arm only reaches", FALLS))
    for design, label, truth_label, truth in cases:
        for method, outcome in run_methods(design, truth, comparisons).items():
            table.add_row(
                design.name,
                str(design.questions),
                label,
                truth_label,
                method,
                _cell(outcome.coverage),
                _cell(outcome.coverage_of_set),
                _cell(outcome.resolved),
                _cell(outcome.wrong),
                "-" if outcome.bias is None else f"{outcome.bias:+.3f}",
                _cell(outcome.unbounded, 2),
            )
        table.add_section()
    return table


def old_verdict_power(design: Design, truth: Truth, comparisons: int, arms: int, seed: int = 0) -> float:
    """The verdict as drawn before issue 64: Holm over every arm's time, steps and window tests (here time and steps
    are one test, as when the arms' step costs are equal), resolved when the adjusted p-value is at most 5% and the
    whole span of accepted speedups lies on one side of 1."""
    generator = np.random.default_rng(seed)
    resolved = 0
    for _ in range(comparisons):
        baseline, runs = simulate_comparison(generator, design, truth, arms=max(arms, 2))
        runs = runs[:arms]
        target = comparison_target(baseline, dict(enumerate(runs)), 0.75)
        if target is None:
            continue
        results = [speedup_test(baseline, arm, target.accuracy) for arm in runs]
        windows = [window_test(baseline, arm).p_value for arm in runs]
        adjusted = holm(
            [p for result, window in zip(results, windows, strict=True) for p in (result.p_value,) * 2 + (window,)]
        )
        first = results[0]
        span_low = min(low for low, _ in first.accepted)
        highs = [high for _, high in first.accepted]
        span_high = None if any(high is None for high in highs) else max(highs)
        side = 1 if span_low > 1 else -1 if span_high is not None and span_high < 1 else 0
        resolved += adjusted[0] <= ALPHA and side == 1
    return resolved / comparisons


def verdict_table(comparisons: int) -> Table:
    table = Table(
        "design",
        "questions",
        "arms",
        "truth",
        "verdict power now",
        "before (3 tests per arm)",
        "false verdicts now at 1x",
        title=f"verdict power: {comparisons} simulated 6-seed comparisons a case; the first arm follows the truth, "
        "the others equal the baseline",
    )
    for design in SHIPPED:
        case = replace(design, questions=SHIPPED_QUESTIONS[design.name])
        for arms in (1, 3):
            null = verdict_power(case, Truth(1.0), comparisons, arms=arms).false
            for speedup in (1.5, 2.0):
                now = verdict_power(case, Truth(speedup), comparisons, arms=arms).resolved
                before = old_verdict_power(case, Truth(speedup), comparisons, arms)
                table.add_row(
                    design.name, str(case.questions), str(arms), f"{speedup:g}x", _cell(now, 2), _cell(before, 2),
                    _cell(null, 3),
                )  # fmt: skip
        table.add_section()
    return table


def sequential_table(comparisons: int) -> Table:
    table = Table(
        "design",
        "questions",
        "plan",
        "false verdicts at 1x",
        "power at 1.5x",
        "seeds spent at 1.5x",
        "power at 2x",
        "seeds spent at 2x",
        title=f"sequential designs (one arm; {comparisons} simulated comparisons a case; the null case "
        f"{2 * comparisons})",
    )
    plans = (
        ("fixed, 6 seeds", [6]),
        ("fixed, 12 seeds", [12]),
        ("6 then 2 more a look, to 12", planned_looks(6, 2, 12)),
    )
    for design in (SHIPPED[0], SHIPPED[2], SHIPPED[3]):
        case = replace(design, questions=SHIPPED_QUESTIONS[design.name])
        for label, looks in plans:
            sized = replace(case, seeds=looks[-1])
            kwargs = {"looks": looks} if len(looks) > 1 else {}
            null = verdict_power(sized, Truth(1.0), 2 * comparisons, **kwargs)
            cells = []
            for speedup in (1.5, 2.0):
                result = verdict_power(sized, Truth(speedup), comparisons, seed=1, **kwargs)
                cells += [_cell(result.resolved, 2), f"{result.seeds:.1f}"]
            table.add_row(design.name, str(case.questions), label, _cell(null.false), *cells)
        table.add_section()
    return table


def falling_table(comparisons: int) -> Table:
    table = Table(
        "design",
        "case",
        "primary",
        "resolved (higher / faster)",
        "false verdicts",
        title=f"a baseline that falls below its start ({comparisons} simulated 6-seed comparisons a case)",
    )
    for design in (SHIPPED[0], SHIPPED[3]):
        case = replace(design, questions=200)
        for label, truth in (("baseline falls, arm rises", FALLS), ("both fall alike", BOTH_FALL)):
            for primary in ("mean_accuracy", "speedup"):
                result = verdict_power(case, truth, comparisons, primary=primary)
                name = "window mean" if primary == "mean_accuracy" else "steps to target"
                table.add_row(design.name, label, name, _cell(result.resolved, 3), _cell(result.false, 3))
        table.add_section()
    return table


def seeds_table(comparisons: int) -> Table:
    table = Table(
        "design", "questions", "arms", "seeds per arm", "verdict power at 1.5x", "verdict power at 2x",
        title=f"seeds for a design: verdict power ({comparisons} simulated comparisons a case; random splits beyond "
        "8 seeds)",
    )  # fmt: skip
    for design in (SHIPPED[0], SHIPPED[2], SHIPPED[3]):
        case = replace(design, questions=SHIPPED_QUESTIONS[design.name])
        for arms in (1, 3):
            for seeds in (6, 10, 16):
                sized = replace(case, seeds=seeds)
                cells = [
                    _cell(verdict_power(sized, Truth(s), comparisons, arms=arms, seed=1).resolved, 2)
                    for s in (1.5, 2.0)
                ]
                table.add_row(design.name, str(case.questions), str(arms), str(seeds), *cells)
        table.add_section()
    return table


TABLES = {
    "coverage": coverage_table,
    "verdicts": verdict_table,
    "sequential": sequential_table,
    "falling": falling_table,
    "seeds": seeds_table,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=500, help="simulated comparisons per case")
    parser.add_argument("--only", choices=list(TABLES), action="append", help="the tables to print (default: all)")
    args = parser.parse_args()
    console = Console(width=240)
    for name in args.only or TABLES:
        count = args.comparisons if name == "coverage" else max(math.ceil(args.comparisons * 0.6), 10)
        console.print(TABLES[name](count))


if __name__ == "__main__":
    main()
