"""What a run does around its trainer, synchronous (`pods_rl.run.train`) or asynchronous (`pods_rl.run.async_train`):
the trainer settings a run owns, its files (written whole or not at all, truncated to a checkpoint on resume), the
summary, and a stop by signal.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pods_rl.files import write_atomic
from pods_rl.machine import describe_machine
from pods_rl.run.checkpoints import step_of
from pods_rl.run.settings import RunSettings

if TYPE_CHECKING:
    from pods_rl.run.monitor import RunMonitor

LOG_FILE = "train.log"


class RunInterrupted(SystemExit):
    """SIGINT/SIGTERM stopped the run after saving a checkpoint; exits with the shell's 128 + signal number."""

    def __init__(self, signal_number: int):
        super().__init__(128 + signal_number)
        self.signal_number = signal_number


def remove_staging(output_dir: Path) -> None:
    """Delete checkpoints that were being written when a run was killed."""
    from pods_rl.trainer.trainer import STAGING_PREFIX

    for staging in output_dir.glob(f"{STAGING_PREFIX}checkpoint-*"):
        shutil.rmtree(staging)


def record_changes(
    path: Path, settings: RunSettings, changes: dict[str, tuple[Any, Any]], checkpoint: Path | None
) -> None:
    """Rewrite config.yaml with the resumed run's settings, keeping earlier notes and adding one for this change."""
    notes = [line for line in path.read_text().splitlines() if line.startswith("#")]
    step = checkpoint.name.split("-")[1] if checkpoint else "0"
    changed = ", ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in changes.items())
    notes.append(f"# resumed at step {step} on {time.strftime('%Y-%m-%d %H:%M:%S')} with {changed}")
    write_atomic(path, "\n".join(notes) + "\n" + dump_yaml(settings.to_dict()))


def run_trainer_fields(settings: RunSettings) -> dict[str, Any]:
    """Trainer settings the run owns: logging every step and its own progress display."""
    fields: dict[str, Any] = {"logging_steps": 1, "disable_tqdm": True}
    fields.setdefault("report_to", settings.trainer.get("report_to", ["tensorboard"]))
    return {k: v for k, v in fields.items() if k not in settings.trainer or k == "report_to"}


@contextmanager
def environment_default(name: str, value: str) -> Iterator[None]:
    """Set environment variable `name` to `value` unless the user set it, for the duration of the block."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        del os.environ[name]


def quiet_transformers_printing(trainer) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def truncate_metrics(path: Path, checkpoint: Path) -> None:
    """On resume, keep only the records up to the checkpoint we continue from: the rest will be produced again. A
    torn last line (a write that was killed) is dropped too. Only the process holding the run folder's lock gets
    here, so no other process is appending to the file."""
    if not path.exists():
        return
    step = step_of(checkpoint)
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["step"] <= step:
            kept.append(line)
    write_atomic(path, "".join(line + "\n" for line in kept))


def summary_of(settings: RunSettings, monitor: RunMonitor, steps: int, precision: dict[str, Any]) -> dict[str, Any]:
    evaluations = monitor.evaluations
    accuracies = [e["accuracy"] for e in evaluations]
    peak = max(range(len(accuracies)), key=accuracies.__getitem__)
    summary = {
        "model": settings.model,
        "task": settings.task,
        "base_accuracy": accuracies[0],
        "final_accuracy": accuracies[-1],
        "peak_accuracy": accuracies[peak],
        "peak_step": evaluations[peak]["step"],
        "peak_train_seconds": evaluations[peak]["train_seconds"],
        "train_seconds": monitor.train_seconds,
        "steps": steps,
        "num_eval_examples": evaluations[-1].get("num_examples"),
        "machine": describe_machine(),  # seconds from different CPUs do not compare
        "precision": precision,  # fp32 or bf16, why, and the step seconds measured at start-up
    }
    if "accuracy_sampled" in evaluations[-1]:
        summary["base_accuracy_sampled"] = evaluations[0]["accuracy_sampled"]
        summary["final_accuracy_sampled"] = evaluations[-1]["accuracy_sampled"]
    return summary


def evaluate_held_out(model, tokenizer, eval_set, settings: RunSettings, args, display, **options: Any):
    """The run's held-out evaluation of `model` (`pods_rl.evaluation.evaluate` with the run's eval settings, its
    sampling temperature and seed); `options`: more of `evaluate`'s arguments."""
    from pods_rl.evaluation import evaluate

    return evaluate(
        model,
        tokenizer,
        eval_set,
        max_new_tokens=settings.eval.max_new_tokens or args.max_completion_length,
        batch_size=settings.eval.batch_size,
        num_samples=settings.eval.sampled_k,
        temperature=args.temperature,
        seed=settings.seed,
        progress=display.callback("evaluation", quiet_if_short=True),
        **options,
    )


def dump_yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
