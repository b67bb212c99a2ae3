"""`pods train`: a PODS run with evaluation, checkpoints, metrics, a summary and a report.

Under failure (see docs/reliability.md): checkpoints are complete or absent, `--resume` continues from the newest
intact one (`pods_rl.run.checkpoints`), one process at a time trains a run folder (`pods_rl.run.lock`),
SIGINT/SIGTERM stop after the current step with a checkpoint (exit status 128 + signal number), and a failing reward
function stops the run with a checkpoint of the last completed step.

torch, TRL (and with it vLLM) are imported only inside `train`, once the run's logging is set up (`RunLogs`), so that
what they log while being imported goes to train.log, not the console.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from rich.console import Console

from pods_rl.defaults import CPU_SIZED_NOTE, SMOLLM2_CPU_NOTE, preset_for, preset_generation
from pods_rl.files import write_atomic
from pods_rl.precision import full_precision
from pods_rl.run.checkpoints import resume_point
from pods_rl.run.display import Display
from pods_rl.run.folders import (
    CONFIG_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    check_model_name,
    check_output_dir,
    replace_output_dir,
)
from pods_rl.run.lifecycle import (
    LOG_FILE,
    RunInterrupted,
    dump_yaml,
    environment_default,
    evaluate_held_out,
    quiet_transformers_printing,
    record_changes,
    remove_staging,
    run_trainer_fields,
    summary_of,
    truncate_metrics,
)
from pods_rl.run.lock import FolderLock
from pods_rl.run.logs import RunLogs
from pods_rl.run.settings import RunSettings, SettingsError, accelerator_available
from pods_rl.run.step_costs import PRECISION_FILE, RunPrecision, read_recorded

DATA_FILES_USAGE = "--set task_options.data_files='{train: train.jsonl, test: test.jsonl}'"


def load_run_task(settings: RunSettings):
    """The run's task; an unreachable hub becomes one line saying how to use local files instead."""
    from pods_rl.tasks import load_task

    try:
        return load_task(settings.task, **settings.task_options)
    except (ConnectionError, OSError) as error:
        if "data_files" in settings.task_options:
            raise SettingsError(f"Task {settings.task!r}: cannot read its data_files: {_first_line(error)}") from None
        raise SettingsError(
            f"Task {settings.task!r} could not load its data from the Hugging Face hub ({_first_line(error)}). "
            f"Offline? Use local files in the same schema: {DATA_FILES_USAGE}."
        ) from None


def load_run_model(name: str, display: Display, *, vllm: bool = False, options: dict | None = None):
    """The run's model and tokenizer; a built-in model's first build reports to `display`.

    `vllm`: the run generates with vLLM (a built-in model is then built in the shape its CPU attention accepts).
    `options`: the run's `model_options` (the tiny model's warm start).
    On a CPU the weights are fp32 whatever the checkpoint's dtype (a hub model's may be bf16): bf16, where chosen, is
    autocast over them (`pods_rl.precision`), as TRL loads a model it is given by name."""
    import torch

    from pods_rl.models import load_model

    label = {"tiny": "warm start of tiny (once)", "smollm2-135m": "converting smollm2-135m (once)"}.get(name, name)
    dtype = {} if accelerator_available() else {"dtype": torch.float32}
    try:
        return load_model(name, progress=display.callback(label), vllm=vllm, options=options, **dtype)
    except OSError as error:
        raise SettingsError(
            f"Model {name!r} could not be loaded: {_first_line(error)} (offline? use a local folder or a "
            "built-in model, see `pods models`)."
        ) from None


def load_settled_model(
    settings: RunSettings,
    startup: RunPrecision,
    args,
    task,
    display: Display,
    logs: RunLogs,
    output_dir: Path,
    fields: dict[str, Any],
):
    """The run's model and tokenizer, with its precision settled at start-up (measured, cached or given): returns
    (model, tokenizer, the trainer config in that precision, the precision). `fields`: the trainer settings the
    caller owns (`settings.trainer_config`'s overrides)."""
    model, tokenizer = load_run_model(settings.model, display, vllm=args.use_vllm, options=settings.model_options)
    logs.route_libraries()
    precision = startup.settle(
        model,
        tokenizer,
        task.train,
        lambda line: display.print(line, highlight=False),
        progress=display.callback("measuring", quiet_if_short=True),
    )
    if precision.bf16 != args.bf16:
        args = settings.trainer_config(output_dir, **fields, bf16=precision.bf16)
    return model, tokenizer, args, precision


def plan_lines(settings: RunSettings, args, eval_examples: int, output_dir: Path) -> list[str]:
    """What the run will do, in words: the start banner and `pods train --dry-run`."""
    from pods_rl.trainer.vllm import evaluates_on_engine

    processes = int(os.environ.get("WORLD_SIZE", "1"))
    n, m = args.num_generations, args.num_selected
    rows = args.per_device_train_batch_size * args.gradient_accumulation_steps * processes
    prompts = rows / m
    rule = "GRPO" if m == n else f"PODS ({args.selection_rule})"
    if args.dynamic_sampling:
        rule += f" with dynamic sampling (up to {args.max_generation_rounds} generation rounds of these per step)"
    if args.rollout_allocation == "screen":
        rule += (
            f" with screening ({args.screen_size} rollouts per candidate, up to {args.max_generation_rounds} rounds; "
            f"those that pass extended to n={n})"
        )
    elif args.rollout_allocation == "history":
        largest = args.max_rollouts_per_prompt or n
        rule += f" with rollouts per prompt from each prompt's pass-rate history ({m}..{largest} each)"
    stop = f"{args.max_steps} steps" + (f" or {settings.time_budget:g} s of training" if settings.time_budget else "")
    every = settings.eval.every_seconds
    schedule = (
        f"every {every:g} s of training"
        if every
        else (f"every {settings.eval.every_steps} steps" if settings.eval.every_steps else "at the start and end")
    )
    sampled = f", sampled pass@1 over {settings.eval.sampled_k} samples" if settings.eval.sampled_k else ""
    lines = [
        f"run: {settings.model_label()} on {settings.task}, {rule}, seed {settings.seed} -> {output_dir}",
        f"per step: {prompts:g} prompts x n={n} = {prompts * n:g} rollouts of up to {args.max_completion_length} "
        f"tokens generated, m={m} per prompt = {rows} rows trained; learning rate {args.learning_rate:g}",
        f"until: {stop}; evaluation: {eval_examples} held-out examples, greedy pass@1{sampled}, {schedule}",
        f"generation: {_generation(settings, args.use_vllm, args.vllm_mode)}; evaluation: "
        f"{'on the same vLLM engine' if evaluates_on_engine(args) else 'HF generate'}",
    ]
    preset = preset_for(settings.model, settings.task)
    if preset in ("smollm2-135m", "cpu"):  # the machine chose them: say so
        note = SMOLLM2_CPU_NOTE if preset == "smollm2-135m" else CPU_SIZED_NOTE
        lines.insert(1, f"defaults: {note.format(model=settings.model, task=settings.task)}")
    return lines


def _generation(settings: RunSettings, use_vllm: bool, vllm_mode: str) -> str:
    """The generation backend, and why when the machine chose it (the CPU preset's rule) rather than the user."""
    backend = f"vLLM ({vllm_mode})" if use_vllm else "HF generate"
    chosen = preset_generation(settings.model, settings.task)
    return f"{backend} ({chosen[1]})" if chosen is not None and chosen[0] == use_vllm else backend


def train(
    settings: RunSettings,
    output_dir: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    changes: dict[str, tuple[Any, Any]] | None = None,
    console: Console | None = None,
    verbose: bool = False,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run (or resume) training; returns the summary also written to `summary.json` (empty for a dry run).

    Every check that can run before training does, before the output folder is touched: the settings, the task and
    its data, the model. Only then is a previous run in `output_dir` replaced (`overwrite`). `changes` are the
    settings a resume changed ({key: (old, new)}), recorded in config.yaml.
    """
    is_main = int(os.environ.get("RANK", "0")) == 0
    display = Display(console if is_main else Console(quiet=True))
    logs = RunLogs(verbose=verbose)
    # The main process holds the folder for the run; the others of a launch follow it and never look at the lock.
    lock = FolderLock(Path(output_dir)) if is_main else None
    try:
        return _train(settings, Path(output_dir), resume, overwrite, changes or {}, display, logs, dry_run, lock)
    finally:
        if lock is not None:
            lock.release()
        display.close()
        logs.close()


def _train(
    settings: RunSettings,
    output_dir: Path,
    resume: bool,
    overwrite: bool,
    changes: dict[str, tuple[Any, Any]],
    display: Display,
    logs: RunLogs,
    dry_run: bool,
    lock: FolderLock | None,
) -> dict[str, Any]:
    check_model_name(settings.model)
    replace = False if resume else check_output_dir(output_dir, overwrite=overwrite)
    if lock is not None:
        _hold_folder(lock, "--resume" if resume else "--output-dir", dry_run, display)
    checkpoint = None
    if resume:  # before anything loads: no checkpoint, or none intact, is one line
        model_only, asynchronous = bool(settings.trainer.get("save_only_model")), settings.asynchronous is not None
        checkpoint, damaged = resume_point(output_dir, model_only=model_only, asynchronous=asynchronous)
        if damaged is not None:
            display.print(f"[bold yellow]warning:[/] {damaged}", highlight=False, soft_wrap=True)
    task = load_run_task(settings)  # before TRL is imported: an unreachable hub is reported sooner
    if settings.asynchronous is not None:
        from pods_rl.run.async_train import train_async

        return train_async(settings, output_dir, task, checkpoint, replace, changes, display, logs, dry_run)
    args = settings.trainer_config(output_dir, **run_trainer_fields(settings))
    logs.route_libraries()
    eval_set = (
        task.test
        if settings.eval.num_examples is None
        else task.test.select(range(min(settings.eval.num_examples, len(task.test))))
    )
    recorded = read_recorded(output_dir) if resume else None
    startup = RunPrecision(settings, args, resume=resume, recorded=recorded)
    for line in [*plan_lines(settings, args, len(eval_set), output_dir), *startup.plan_lines()]:
        display.print(line, highlight=False)
    if dry_run:
        return {}

    from peft import LoraConfig

    from pods_rl.run.monitor import RunMonitor
    from pods_rl.run.report import write_report
    from pods_rl.trainer import PODSTrainer
    from pods_rl.trainer.trainer import RewardError
    from pods_rl.trainer.vllm import evaluation_engine

    model, tokenizer, args, _ = load_settled_model(
        settings, startup, args, task, display, logs, output_dir, run_trainer_fields(settings)
    )
    # Every check passed: only now is the output folder touched, by the main process alone while the others wait
    # (two processes replacing the folder or renaming the same temporary file into place would race).
    with args.main_process_first(local=False, desc="preparing the output folder"):
        if args.process_index == 0 and resume:
            remove_staging(output_dir)
            truncate_metrics(output_dir / METRICS_FILE, checkpoint)
            if changes:
                record_changes(output_dir / CONFIG_FILE, settings, changes, checkpoint)
        elif args.process_index == 0:
            replace_output_dir(output_dir, replace=replace)
            write_atomic(output_dir / CONFIG_FILE, dump_yaml(settings.to_dict()))
            write_atomic(output_dir / PRECISION_FILE, json.dumps(startup.summary(), indent=2))
    rank = int(os.environ.get("RANK", "0"))
    logs.write_to(output_dir / (LOG_FILE if rank == 0 else f"train-rank{rank}.log"))
    if args.reward_weights is None:
        args.reward_weights = task.reward_weights

    def run_eval(eval_model) -> dict[str, float]:
        with full_precision(eval_model):  # fp32 whatever the training's precision: accuracies compare across them
            return evaluate_held_out(
                eval_model,
                tokenizer,
                eval_set,
                settings,
                args,
                display,
                sharded=True,  # every process evaluates its share; the monitor calls this on all of them
                engine=evaluation_engine(trainer),  # a run that generates with vLLM evaluates on its engine
            )

    # transformers' TensorBoard callback reads its folder from the environment when the trainer is built; set it
    # only for that moment, so that the next run in this process (`pods compare`) logs into its own folder. A vLLM
    # engine starts in there too, and its native code writes to stderr: into train.log with it.
    with environment_default("TENSORBOARD_LOGGING_DIR", str(output_dir / "tensorboard")), logs.native_output():
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
        display=display,
    )
    if checkpoint is not None:
        state = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["RunMonitor"]
        monitor.restore(state)
    trainer.add_callback(monitor)
    quiet_transformers_printing(trainer)
    try:
        with monitor.stopping_on_signals():
            trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    except RewardError:
        _save_last_completed_step(trainer, output_dir, display)
        raise
    finally:
        monitor.close()
    if monitor.stop_signal is not None:
        display.print(
            f"[bold yellow]stopped by {signal.Signals(monitor.stop_signal).name}[/] at step "
            f"{trainer.state.global_step} (checkpoint saved): continue with `pods train --resume {output_dir}`"
        )
        raise RunInterrupted(monitor.stop_signal)

    if trainer.is_fsdp_enabled:  # with FSDP's sharded state dict (the checkpoints'), save_model writes nothing
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(output_dir / "final"))  # every process: sharded (ZeRO-3, FSDP) models gather here
    summary: dict[str, Any] = {}
    if trainer.accelerator.is_main_process:
        summary = summary_of(settings, monitor, trainer.state.global_step, startup.summary())
        write_atomic(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
        write_report(output_dir, settings, summary, monitor.evaluations)
    trainer.accelerator.wait_for_everyone()
    return summary


def _hold_folder(lock: FolderLock, option: str, dry_run: bool, display: Display) -> None:
    """Take the run folder's lock before anything loads: a folder another live process trains is refused in one line
    (SettingsError), a stale lock (its process gone) is taken over with a warning. A dry run only looks."""
    if dry_run:
        lock.check(option)
        return
    stale = lock.acquire(option)
    if stale is not None:
        display.print(f"[bold yellow]warning:[/] {lock.stale_message(stale)}", highlight=False, soft_wrap=True)


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].rstrip(".")


def _save_last_completed_step(trainer, output_dir: Path, display: Display) -> None:
    """After a reward failure mid-step, checkpoint the last completed step (the update of the failed one never ran),
    at the data position and random states the failed step began with. Every process raised the RewardError
    together, so all of them join the save."""
    step = trainer.state.global_step
    if step == 0 or (output_dir / f"checkpoint-{step}").exists():
        return
    trainer.save_checkpoint_of_failed_step()
    display.print(f"[bold red]reward function failed[/] during step {step + 1}: saved checkpoint-{step}")
