"""One arm of a finished comparison against every other arm, at the comparison's own target.

comparison.md measures every arm against one baseline (GRPO); a reader choosing between PODS and an alternative
needs PODS against each of them. This reads comparison.json (no training) and applies the report's measures with
each other arm in turn as the baseline: time and steps to the target (the report's permutation test, 95% interval),
and the difference in mean accuracy over the window (95% t interval) with the per-seed differences. The verdicts ask
the comparison's primary question of each other arm (`primary`, by default time to target, or steps to target when
the comparison is clocked by steps), Holm-adjusted over this table's arms; the other measures are secondary,
unadjusted (a comparison clocked by steps counts its window in steps and does not test its time to target, which
mixes the machines the runs ran on).

    .venv/bin/python benchmarks/arm_vs_arms.py benchmarks/results/smollm2-3term-epyc
    .venv/bin/python benchmarks/arm_vs_arms.py benchmarks/results/smollm2-sums --arm pods-ds
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pods_rl.compare.measures import (
    arm_versus,
    comparison_clock,
    curves_of,
    decide,
    difference_text,
    family_text,
    speedup_text,
    target_text,
    verdict_text,
)
from pods_rl.compare.statistics import Target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a comparison folder with comparison.json")
    parser.add_argument("--arm", default="pods", help="the arm measured against every other (default: pods)")
    args = parser.parse_args()
    comparison = json.loads((args.folder / "comparison.json").read_text())
    metric, saved = comparison["metric"], comparison["target"]
    if saved is None:
        raise SystemExit(f"{args.folder}: its comparison has no target (no baseline, or the baseline gained nothing)")
    fields = ("accuracy", "fraction", "base", "plateau", "of")
    target = Target(**{key: saved.get(key) for key in fields})
    targets = [Target(**{key: t.get(key) for key in fields}) for t in comparison["targets"]]
    runs = {
        name: [{"eval": evaluations} for evaluations in arm["evaluations"]] for name, arm in comparison["arms"].items()
    }
    curves = {
        name: {"seconds": curves_of(records, metric, "train_seconds"), "steps": curves_of(records, metric, "step")}
        for name, records in runs.items()
    }
    if args.arm not in curves:
        raise SystemExit(f"no arm {args.arm!r} in {args.folder}: it has {', '.join(curves)}")
    clock = comparison_clock(comparison)  # a step-clocked comparison: window by steps, time not tested
    versus = {
        other: arm_versus(curves[other], curves[args.arm], target, targets, clock)
        for other in curves
        if other != args.arm
    }
    _, family = decide(versus, clock, comparison["settings"].get("primary"))
    print(f"{args.arm} against every arm; target {target_text(target, saved['baseline'])} ({metric})\n")
    columns = [
        "time to target",
        "verdict",
        "steps to target",
        "verdict",
        "Δ window mean",
        "verdict",
        "per seed, points",
    ]
    print(f"| {args.arm} against | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for other, figures in versus.items():
        per_seed = ", ".join(f"{100 * d:+.1f}" for d in figures["mean_accuracy_difference_per_seed"])
        cells = [
            speedup_text(figures["time_to_target"]),
            verdict_text(figures, "time_to_target"),
            speedup_text(figures["steps_to_target"]),
            verdict_text(figures, "steps_to_target"),
            difference_text(figures["mean_accuracy_difference"]),
            verdict_text(figures, "mean_accuracy"),
            per_seed,
        ]
        print(f"| {other} | " + " | ".join(cells) + " |")
    print(f"\n{family_text(family)}")


if __name__ == "__main__":
    main()
