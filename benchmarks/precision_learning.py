"""Does bf16 change what a run learns? Paired `pods train` runs, fp32 against bf16 (autocast over fp32 weights), by
steps, on the same seeds, and the equivalence of their accuracies within a stated margin.

Settings: the tiny default (250 steps, an evaluation every 25 steps, seeds 0-5) and SmolLM2-135M's CPU preset on
sums of two one-digit numbers (50 steps, an evaluation every 10 steps, seeds 0-2), each with HF `generate` (so that
bf16 covers generation as well as the update) and `trainer.bf16` forced either way. Every evaluation is greedy and in
fp32, whatever the run's precision. Per seed: the window mean (the mean accuracy over the run, the area under the
accuracy-by-step curve from step 0 to the last step divided by its length) and the final accuracy, in each precision,
and bf16's difference in points. Across seeds: the mean difference with its 95% Student-t interval, and the verdict of
two one-sided tests at 5% against the margin (+-2 points by default): "equivalent" when the 90% interval lies inside
(-margin, +margin), "not equivalent" when it lies outside, else "not shown either way" (more seeds narrow it).

Runs live in `--root` (default runs/precision-learning/<setting>/<precision>/seed-<s>) and a finished run (its
summary.json, in the planned precision) is never trained again, so the script resumes where it stopped and, once
everything has run, only prints the report (runs with other `--set` settings need another `--root`). One command
runs everything in sequence (hours: about 2.5 min a tiny run and 20 min a SmolLM2 run on 2 idle cores):

    .venv/bin/python benchmarks/precision_learning.py                     # both settings, then the report
    .venv/bin/python benchmarks/precision_learning.py --settings tiny --seeds 0 1 2 3 4 5
    .venv/bin/python benchmarks/precision_learning.py --report            # the report of the finished runs only

The runs' precision is forced, so the start-up measurement decides nothing here; their step seconds are printed too
(the training time of each run), but they are a by-product: `benchmarks/precision_phases.py` measures speed.
`--set KEY=VALUE` passes settings to every run (e.g. to shrink them when checking the script) and `--tiny-dir` names
a tiny model folder instead of the built-in one.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from rich.table import Table
from scipy import stats

from pods_rl.console import make_console

PRECISIONS = ("fp32", "bf16")
SETTINGS: dict[str, dict[str, Any]] = {
    "tiny": {"model": "tiny", "task": "arithmetic", "eval_every": 25, "seeds": [0, 1, 2, 3, 4, 5]},
    "smollm2-sums": {"model": "smollm2-135m", "task": "arithmetic", "eval_every": 10, "seeds": [0, 1, 2]},
}
MARGIN = 2.0  # points


def run_dir(root: Path, setting: str, precision: str, seed: int) -> Path:
    return root / setting / precision / f"seed-{seed}"


def finished(folder: Path, precision: str) -> bool:
    """A run that ended (summary.json) in the planned precision."""
    try:
        summary = json.loads((folder / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return summary.get("precision", {}).get("dtype") == precision


def command(setting: str, precision: str, seed: int, folder: Path, options: argparse.Namespace) -> list[str]:
    spec = SETTINGS[setting]
    model = options.tiny_dir if spec["model"] == "tiny" and options.tiny_dir else spec["model"]
    line = [sys.executable, "-m", "pods_rl", "train", "--model", model, "--task", spec["task"], "--seed", str(seed)]
    line += ["--output-dir", str(folder), "--no-vllm", "--eval-every", str(spec["eval_every"])]
    line += ["--set", f"trainer.bf16={'true' if precision == 'bf16' else 'false'}"]
    for extra in options.set or []:
        line += ["--set", extra]
    return line


def train_missing(setting: str, seeds: list[int], options: argparse.Namespace, console) -> None:
    """Train every run of `setting` that has not finished, seed by seed, the precisions' order alternating."""
    for index, seed in enumerate(seeds):
        for precision in PRECISIONS if index % 2 == 0 else reversed(PRECISIONS):
            folder = run_dir(options.root, setting, precision, seed)
            if finished(folder, precision):
                console.print(f"{setting} {precision} seed {seed}: finished, kept ({folder})")
                continue
            if folder.exists():  # an interrupted run: start it over
                shutil.rmtree(folder)
            folder.parent.mkdir(parents=True, exist_ok=True)
            console.print(f"{setting} {precision} seed {seed}: training -> {folder}")
            with (folder.parent / f"seed-{seed}.log").open("w") as log:
                result = subprocess.run(command(setting, precision, seed, folder, options), stdout=log, stderr=log)
            if result.returncode != 0:
                raise SystemExit(f"{setting} {precision} seed {seed} failed (exit {result.returncode}): see {log.name}")


def evaluations(folder: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [record for record in records if record["type"] == "eval"]


def window_mean(records: list[dict[str, Any]]) -> float:
    """The mean accuracy over the run: the area under accuracy by step (linear between evaluations), divided by
    the steps from the first evaluation to the last."""
    steps = np.array([r["step"] for r in records], dtype=float)
    accuracy = np.array([r["accuracy"] for r in records], dtype=float)
    if steps[-1] == steps[0]:
        return float(accuracy[0])
    return float(np.sum((accuracy[1:] + accuracy[:-1]) / 2 * np.diff(steps)) / (steps[-1] - steps[0]))


def interval(values: list[float], level: float) -> tuple[float, float, float]:
    """The mean and its two-sided Student-t interval at `level` (the mean twice for one value)."""
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if len(array) < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, len(array) - 1) * array.std(ddof=1) / math.sqrt(len(array)))
    return mean, mean - half, mean + half


def verdict(differences: list[float], margin: float) -> str:
    """Two one-sided tests at 5%: the 90% interval inside (-margin, margin) is equivalence, outside it is not."""
    _, low, high = interval(differences, 0.90)
    if math.isnan(low):
        return "one seed: no interval"
    if -margin < low and high < margin:
        return f"equivalent within +-{margin:g} points"
    if high <= -margin or low >= margin:
        return f"not equivalent: beyond +-{margin:g} points"
    return f"not shown either way at +-{margin:g} points (90% interval {low:+.1f} to {high:+.1f})"


def report(setting: str, seeds: list[int], options: argparse.Namespace) -> tuple[Table, list[str]]:
    """Per seed and across seeds, from the finished pairs of `setting`."""
    table = Table(
        "seed", "fp32 window", "bf16 window", "window diff", "fp32 final", "bf16 final", "final diff",
        "fp32 s/step", "bf16 s/step", title=f"{setting}: held-out accuracy (%) by precision, bf16 minus fp32 (points)",
    )  # fmt: skip
    differences: dict[str, list[float]] = {"window": [], "final": []}
    seconds: dict[str, list[float]] = {precision: [] for precision in PRECISIONS}
    for seed in seeds:
        folders = {p: run_dir(options.root, setting, p, seed) for p in PRECISIONS}
        if not all(finished(folder, p) for p, folder in folders.items()):
            continue
        records = {p: evaluations(folder) for p, folder in folders.items()}
        summaries = {p: json.loads((folder / "summary.json").read_text()) for p, folder in folders.items()}
        window = {p: 100 * window_mean(records[p]) for p in PRECISIONS}
        final = {p: 100 * records[p][-1]["accuracy"] for p in PRECISIONS}
        pace = {p: summaries[p]["train_seconds"] / max(summaries[p]["steps"], 1) for p in PRECISIONS}
        differences["window"].append(window["bf16"] - window["fp32"])
        differences["final"].append(final["bf16"] - final["fp32"])
        for p in PRECISIONS:
            seconds[p].append(pace[p])
        table.add_row(
            str(seed), f"{window['fp32']:.1f}", f"{window['bf16']:.1f}", f"{differences['window'][-1]:+.1f}",
            f"{final['fp32']:.1f}", f"{final['bf16']:.1f}", f"{differences['final'][-1]:+.1f}",
            f"{pace['fp32']:.2f}", f"{pace['bf16']:.2f}",
        )  # fmt: skip
    lines = []
    pairs = len(differences["window"])
    if pairs:
        for what, values in differences.items():
            mean, low, high = interval(values, 0.95)
            spread = "" if math.isnan(low) else f" (95% interval {low:+.1f} to {high:+.1f})"
            lines.append(
                f"{setting}, {what} accuracy: bf16 minus fp32 {mean:+.1f} points{spread} over {pairs} seed(s): "
                f"{verdict(values, options.margin)}"
            )
        ratio = float(np.exp(np.mean(np.log(np.array(seconds["fp32"]) / np.array(seconds["bf16"])))))
        lines.append(f"{setting}, training seconds a step: fp32 / bf16 = {ratio:.2f}x (geometric mean over seeds)")
    missing = len(seeds) - pairs
    if missing:
        lines.append(f"{setting}: {missing} of {len(seeds)} seed(s) not finished in both precisions")
    return table, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds of every setting (default: its own)")
    parser.add_argument("--root", type=Path, default=Path("runs/precision-learning"))
    parser.add_argument("--margin", type=float, default=MARGIN, help="equivalence margin in points")
    parser.add_argument("--report", action="store_true", help="report the finished runs only, train nothing")
    parser.add_argument("--set", action="append", help="KEY=VALUE passed to every run's `pods train --set`")
    parser.add_argument("--tiny-dir", help="a tiny model folder to use instead of the built-in `tiny`")
    options = parser.parse_args()
    console = make_console(stderr=False)
    for setting in options.settings:
        seeds = options.seeds or SETTINGS[setting]["seeds"]
        if not options.report:
            train_missing(setting, seeds, options, console)
        table, lines = report(setting, seeds, options)
        console.print(table)
        for line in lines:
            console.print(line, highlight=False, soft_wrap=True)


if __name__ == "__main__":
    main()
