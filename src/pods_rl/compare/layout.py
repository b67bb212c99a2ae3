"""A comparison folder's layout: where each tuning and reported run lives, whether it finished, and its records.

<folder>/compare.yaml                      the comparison's settings
<folder>/tuning/<arm>/lr-<rate>/seed-<s>/  a tuning run (with a learning-rate grid)
<folder>/<arm>/seed-<s>/                   a reported run
<folder>/base-models/tiny-<recipe hash>/   the tiny model's warm start, pinned by the first run that built it or
                                           found it, so that every later run starts from it on any CPU
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pods_rl.compare.settings import CompareSettings
from pods_rl.run.folders import METRICS_FILE, SUMMARY_FILE

BASE_MODELS = "base-models"


def tuning_runs(settings: CompareSettings, output_dir: Path) -> dict[tuple[str, float, int], Path]:
    """The folder of each tuning run, {(arm, rate, tuning seed): folder}, in the order they train (none without a
    grid)."""
    return {
        (name, rate, seed): Path(output_dir) / "tuning" / name / f"lr-{rate:g}" / f"seed-{seed}"
        for seed in settings.tuning_seeds or []
        for name in settings.arms
        for rate in settings.lr_grid or []
    }


def tuning_label(name: str, rate: float, seed: int) -> str:
    return f"tuning {name} lr {rate:g} seed {seed}"


def reported_label(name: str, seed: int) -> str:
    return f"{name} seed {seed}"


def reported_runs(settings: CompareSettings, output_dir: Path) -> dict[tuple[str, int], Path]:
    """The folder of each reported run, {(arm, seed): folder}, in the order they train: seed by seed, every arm in
    turn, so that slow drifts in machine load (shared cores) hit every arm alike."""
    return {(name, seed): Path(output_dir) / name / f"seed-{seed}" for seed in settings.seeds for name in settings.arms}


def is_finished(run_dir: Path) -> bool:
    """Whether `pods train` ended this run (it writes summary.json last)."""
    return (run_dir / SUMMARY_FILE).exists()


def load_run(run_dir: Path) -> dict[str, Any]:
    """A finished run's step and eval records from its metrics.jsonl, and the machine it ran on (None for a run
    that predates that record)."""
    records = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line]
    machine = json.loads((run_dir / SUMMARY_FILE).read_text()).get("machine")
    return {**{kind: [r for r in records if r["type"] == kind] for kind in ("step", "eval")}, "machine": machine}


def tuning_records(
    settings: CompareSettings, tuning: dict[tuple[str, float, int], Path]
) -> dict[str, dict[float, list[dict[str, Any]]]]:
    """Each arm's tuning records, {arm: {rate: per-seed records}}, of the rates whose every tuning seed finished
    (every rate, once the tuning has run): what `choose_learning_rates` chooses from."""
    return {
        name: {
            rate: [load_run(tuning[name, rate, seed]) for seed in settings.tuning_seeds or []]
            for rate in settings.lr_grid or []
            if all(is_finished(tuning[name, rate, seed]) for seed in settings.tuning_seeds or [])
        }
        for name in settings.arms
    }
