"""`pods compare --status DIR`: what a comparison has finished and what it has left, read from its folder alone.

A long comparison spans sittings (`pods compare --resume`), often on fresh machines. Between them this says,
without loading a model or training anything, which runs are done, what each finished one measured (steps, seconds
per step, the window mean that the tuning rule scores), each arm's best learning rate so far, and how much
training and evaluation is left.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.table import Table

from pods_rl.compare.layout import (
    is_finished,
    load_run,
    reported_label,
    reported_runs,
    tuning_label,
    tuning_records,
    tuning_runs,
)
from pods_rl.compare.settings import CompareSettings, load_compare
from pods_rl.compare.tuning import choose_learning_rates, tuning_warnings, window_accuracy
from pods_rl.machine import machine_label


@dataclass(frozen=True)
class RunProgress:
    """One planned run: pending, or what it measured."""

    label: str
    finished: bool
    steps: int | None = None
    generate_seconds: float | None = None  # mean per step
    update_seconds: float | None = None  # mean per step
    window_accuracy: float | None = None
    peak_accuracy: float | None = None
    busy_seconds: float | None = None  # training plus evaluation: the run's wall time less its start-up
    machine: str | None = None  # machine_label of what it ran on


def run_progress(label: str, run_dir: Path, metric: str, clock: str = "seconds") -> RunProgress:
    if not is_finished(run_dir):
        return RunProgress(label, finished=False)
    records = load_run(run_dir)
    steps, evaluations = records["step"], records["eval"]
    return RunProgress(
        label,
        finished=True,
        steps=len(steps),
        generate_seconds=float(np.mean([s["pods/time_generate"] for s in steps])),
        update_seconds=float(np.mean([s["pods/time_update"] for s in steps])),
        window_accuracy=window_accuracy(evaluations, metric, clock),
        peak_accuracy=max(e[metric] for e in evaluations),
        busy_seconds=evaluations[-1]["train_seconds"] + sum(e.get("eval_seconds", 0.0) for e in evaluations),
        machine=machine_label(records["machine"]),
    )


@dataclass(frozen=True)
class ComparisonProgress:
    settings: CompareSettings
    runs: list[RunProgress]  # tuning runs first, then the reported ones, in the order they train
    best_rates: dict[str, dict] | None  # choose_learning_rates over the rates whose tuning runs all finished
    rates_tuned: dict[str, int]  # per arm, how many rates of the grid that is
    warnings: list[str]  # tuning_warnings of the arms whose every rate finished: settle them before reporting

    @property
    def seconds_left(self) -> float | None:
        """The pending runs at the finished runs' mean busy seconds (None before any run finished)."""
        done = [run.busy_seconds for run in self.runs if run.finished]
        return float(np.mean(done)) * sum(not run.finished for run in self.runs) if done else None


def comparison_progress(output_dir: Path) -> ComparisonProgress:
    settings = load_compare(output_dir, "--status")
    metric = settings.metric
    tuning = tuning_runs(settings, output_dir)
    clock = settings.clock
    runs = [run_progress(tuning_label(*key), run_dir, metric, clock) for key, run_dir in tuning.items()]
    runs += [
        run_progress(reported_label(name, seed), d, metric, clock)
        for (name, seed), d in reported_runs(settings, output_dir).items()
    ]
    if not settings.lr_grid:
        return ComparisonProgress(settings, runs, None, {}, [])
    complete = tuning_records(settings, tuning)
    rates_tuned = {name: len(by_rate) for name, by_rate in complete.items()}
    best = choose_learning_rates(settings, {name: by_rate for name, by_rate in complete.items() if by_rate})
    final = {name: arm for name, arm in best["arms"].items() if rates_tuned[name] == len(settings.lr_grid)}
    return ComparisonProgress(settings, runs, best["arms"], rates_tuned, tuning_warnings({**best, "arms": final}))


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def progress_tables(progress: ComparisonProgress) -> list[Table]:
    """The runs, finished and pending; and, with a learning-rate grid, each arm's tuning so far."""
    finished = sum(run.finished for run in progress.runs)
    left = progress.seconds_left
    caption = f"{finished} of {len(progress.runs)} runs finished"
    if left is not None and finished < len(progress.runs):
        caption += (
            f"; left: about {_duration(left)} of training and evaluation (the finished runs' mean each, start-up "
            "excluded)"
        )
    machines = Counter(run.machine for run in progress.runs if run.finished)
    if machines:
        caption += "; ran on " + "; ".join(f"{label} ({count} runs)" for label, count in machines.items())
    runs = Table(
        "run", "steps", "s/step generate", "s/step update", "window mean %", "peak %", "minutes",
        title=f"comparison progress ({progress.settings.metric})",
        caption=caption,
    )  # fmt: skip
    for run in progress.runs:
        if not run.finished:
            runs.add_row(run.label, "pending", *[""] * 5)
            continue
        runs.add_row(
            run.label,
            str(run.steps),
            _seconds(run.generate_seconds),
            _seconds(run.update_seconds),
            f"{100 * run.window_accuracy:.1f}",
            f"{100 * run.peak_accuracy:.1f}",
            _seconds(run.busy_seconds / 60),
        )
    if progress.best_rates is None:
        return [runs]
    grid = progress.settings.lr_grid
    tuning = Table(
        "arm",
        *(f"lr {rate:g}" for rate in grid),
        "best so far",
        title="learning rates: window mean % over the tuning seeds",
        caption="a rate shows once every tuning seed of it finished; the choice is final when every rate shows",
    )
    for name in progress.settings.arms:
        best = progress.best_rates.get(name)
        scores = best["mean_accuracy"] if best else {}
        cells = [f"{100 * scores[f'{rate:g}']:.1f}" if f"{rate:g}" in scores else "" for rate in grid]
        chosen = ""
        if best:
            final = progress.rates_tuned[name] == len(grid)
            chosen = f"{best['chosen']:g}" + ("" if final else f" ({progress.rates_tuned[name]} of {len(grid)} rates)")
        tuning.add_row(name, *cells, chosen)
    return [runs, tuning]
