"""Stand-ins for what a comparison reads and runs: synthetic run records and a fake `pods train`."""

from __future__ import annotations

import json
from pathlib import Path

import yaml


def synthetic_run(
    times: list[float], accuracy: list[float], generated: int, trained: int, refills: dict | None = None
) -> dict[str, list[dict]]:
    """Synthetic records: phase times exactly linear in the rollout counts; `refills`: dynamic sampling's per-step
    metrics, one list per metric, a value per step."""
    phases = {
        "pods/time_generate": 0.1 * generated + 0.5,
        "pods/time_score": 0.01 * generated,
        "pods/time_select": 0.001 * generated + 0.002,
        "pods/time_update": 0.2 * trained + 1.0,
    }
    counts = {"pods/rollouts_generated": generated, "pods/rollouts_trained": trained}
    tokens = {"pods/tokens_generated": 10 * generated, "pods/tokens_trained": 10 * trained}
    steps = [{"step": i + 1, "train_seconds": t, **phases, **counts, **tokens} for i, t in enumerate(times[1:])]
    for name, values in (refills or {}).items():
        for step, value in zip(steps, values, strict=True):
            step[f"pods/{name}"] = value
    evals = [
        {"step": i, "train_seconds": t, "eval_seconds": 2.0 + i, "accuracy": a}
        for i, (t, a) in enumerate(zip(times, accuracy, strict=True))
    ]
    return {"step": steps, "eval": evals}


TUNED_ACCURACY = {
    "grpo": {1e-5: 0.3, 2e-5: 0.6, 4e-5: 0.4, 8e-5: 0.5},
    "pods": {1e-5: 0.2, 2e-5: 0.5, 4e-5: 0.7, 8e-5: 0.65},
}


def fake_pods_train(calls: list[tuple[str, float, int]] | None = None):
    """Stands in for the `pods train` process: writes the run folder a finished run leaves (config.yaml,
    metrics.jsonl, summary.json), with an accuracy that depends on the arm and the learning rate only."""

    def train(settings, run_dir: Path, lock=None) -> None:
        trainer = settings.trainer
        arm = "grpo" if trainer["num_generations"] == trainer["num_selected"] else "pods"
        rate = trainer["learning_rate"]
        if calls is not None:
            calls.append((arm, rate, settings.seed))
        accuracy = TUNED_ACCURACY[arm][rate]
        n, m = trainer["num_generations"], trainer["num_selected"]
        record = synthetic_run([0, 10, 20], [0.1, accuracy, accuracy], 2 * n, 2 * m)
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(settings.to_dict()))
        lines = [{"type": "step", **s} for s in record["step"]] + [{"type": "eval", **e} for e in record["eval"]]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (run_dir / "summary.json").write_text(json.dumps({"steps": 2, "peak_accuracy": accuracy}))

    return train
