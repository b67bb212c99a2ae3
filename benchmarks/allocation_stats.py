"""What rollout allocation did per step in a `pods compare` folder (docs/allocation.md): for each arm, the mean over
every step of its reported runs (tuning runs excluded) of the prompts drawn, screened, extended, skipped and filled,
the generation rounds, the rollouts generated, the rollouts per trained prompt (min / mean / max), and the share of
trained prompts whose pool's rewards were all equal (nothing to learn from them). Reads each run's metrics.jsonl: no
training. A dash: the arm does not log that figure (no allocation, or no dynamic sampling).

    .venv/bin/python benchmarks/allocation_stats.py runs/compare-allocation-tiny
    .venv/bin/python benchmarks/allocation_stats.py runs/compare-allocation-3term --seeds 0 1 2
"""

from __future__ import annotations

import argparse
from pathlib import Path
from statistics import fmean

from pods_rl.compare.layout import is_finished, load_run, reported_runs
from pods_rl.compare.settings import load_compare

# (column, metric): each a mean over steps of the metric in metrics.jsonl.
COLUMNS = (
    ("rollouts generated", "pods/rollouts_generated"),
    ("rounds", "pods/generation_rounds"),
    ("prompts generated for", "pods/prompts_generated"),
    ("screened", "pods/prompts_screened"),
    ("extended", "pods/prompts_extended"),
    ("skipped or not extended", "pods/prompts_skipped"),
    ("filled (not qualified)", "pods/prompts_filled"),
    ("rollouts per trained prompt: min", "pods/rollouts_per_prompt_min"),
    ("mean", "pods/rollouts_per_prompt_mean"),
    ("max", "pods/rollouts_per_prompt_max"),
)
PERCENT = ("all-equal pools (%)", "pods/zero_variance_groups_frac")


def arm_means(runs: list[Path]) -> tuple[dict[str, float | None], int]:
    """Each metric's mean over every step of `runs` (None where no step logs it), and the number of steps."""
    steps = [record for run in runs for record in load_run(run)["step"]]
    logged = {metric: [step[metric] for step in steps if metric in step] for _, metric in (*COLUMNS, PERCENT)}
    return {metric: fmean(values) if values else None for metric, values in logged.items()}, len(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a pods compare folder (with compare.yaml and the runs)")
    parser.add_argument("--seeds", type=int, nargs="+", help="the reported seeds to read (default: every finished)")
    args = parser.parse_args()
    try:
        settings = load_compare(args.folder, option="folder")
    except ValueError as error:
        raise SystemExit(str(error)) from None
    runs: dict[str, list[Path]] = {name: [] for name in settings.arms}
    seeds: dict[str, list[int]] = {name: [] for name in settings.arms}
    for (name, seed), folder in reported_runs(settings, args.folder).items():
        if (args.seeds is None or seed in args.seeds) and is_finished(folder):
            runs[name].append(folder)
            seeds[name].append(seed)
    if not any(runs.values()):
        raise SystemExit(f"{args.folder}: no finished reported run (of seeds {args.seeds or settings.seeds})")
    header = ["arm", "seeds", "steps", *(column for column, _ in COLUMNS), PERCENT[0]]
    print(f"Per step, mean over every step of the reported runs of {args.folder}\n")
    print("| " + " | ".join(header) + " |")
    print("|---" * len(header) + "|")
    for name, folders in runs.items():
        if not folders:
            continue
        means, steps = arm_means(folders)
        cells = [name, " ".join(map(str, seeds[name])), str(steps)]
        cells += ["—" if means[metric] is None else f"{means[metric]:.1f}" for _, metric in COLUMNS]
        share = means[PERCENT[1]]
        cells.append("—" if share is None else f"{100 * share:.0f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
