"""One arm of a finished comparison against every other arm, paired by seed, at the comparison's own target.

comparison.md measures every arm against one baseline (GRPO); a reader choosing between PODS and an alternative
needs PODS against each of them. This reads comparison.json (no training) and applies the report's measures with
each other arm in turn as the baseline: speedup to the target (geometric mean, 95% t interval), what the brackets
alone allow of it (no interpolation between evaluations), and the difference in mean accuracy over the window (95% t
interval), with the per-seed differences.

    .venv/bin/python benchmarks/arm_vs_arms.py benchmarks/results/smollm2-3term-epyc
    .venv/bin/python benchmarks/arm_vs_arms.py benchmarks/results/smollm2-sums --arm pods-ds
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pods_rl.compare.measures import BRACKET_VERDICTS, bracket_text
from pods_rl.compare.statistics import compare_to_baseline


def interval(figure: dict, scale: float, unit: str, signed: bool) -> str:
    """'1.82x (1.07-3.09x)' or '+3.1 (-4.0 to +10.1)'."""
    fmt = "{:+.1f}" if signed else "{:.2f}"
    low, high = fmt.format(scale * figure["low"]), fmt.format(scale * figure["high"])
    joined = f"{low} to {high}" if signed else f"{low}-{high}{unit}"
    return f"{fmt.format(scale * figure['estimate'])}{unit} ({joined})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a comparison folder with comparison.json")
    parser.add_argument("--arm", default="pods", help="the arm measured against every other (default: pods)")
    args = parser.parse_args()
    comparison = json.loads((args.folder / "comparison.json").read_text())
    metric, target = comparison["metric"], comparison["target"]["accuracy"]
    curves = {
        name: [([e["train_seconds"] for e in run], [e[metric] for e in run]) for run in arm["evaluations"]]
        for name, arm in comparison["arms"].items()
    }
    if args.arm not in curves:
        raise SystemExit(f"no arm {args.arm!r} in {args.folder}: it has {', '.join(curves)}")
    print(f"{args.arm} against every arm, target {100 * target:.1f}% ({metric})\n")
    columns = ["speedup (95% t interval)", "faster on", "censored (other arm)", "by the brackets alone"]
    columns += ["Δ window mean, points (95% t interval)", "per seed, points"]
    print(f"| {args.arm} against | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for other in curves:
        if other == args.arm:
            continue
        versus = compare_to_baseline(curves[other], curves[args.arm], target)
        speedup = "undefined" if versus["speedup"] is None else interval(versus["speedup"], 1, "x", signed=False)
        seeds = len(versus["speedup_per_seed"])
        per_seed = ", ".join(f"{100 * d:+.1f}" for d in versus["mean_accuracy_difference_per_seed"])
        window = interval(versus["mean_accuracy_difference"], 100, "", signed=True)
        brackets = versus["speedup_by_brackets"]
        grid = "-" if brackets is None else f"{bracket_text(brackets)}: {BRACKET_VERDICTS[brackets['resolved']]}"
        print(
            f"| {other} | {speedup} | {versus['seeds_faster']} of {seeds} | {versus['censored']['baseline']} "
            f"| {grid} | {window} | {per_seed} |"
        )


if __name__ == "__main__":
    main()
