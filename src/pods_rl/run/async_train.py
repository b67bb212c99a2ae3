"""`pods train --async`: the run of `pods_rl.run.train` with generation on a vLLM server beside the trainer.

The run starts a vLLM server (`pods_rl.run.vllm_server`; or uses `asynchronous.server_url`), builds
`PODSAsyncTrainer` against it, trains with the same evaluation, metrics, checkpoints, summary and report as a
synchronous run, and stops the server with the run, whatever ends it (the last step, SIGINT/SIGTERM after a checkpoint,
an error). What differs, and why (docs/async.md):

- The model goes to TRL by path (its asynchronous trainer loads it itself, and the server loads the same folder): a
  built-in model is built in the shape vLLM's CPU attention accepts, as for `--vllm`.
- On a CPU the policy reaches the server as LoRA adapters by path (TRL's own path; full weights go over NCCL, GPUs
  only), so the run needs `lora`; it trains in fp32, the server's dtype there.
- The worker reads the training set in its stored order and cycles it: the run shuffles it with the seed first.
- The reward functions travel to the worker's process, so each must pickle.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pods_rl.files import write_atomic
from pods_rl.precision import full_precision
from pods_rl.run import lifecycle
from pods_rl.run.display import Display
from pods_rl.run.folders import CONFIG_FILE, METRICS_FILE, SUMMARY_FILE, replace_output_dir
from pods_rl.run.logs import RunLogs
from pods_rl.run.settings import RunSettings, SettingsError, _device_defaults, accelerator_available
from pods_rl.run.step_costs import PRECISION_FILE

SERVER_LOG = "vllm_server.log"
SERVER_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}  # a CPU server beside the trainer


def async_config(settings: RunSettings, output_dir: Path, server_url: str, **run_fields: Any):
    """The run's PODSAsyncConfig: the `trainer` settings that TRL's asynchronous config has, the `asynchronous`
    ones; a `trainer` setting it lacks is refused in one line unless it is at PODSConfig's default."""
    from pods_rl.trainer import PODSConfig
    from pods_rl.trainer.async_trainer import PODSAsyncConfig

    accepted = {field.name for field in dataclasses.fields(PODSAsyncConfig)}
    defaults = {field.name: field.default for field in dataclasses.fields(PODSConfig)}
    for name, value in settings.trainer.items():
        if name not in accepted and value != defaults.get(name):
            raise SettingsError(
                f"trainer.{name}={value!r} cannot apply to asynchronous training (TRL's asynchronous GRPO has no "
                f"such setting): drop it or train without --async."
            )
    asynchronous = settings.asynchronous
    values = {
        "seed": settings.seed,
        **_device_defaults(),
        **{name: value for name, value in settings.trainer.items() if name in accepted},
        "output_dir": str(output_dir),
        "vllm_server_base_url": server_url,
        "max_staleness": asynchronous.max_staleness,
        "weight_sync_steps": asynchronous.weight_sync_steps,
        "max_inflight_tasks": asynchronous.max_inflight_tasks or -1,
        "token_budget": 0,  # a fixed count of rows per micro-batch, as the synchronous trainer's batches
        **run_fields,
    }
    if not accelerator_available():
        values["bf16"] = False  # the server's dtype on a CPU is fp32, and the importance weights compare the two
    try:
        return PODSAsyncConfig(**values)
    except (ValueError, TypeError) as error:
        raise SettingsError(f"Invalid trainer settings: {error}") from error


def check_picklable(reward_funcs: list[Any]) -> None:
    """TRL's rollout worker runs the reward functions in a spawned process: each must pickle."""
    for func in reward_funcs:
        try:
            pickle.dumps(func)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            name = getattr(func, "__name__", repr(func))
            raise SettingsError(
                f"reward function {name!r} cannot go to the rollout worker's process ({error}): asynchronous "
                "training needs reward functions defined at a module's top level."
            ) from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def plan_lines(settings: RunSettings, args, eval_examples: int, output_dir: Path, server: str) -> list[str]:
    """What the run will do, in words (the start banner and `--dry-run`)."""
    n, m = args.num_generations, args.selected
    rows = args.per_device_train_batch_size * args.gradient_accumulation_steps * int(os.environ.get("WORLD_SIZE", "1"))
    rule = "GRPO" if m == n else f"PODS ({args.selection_rule})"
    if args.dynamic_sampling:
        rule += f" with dynamic sampling (groups that do not vary dropped, up to {args.max_generation_rounds - 1} per "
        rule += "step's prompts per policy version)"
    every = settings.eval.every_steps
    schedule = f"every {every} steps" if every else "at the start and end"
    stop = f"{args.max_steps} steps" + (f" or {settings.time_budget:g} s of training" if settings.time_budget else "")
    return [
        f"run: {settings.model_label()} on {settings.task}, {rule}, asynchronous, seed {settings.seed} -> {output_dir}",
        f"per step: {rows} rows trained = {rows / m:g} groups of m={m} kept of n={n} generated, of up to "
        f"{args.max_completion_length} tokens; learning rate {args.learning_rate:g}",
        f"until: {stop}; evaluation: {eval_examples} held-out examples, greedy pass@1, {schedule}",
        f"generation: {server}, while the trainer updates; samples at most {args.max_staleness} updates old, "
        f"weights sent every {args.weight_sync_steps} step(s)",
    ]


def server_spec(settings: RunSettings, model_dir: str, max_model_len: int):
    """The vLLM server the run starts: this interpreter's vLLM, the run's model folder, LoRA slots for the adapters
    TRL keeps loaded (`max_staleness + 2`), fp32 and eager execution on a CPU."""
    from pods_rl.run.vllm_server import ServerSpec

    asynchronous = settings.asynchronous
    on_cpu = not accelerator_available()
    lora_rank = settings.lora.get("r", 8) if settings.lora else None
    extra = ["--enforce-eager"] if on_cpu else []
    return ServerSpec(
        model=model_dir,
        python=sys.executable,
        port=free_port(),
        max_model_len=max_model_len,
        lora_rank=lora_rank,
        max_loras=asynchronous.max_staleness + 2,
        dtype="float32" if on_cpu else "auto",
        extra_args=(*extra, *asynchronous.server_args),
    )


def longest_prompt(tokenizer, prompts: list[Any]) -> int:
    """The most tokens a prompt of the training set takes, with the chat template's generation prompt."""
    template = {"add_generation_prompt": True, "tokenize": True, "return_dict": True}
    return max(len(tokenizer.apply_chat_template(prompt, **template)["input_ids"]) for prompt in prompts)


@contextmanager
def terminate_raises() -> Iterator[None]:
    """For the block, SIGTERM raises SystemExit (status 143) instead of ending the process at once, so that the
    blocks around the run stop its server and worker. `RunMonitor.stopping_on_signals` inside turns the first SIGTERM
    into a stop after the step and leaves this handler for the second."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(number: int, frame: Any) -> None:
        raise SystemExit(128 + number)

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def train_async(
    settings: RunSettings,
    output_dir: Path,
    task,
    checkpoint: Path | None,
    replace: bool,
    changes: dict[str, tuple[Any, Any]],
    display: Display,
    logs: RunLogs,
    dry_run: bool,
) -> dict[str, Any]:
    """`pods_rl.run.train._train` for a run with `asynchronous` settings; arguments as there."""
    resume = checkpoint is not None
    given_url = settings.asynchronous.server_url
    check_picklable(task.reward_funcs)
    if not isinstance(task.train[0]["prompt"], list):
        raise SettingsError(f"task {settings.task!r}: asynchronous training needs chat prompts (lists of messages).")
    planned_url = given_url or "a vLLM server started for the run"
    fields = lifecycle.run_trainer_fields(settings)
    args = async_config(settings, output_dir, given_url or "http://127.0.0.1:0", **fields)
    logs.route_libraries()
    eval_set = (
        task.test
        if settings.eval.num_examples is None
        else task.test.select(range(min(settings.eval.num_examples, len(task.test))))
    )
    for line in plan_lines(settings, args, len(eval_set), output_dir, planned_url):
        display.print(line, highlight=False)
    if dry_run:
        return {}

    from pods_rl.models import model_path
    from pods_rl.trainer.async_trainer import with_response_template

    label = {"tiny": "warm start of tiny (once)", "smollm2-135m": "converting smollm2-135m (once)"}
    model_dir = model_path(
        settings.model,
        progress=display.callback(label.get(settings.model, settings.model)),
        vllm=True,
        options=settings.model_options,
    )
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer = with_response_template(tokenizer)
    train_set = task.train.shuffle(seed=settings.seed)  # TRL's worker reads it in order and cycles it
    precision = {"dtype": "bf16" if args.bf16 else "fp32", "reason": "asynchronous: the vLLM server's dtype"}
    if resume:
        lifecycle.remove_staging(output_dir)
        lifecycle.truncate_metrics(output_dir / METRICS_FILE, checkpoint)
        if changes:
            lifecycle.record_changes(output_dir / CONFIG_FILE, settings, changes, checkpoint)
    else:
        replace_output_dir(output_dir, replace=replace)
        write_atomic(output_dir / CONFIG_FILE, lifecycle.dump_yaml(settings.to_dict()))
        write_atomic(output_dir / PRECISION_FILE, json.dumps(precision, indent=2))
    logs.write_to(output_dir / lifecycle.LOG_FILE)
    if args.reward_weights is None:
        args.reward_weights = task.reward_weights

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # the rollout worker's process imports it again
    with terminate_raises():
        return _serve_and_train(settings, output_dir, args, task, tokenizer, model_dir, train_set, eval_set,
                                checkpoint, precision, display)  # fmt: skip


def _serve_and_train(
    settings: RunSettings,
    output_dir: Path,
    args,
    task,
    tokenizer,
    model_dir: str,
    train_set,
    eval_set,
    checkpoint: Path | None,
    precision: dict[str, Any],
    display: Display,
) -> dict[str, Any]:
    """Start the server (unless the run was given one), train against it, stop it; then the run's files."""
    from peft import LoraConfig

    from pods_rl.run.monitor import RunMonitor
    from pods_rl.run.report import write_report
    from pods_rl.run.vllm_server import ServerProcess
    from pods_rl.trainer.async_trainer import PODSAsyncTrainer, standard_attention

    server = None
    if settings.asynchronous.server_url is None:
        max_model_len = longest_prompt(tokenizer, train_set["prompt"]) + args.max_completion_length
        spec = server_spec(settings, model_dir, max_model_len)
        env = spec.env()
        if not accelerator_available():
            env = {**SERVER_ENV_DEFAULTS, **env}
        server = ServerProcess(spec.command(), env, spec.url, output_dir / SERVER_LOG)
        args.vllm_server_base_url = spec.url
        display.print(f"starting the vLLM server at {spec.url} (log: {output_dir / SERVER_LOG})", highlight=False)
    try:
        if server is not None:
            server.start()
            server.wait_ready()
        with lifecycle.environment_default("TENSORBOARD_LOGGING_DIR", str(output_dir / "tensorboard")):
            trainer = PODSAsyncTrainer(
                model=model_dir,
                reward_funcs=task.reward_funcs,
                args=args,
                train_dataset=train_set,
                processing_class=tokenizer,
                peft_config=LoraConfig(**settings.lora) if settings.lora else None,
                worker_log=output_dir / lifecycle.LOG_FILE,
            )

        def run_eval(eval_model) -> dict[str, float]:
            with full_precision(eval_model), standard_attention(eval_model):
                return lifecycle.evaluate_held_out(eval_model, tokenizer, eval_set, settings, args, display)

        monitor = RunMonitor(
            output_dir / METRICS_FILE,
            run_eval,
            settings.eval,
            time_budget=settings.time_budget,
            is_main=True,
            display=display,
        )
        if checkpoint is not None:
            state = json.loads((checkpoint / "trainer_state.json").read_text())["stateful_callbacks"]["RunMonitor"]
            monitor.restore(state)
        trainer.add_callback(monitor)
        lifecycle.quiet_transformers_printing(trainer)
        try:
            with monitor.stopping_on_signals():
                trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
        finally:
            monitor.close()
    finally:
        if server is not None:
            server.stop()
    if monitor.stop_signal is not None:
        display.print(
            f"[bold yellow]stopped by {signal.Signals(monitor.stop_signal).name}[/] at step "
            f"{trainer.state.global_step} (checkpoint saved): continue with `pods train --resume {output_dir}`"
        )
        raise lifecycle.RunInterrupted(monitor.stop_signal)
    trainer.save_model(str(output_dir / "final"))
    summary = lifecycle.summary_of(settings, monitor, trainer.state.global_step, precision)
    write_atomic(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    write_report(output_dir, settings, summary, monitor.evaluations)
    return summary
