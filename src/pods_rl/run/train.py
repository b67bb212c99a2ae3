"""`pods train`: a PODS run with evaluation, checkpoints, metrics, a summary and a report.

Under failure (see docs/reliability.md): checkpoints are complete or absent, `--resume` continues from the newest
complete one, SIGINT/SIGTERM stop after the current step with a checkpoint (exit status 128 + signal number), and a
failing reward function stops the run with a checkpoint of the last completed step.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from pods_rl.models import BUILTIN_MODELS
from pods_rl.run.monitor import RunMonitor
from pods_rl.run.report import write_report
from pods_rl.run.settings import RunSettings, read_yaml
from pods_rl.trainer.trainer import STAGING_PREFIX, RewardError

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


class RunInterrupted(SystemExit):
    """SIGINT/SIGTERM stopped the run after saving a checkpoint; exits with the shell's 128 + signal number."""

    def __init__(self, signal_number: int):
        super().__init__(128 + signal_number)
        self.signal_number = signal_number


def default_output_dir(settings: RunSettings) -> Path:
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{settings.task}-{Path(settings.model).name}".replace(":", "_")
    return Path("runs") / name


def check_model_name(name: str) -> None:
    if name in BUILTIN_MODELS or Path(name).exists() or HUB_ID.match(name):
        return
    raise ValueError(
        f"Unknown model {name!r}: use a built-in model {sorted(BUILTIN_MODELS)}, a local folder, or a Hugging Face "
        "hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'."
    )


def prepare_output_dir(output_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Refuse to mix two runs in one folder unless told to resume or overwrite."""
    if resume:
        if not (output_dir / CONFIG_FILE).exists():
            raise ValueError(f"--resume {output_dir}: no run there ({CONFIG_FILE} is missing).")
        return
    if output_dir.exists() and any(output_dir.iterdir()):
        if not overwrite:
            raise ValueError(
                f"Output directory {output_dir} already holds files: pass --resume to continue that run or "
                "--overwrite to replace it."
            )
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint: renamed into place once fully written, so holding its trainer_state.json.

    Staging folders (`.tmp-checkpoint-N`, left by a save that was killed) never match.
    """
    steps = [
        (int(p.name.split("-")[1]), p)
        for p in output_dir.glob("checkpoint-*")
        if p.name.split("-")[1].isdigit() and (p / "trainer_state.json").is_file()
    ]
    return max(steps)[1] if steps else None


def remove_staging(output_dir: Path) -> None:
    """Delete checkpoints that were being written when a run was killed."""
    for staging in output_dir.glob(f"{STAGING_PREFIX}checkpoint-*"):
        shutil.rmtree(staging)


def load_settings_of(output_dir: Path) -> RunSettings:
    """The settings a run in `output_dir` was started with (what `--resume` continues with)."""
    path = Path(output_dir) / CONFIG_FILE
    if not path.is_file():
        raise ValueError(f"--resume {output_dir}: no run there ({CONFIG_FILE} is missing).")
    return RunSettings.from_dict(read_yaml(path), where=str(path))


def train(
    settings: RunSettings,
    output_dir: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    """Run (or resume) training; returns the summary also written to `summary.json`."""
    console = console or Console(stderr=True)
    output_dir = Path(output_dir)
    # Everything that can be checked without loading a model is checked first.
    args = settings.trainer_config(output_dir, **_run_trainer_fields(settings))
    check_model_name(settings.model)
    prepare_output_dir(output_dir, resume=resume, overwrite=overwrite)
    checkpoint = last_checkpoint(output_dir) if resume else None
    from pods_rl.tasks import load_task

    task = load_task(settings.task, **settings.task_options)
    if resume:
        remove_staging(output_dir)
        _truncate_metrics(output_dir / METRICS_FILE, checkpoint)
    else:
        _write_atomic(output_dir / CONFIG_FILE, _dump_yaml(settings.to_dict()))

    from peft import LoraConfig

    from pods_rl.evaluation import evaluate
    from pods_rl.models import load_model
    from pods_rl.trainer import PODSTrainer

    model, tokenizer = load_model(settings.model, vllm=args.use_vllm)
    if args.reward_weights is None:
        args.reward_weights = task.reward_weights
    eval_set = (
        task.test
        if settings.eval.num_examples is None
        else task.test.select(range(min(settings.eval.num_examples, len(task.test))))
    )
    max_new_tokens = settings.eval.max_new_tokens or args.max_completion_length

    def run_eval(eval_model) -> dict[str, float]:
        return evaluate(
            eval_model,
            tokenizer,
            eval_set,
            max_new_tokens=max_new_tokens,
            batch_size=settings.eval.batch_size,
            num_samples=settings.eval.sampled_k,
            temperature=args.temperature,
            seed=settings.seed,
        )

    # transformers' TensorBoard callback reads its folder from the environment when the trainer is built; set it
    # only for that moment, so that the next run in this process (`pods compare`) logs into its own folder.
    with _environment_default("TENSORBOARD_LOGGING_DIR", str(output_dir / "tensorboard")):
        trainer = PODSTrainer(
            model=model,
            reward_funcs=task.reward_funcs,
            args=args,
            train_dataset=task.train,
            processing_class=tokenizer,
            peft_config=LoraConfig(**settings.lora) if settings.lora else None,
        )
    monitor = RunMonitor(
        output_dir / METRICS_FILE,
        run_eval,
        settings.eval,
        time_budget=settings.time_budget,
        is_main=trainer.accelerator.is_main_process,
        console=console,
    )
    if checkpoint is not None:
        state = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["RunMonitor"]
        monitor.restore(state)
    trainer.add_callback(monitor)
    _quiet_transformers_printing(trainer)
    try:
        with monitor.stopping_on_signals():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except RewardError:
        _save_last_completed_step(trainer, output_dir, console)
        raise
    finally:
        monitor.close()
    if monitor.stop_signal is not None:
        console.print(
            f"[bold yellow]stopped by {signal.Signals(monitor.stop_signal).name}[/] at step "
            f"{trainer.state.global_step} (checkpoint saved): continue with `pods train --resume {output_dir}`"
        )
        raise RunInterrupted(monitor.stop_signal)

    trainer.save_model(str(output_dir / "final"))  # every process: sharded (ZeRO-3, FSDP) models gather here
    summary: dict[str, Any] = {}
    if trainer.accelerator.is_main_process:
        summary = _summary(settings, monitor, trainer.state.global_step)
        _write_atomic(output_dir / "summary.json", json.dumps(summary, indent=2))
        write_report(output_dir, settings, summary, monitor.evaluations)
    trainer.accelerator.wait_for_everyone()
    return summary


def _run_trainer_fields(settings: RunSettings) -> dict[str, Any]:
    """Trainer settings the run owns: logging every step and its own progress display."""
    fields: dict[str, Any] = {"logging_steps": 1, "disable_tqdm": True}
    fields.setdefault("report_to", settings.trainer.get("report_to", ["tensorboard"]))
    return {k: v for k, v in fields.items() if k not in settings.trainer or k == "report_to"}


@contextmanager
def _environment_default(name: str, value: str) -> Iterator[None]:
    """Set environment variable `name` to `value` unless the user set it, for the duration of the block."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        del os.environ[name]


def _quiet_transformers_printing(trainer) -> None:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def _save_last_completed_step(trainer, output_dir: Path, console: Console) -> None:
    """After a reward failure mid-step, checkpoint the last completed step (the update of the failed one never ran).

    Single-process runs only: in a multi-process run the other processes cannot join the save.
    """
    step = trainer.state.global_step
    if step == 0 or trainer.accelerator.num_processes > 1 or (output_dir / f"checkpoint-{step}").exists():
        return
    trainer._save_checkpoint(trainer.model_wrapped, trial=None)
    console.print(f"[bold red]reward function failed[/] during step {step + 1}: saved checkpoint-{step}")


def _truncate_metrics(path: Path, checkpoint: Path | None) -> None:
    """On resume, keep only the records up to the checkpoint we continue from: the rest will be produced again.

    Without a checkpoint the run starts over, so nothing is kept. A torn last line (a write that was killed) is
    dropped too.
    """
    if not path.exists():
        return
    step = int(checkpoint.name.split("-")[1]) if checkpoint else -1
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["step"] <= step:
            kept.append(line)
    _write_atomic(path, "".join(line + "\n" for line in kept))


def _write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file and rename it over `path`: a kill leaves the old file or the new, never half."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    temporary.replace(path)


def _summary(settings: RunSettings, monitor: RunMonitor, steps: int) -> dict[str, Any]:
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
    }
    if "accuracy_sampled" in evaluations[-1]:
        summary["base_accuracy_sampled"] = evaluations[0]["accuracy_sampled"]
        summary["final_accuracy_sampled"] = evaluations[-1]["accuracy_sampled"]
    return summary


def _dump_yaml(data: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(data, sort_keys=False)
