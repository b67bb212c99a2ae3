"""Coverage, false resolutions and power of `pods compare`'s speedup statistics, by simulation with a known truth.

For each shipped comparison's evaluation grid and horizon (`pods_rl.compare.simulation.SHIPPED`), at 50 and 200
questions per evaluation, and for each truth (no difference; the arm 1.5x and 2x faster; the arm as fast but with a
higher plateau), it simulates many 6-seed comparisons and reports how often the 95% interval contains the true
speedup, how often a difference is called resolved, the median log-bias of the estimate and how often an interval
is open at one end. The same comparisons are also read by the method `pods compare` used before (target 0.99 x
the mean of the baseline seeds' highest evaluations, per-seed interpolated crossings with censored runs entered at
their training time, geometric mean with a Student-t interval on the log-ratios). Then the power at 1.5x and 2x
with more seeds, for sizing a comparison.

    .venv/bin/python benchmarks/compare_coverage.py                       # 1000 comparisons per case
    .venv/bin/python benchmarks/compare_coverage.py --comparisons 50      # a quick look
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

import numpy as np
from rich.console import Console
from rich.table import Table
from scipy import stats

from pods_rl.compare.simulation import SHIPPED, Design, Truth, run_method, simulate_comparison
from pods_rl.compare.statistics import ALPHA, LEVEL, time_to_target

TRUTHS = {
    "no difference": Truth(1.0),
    "1.5x faster": Truth(1.5),
    "2x faster": Truth(2.0),
    "higher plateau": Truth(1.0, higher_plateau=0.2),
}


def old_method(design: Design, truth: Truth, comparisons: int, seed: int = 0) -> tuple[float | None, float | None, int]:
    """(coverage, share resolved, comparisons with a defined truth) of the method before issue 44; the target at or
    above the baseline's plateau (its noiseless curve never reaches it) leaves the truth of a higher plateau
    undefined, and that comparison out."""
    generator = np.random.default_rng(seed)
    covered = resolved = counted = 0
    for _ in range(comparisons):
        baseline, arm = simulate_comparison(generator, design, truth)
        target = 0.99 * float(np.mean([values.max() for _, values in baseline]))
        true = truth.speedup if not truth.higher_plateau else truth.at(design, target)
        ratios = []
        for base_run, arm_run in zip(baseline, arm, strict=True):
            base_time = time_to_target(*base_run, target).crossing
            arm_time = time_to_target(*arm_run, target).crossing
            if arm_time > 0 and base_time > 0:
                ratios.append(base_time / arm_time)
        if true is None or len(ratios) < 2:
            continue
        counted += 1
        logs = np.log(ratios)
        half = stats.t.ppf(0.5 + LEVEL / 2, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
        low, high = math.exp(logs.mean() - half), math.exp(logs.mean() + half)
        covered += low <= true <= high
        resolved += low > 1 or high < 1
    if not counted:
        return None, None, 0
    return covered / counted, resolved / counted, counted


def coverage_table(comparisons: int) -> Table:
    table = Table(
        "design",
        "questions",
        "truth",
        "coverage",
        "resolved",
        "median log-bias",
        "open intervals",
        "window mean resolved",
        "old: coverage",
        "old: resolved",
        title=f"{LEVEL:.0%} intervals over {comparisons} simulated 6-seed comparisons per case (target: 75% of the "
        "baseline's gain; old: 0.99 x its seeds' mean peak)",
    )
    for design in SHIPPED:
        for questions in (50, 200):
            case = replace(design, questions=questions)
            for label, truth in TRUTHS.items():
                new = run_method(case, truth, comparisons)
                old_coverage, old_resolved, _ = old_method(case, truth, comparisons)
                table.add_row(
                    design.name,
                    str(questions),
                    label,
                    f"{new.coverage:.3f}",
                    f"{new.resolved:.3f}",
                    "-" if new.bias is None else f"{new.bias:+.3f}",
                    f"{new.unbounded:.2f}",
                    f"{new.window_resolved:.3f}" if truth.speedup == 1 and not truth.higher_plateau else "",
                    "-" if old_coverage is None else f"{old_coverage:.3f}",
                    "-" if old_resolved is None else f"{old_resolved:.3f}",
                )
            table.add_section()
    return table


def power_table(comparisons: int) -> Table:
    table = Table(
        "design", "questions", "seeds per arm", "resolved at 1.5x", "resolved at 2x",
        title=f"power: share of {comparisons} simulated comparisons resolved at the {ALPHA:.0%} level",
    )  # fmt: skip
    for design, questions in ((SHIPPED[0], 200), (SHIPPED[2], 50), (SHIPPED[3], 200)):
        for seeds in (6, 10, 16):
            case = replace(design, questions=questions, seeds=seeds)
            cells = [f"{run_method(case, Truth(s), comparisons, seed=1).resolved:.2f}" for s in (1.5, 2.0)]
            table.add_row(design.name, str(questions), str(seeds), *cells)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comparisons", type=int, default=1000, help="simulated comparisons per case")
    parser.add_argument("--power-comparisons", type=int, default=None, help="per power case (default: a third)")
    args = parser.parse_args()
    console = Console(width=200)
    console.print(coverage_table(args.comparisons))
    console.print(power_table(args.power_comparisons or max(args.comparisons // 3, 10)))


if __name__ == "__main__":
    main()
