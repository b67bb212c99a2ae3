"""`pods advise`: generate rollouts of the base model on a run's first training prompts, count the passes, and forecast
what each method would learn per step and per second (`pods_rl.advice.forecast`), on this machine or another's step
costs. Writes advice.json and prints a table and a paragraph (`pods_rl.advice.report`).

What runs is what `pods train` would run with the same options: the settings resolved as it resolves them (presets
per model and task, a YAML file, `--set`), the task with its reward functions and weights, the model loaded as the run
loads it, the precision its start-up measurement chooses on a CPU, and the run's own PODSTrainer generating and
scoring: HF `generate` at the training temperature with TRL's top_p, top_k, min_p and repetition penalty (under one
bf16 autocast where the run trains in bf16), or the run's vLLM engine where the settings say so.

The prompts: the first P that the run's sampler would train on for its seed (the shuffled order of the train split),
each generated K times. A rollout passes when its weighted reward reaches `success_threshold` (0.5 by default; read
from `--set trainer.success_threshold=...`, which `pods train` accepts with a rollout allocation mode). The defaults,
P = 32 and K = max(n, 16): the forecast needs K >= n (an unbiased estimate of a pool of n needs n rollouts of the
prompt), and at least 16 so that a prompt's pass rate is read to 1/16 where n is small; the history's second epoch is
exact from K = 2n (`--samples`). Its error is mostly which prompts were drawn: 32 prompts put a share's standard error
at 0.09 at most, and the bootstrap intervals over prompts say how much the ranking rests on them. The cost: 512
rollouts, seconds on the tiny model; on SmolLM2 with a CPU preset (completions up to 64 tokens, HF `generate` took
0.57 s a rollout in batches of 16 on a 2-core Xeon, less in the batches of 48-64 used here), a few minutes.

Step costs: `--cost-model` (a StepCost entry in a YAML or JSON file, as `benchmarks/gpu_check.py` prints it, or the
name of one of `REFERENCE_COSTS`), else this machine's, measured as `pods train` measures a step at start-up
(`pods_rl.run.step_costs.RunPrecision`, cached with the run's): a generated rollout's seconds at full completion
length (HF `generate`), a trained row's forward and backward, no fixed cost per step (that measurement leaves out
scoring, selection and the optimizer step). With vLLM the start-up measurement times only the update, so a generated
rollout's cost is the seconds of this command's own vLLM generation per rollout. On an accelerator the trainer measures
nothing at start-up: without `--cost-model` the forecast is per step only.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from pods_rl.compare.cost_model import REFERENCE_COSTS, StepCost
from pods_rl.config_rules import PODS_DEFAULTS, TRL_DEFAULTS
from pods_rl.defaults import default_run_settings
from pods_rl.run.folders import check_model_name, check_output_dir, default_output_dir
from pods_rl.run.settings import RunSettings, SettingsError, load_yaml, resolve

ADVICE_FILE = "advice.json"
DEFAULT_PROMPTS = 32
MIN_SAMPLES = 16
SCORE_DECIMALS = 6  # rewards this close count as one value (dynamic sampling's tolerance is 1e-6)


@dataclass(frozen=True)
class AdvicePlan:
    """What `pods advise` will do: the run's settings, P prompts, K rollouts each, the folder, and the step cost given
    (None: measure this machine's)."""

    settings: RunSettings
    prompts: int
    samples: int
    output_dir: Path
    cost: StepCost | None

    @property
    def n(self) -> int:
        return self.settings.trainer["num_generations"]

    @property
    def m(self) -> int:
        return self.settings.trainer.get("num_selected") or self.n

    @property
    def success_threshold(self) -> float:
        return self.settings.trainer.get("success_threshold", PODS_DEFAULTS["success_threshold"])

    def setup(self):
        """The forecast's `Setup`: n, m, prompts per step (one process's rows per optimizer step over m) and the
        trainer's dynamic-sampling, screening and history settings (those of the run's own mode where it sets them)."""
        from pods_rl.advice.forecast import Setup

        trainer = {**TRL_DEFAULTS, **PODS_DEFAULTS, **self.settings.trainer}
        rows = trainer["per_device_train_batch_size"] * trainer["gradient_accumulation_steps"]
        band = trainer["screen_pass_rate_band"]
        return Setup(
            n=self.n,
            m=self.m,
            prompts_per_step=max(1, rows // self.m),
            max_generation_rounds=trainer["max_generation_rounds"],
            screen_size=trainer["screen_size"],
            screen_pass_rate_band=None if band is None else tuple(band),
            history_exploration=trainer["history_exploration"],
            history_prior=(trainer["history_prior_successes"], trainer["history_prior_failures"]),
            generation_budget=trainer["generation_budget"],
            iterations=trainer["num_iterations"],
        )


def plan_advice(
    config: Path | None,
    overrides: list[dict[str, Any]],
    *,
    prompts: int | None,
    samples: int | None,
    output_dir: Path | None,
    cost_model: str | None,
) -> AdvicePlan:
    """Check everything that can be checked before anything heavy loads; raises ValueError with one line.

    The settings resolve as `pods train` resolves them (the user's own first, then the model's name, then the
    presets), so whatever `pods train` refuses, this refuses too; then what the forecast needs: m < n, K >= n, a
    success threshold, a step cost that reads."""

    def defaults(model: str, task: str) -> dict[str, Any]:
        check_model_name(model)  # first: the defaults of a model off the presets ask torch about a GPU
        return default_run_settings(model, task)

    settings = resolve(defaults, config, overrides)
    check_model_name(settings.model)
    n = settings.trainer["num_generations"]
    m = settings.trainer.get("num_selected") or n
    if m >= n:
        raise SettingsError(
            f"pods advise compares training on m of n rollouts with GRPO m/m: give m < n (-m, -n), got n={n}, m={m}."
        )
    prompts = DEFAULT_PROMPTS if prompts is None else prompts
    if prompts < 1:
        raise SettingsError(f"--prompts must be at least 1, got {prompts}.")
    samples = max(n, MIN_SAMPLES) if samples is None else samples
    if samples < n:
        raise SettingsError(
            f"--samples ({samples}) must be at least n = {n}: the forecast estimates what a pool of n rollouts of a "
            f"prompt holds from that many of its rollouts without bias (--samples {n} or more)."
        )
    threshold = settings.trainer.get("success_threshold", PODS_DEFAULTS["success_threshold"])
    if threshold is None:
        raise SettingsError(
            "pods advise counts passes: trainer.success_threshold must be a number (null reads rewards as fractional "
            "successes, which a pass count cannot hold)."
        )
    cost = None if cost_model is None else read_cost_model(cost_model)
    folder = output_dir or Path(f"{default_output_dir(settings)}-advise")
    check_output_dir(folder, overwrite=True, marker=ADVICE_FILE, what="forecast")  # refuses a folder of other files
    return AdvicePlan(settings, prompts, samples, Path(folder), cost)


def read_cost_model(source: str) -> StepCost:
    """A step cost from a file (YAML or JSON: one StepCost entry, a list of one, or `cost_models: [...]` as
    `benchmarks/gpu_check.py` prints it), or one of `REFERENCE_COSTS` by name."""
    by_name = {cost.name: cost for cost in REFERENCE_COSTS}
    path = Path(source)
    if not path.is_file():
        if source in by_name:
            return by_name[source]
        names = ", ".join(repr(name) for name in by_name)
        raise SettingsError(f"--cost-model {source}: no such file, nor a built-in step cost ({names}).")
    try:
        data = load_yaml(path.read_text())
    except Exception as error:  # YAML's many parse errors, and an unreadable file
        raise SettingsError(f"--cost-model {source} does not read as YAML or JSON: {_first_line(error)}") from None
    if isinstance(data, dict) and "cost_models" in data and len(data) == 1:
        data = data["cost_models"]
    entries = data if isinstance(data, list) else [data]
    if len(entries) != 1:
        raise SettingsError(f"--cost-model {source} holds {len(entries)} step costs: keep the one to use.")
    return StepCost.check_all(entries, f"--cost-model {source}")[0]


def run_advice(plan: AdvicePlan, *, console: Console, verbose: bool = False) -> dict[str, Any]:
    """Sample, forecast, print and write advice.json; returns its record."""
    from pods_rl.run.display import Display
    from pods_rl.run.logs import RunLogs

    display, logs = Display(console), RunLogs(verbose=verbose)  # before the heavy imports: they log too
    try:
        return _run(plan, display, logs)
    finally:
        display.close()
        logs.close()


def _run(plan: AdvicePlan, display, logs) -> dict[str, Any]:
    from pods_rl.advice import report
    from pods_rl.advice.forecast import bootstrap, forecast, graded_share
    from pods_rl.machine import describe_machine, machine_label
    from pods_rl.run.train import load_run_task

    settings, setup = plan.settings, plan.setup()
    task = load_run_task(settings)
    args = settings.trainer_config(plan.output_dir, **_trainer_fields())
    logs.route_libraries()
    rows = first_prompts(task.train, args, plan.prompts)
    display.print(describe(plan, len(rows), setup, args), highlight=False)
    trainer, precision, measured = _trainer(plan, task, args, display, logs)
    sampled = sample_passes(trainer, rows, plan.samples, plan.success_threshold, _call_rows(plan, args), display)
    cost = plan.cost or _measured_cost(measured, sampled, setup, precision)
    successes, samples = sampled["successes"], [plan.samples] * len(rows)
    forecasts = forecast(successes, samples, setup, cost)
    intervals = bootstrap(successes, samples, setup, cost, seed=settings.seed)
    graded = {
        size: graded_share(sampled["value_counts"], successes, samples, size)
        for size in dict.fromkeys((plan.m, plan.n))
    }
    machine = describe_machine()
    where = "On this machine" if plan.cost is None else f"With the step cost of {plan.cost.name}"
    if cost is None:
        where = "Per step (no step cost: --cost-model gives one)"
    advice = report.paragraph(forecasts, cost, intervals, where)
    names, weights = list(trainer.reward_func_names), trainer.reward_weights.tolist()  # what the trainer scores with
    passes = report.pass_sentence(plan.success_threshold, names, weights, graded)
    record = {
        "model": settings.model,
        "task": settings.task,
        "task_options": settings.task_options,
        "model_options": settings.model_options,
        "seed": settings.seed,
        "setup": {
            "n": setup.n,
            "m": setup.m,
            "prompts_per_step": setup.prompts_per_step,
            "max_generation_rounds": setup.max_generation_rounds,
            "screen_size": setup.screen,
            "screen_pass_rate_band": setup.screen_pass_rate_band,
            "history_exploration": setup.history_exploration,
            "history_prior": list(setup.history_prior),
            "generation_budget": setup.budget,
            "iterations": setup.iterations,
            "temperature": args.temperature,
            "max_completion_length": args.max_completion_length,
            "generation": "vLLM" if args.use_vllm else "HF generate",
            "precision": precision,
        },
        "pass": {
            "success_threshold": plan.success_threshold,
            "reward_functions": names,
            "reward_weights": weights,
            "graded_share": {str(size): share for size, share in graded.items()},
            "meaning": passes,
        },
        "sample": {
            "prompts": len(rows),
            "samples_per_prompt": plan.samples,
            "which": "the first prompts the run's sampler trains on for its seed (the shuffled train split)",
            "questions": [_question(row["prompt"]) for row in rows],
            "successes": successes,
            "pass_rates": [s / plan.samples for s in successes],
            "mean_pass_rate": sum(successes) / (plan.samples * len(rows)),
            "never_passed": sum(s == 0 for s in successes),
            "always_passed": sum(s == plan.samples for s in successes),
            "unscorable_rollouts": sampled["unscorable"],
            "mean_completion_tokens": sampled["tokens"] / (plan.samples * len(rows)),
            "seconds": sampled["seconds"],
        },
        "cost": report.cost_record(cost),
        "signal": report.SIGNAL_DEFINITION,
        "methods": report.method_records(forecasts, intervals),
        "ranking": [f.name for f in report.ranking(forecasts)],
        "advice": advice,
        "machine": machine,
    }
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    (plan.output_dir / ADVICE_FILE).write_text(json.dumps(record, indent=2))
    display.print(report.console_table(forecasts, intervals))
    if not all(f.exact for f in forecasts):
        display.print(
            f"* the history's second epoch is estimated from K = {plan.samples} < 2n = {2 * setup.n} rollouts per "
            f"prompt: a product of unbiased estimates, not itself unbiased (--samples {2 * setup.n} makes it exact)",
            highlight=False,
        )
    display.print(f"{passes} Sampled: {_sample_line(record['sample'])}.", highlight=False)
    display.print(f"cost: {_cost_line(cost)}; machine: {machine_label(machine)}", highlight=False)
    display.print(f"[bold]advice:[/] {advice}", highlight=False)
    return record


def _trainer_fields() -> dict[str, Any]:
    """The trainer settings of a command that generates and never trains or logs."""
    return {"report_to": "none", "disable_tqdm": True, "logging_steps": 1}


def first_prompts(train: Any, args: Any, count: int) -> list[dict]:
    """The first `count` rows the run's sampler yields for its seed (epoch 0: the train split shuffled by the seed,
    unless the run turns shuffling off), each once; all of them when the split is smaller."""
    from pods_rl.trainer.refill import EpochRepeatSampler

    sampler = EpochRepeatSampler(
        data_source=train,
        mini_repeat_count=1,
        batch_size=1,
        repeat_count=1,
        shuffle=args.shuffle_dataset,
        seed=args.seed,
    )
    order = []
    for index in sampler:
        order.append(index)
        if len(order) == count:
            break
    return [train[index] for index in order]


def describe(plan: AdvicePlan, prompts: int, setup: Any, args: Any) -> str:
    """What will be sampled, on one line."""
    settings = plan.settings
    backend = "vLLM" if args.use_vllm else "HF generate"
    return (
        f"advise: {settings.model_label()} on {settings.task}, n={setup.n}, m={setup.m}, {setup.prompts_per_step} "
        f"prompts per step: {plan.samples} rollouts of up to {args.max_completion_length} tokens for each of the first "
        f"{prompts} training prompts (seed {settings.seed}), {backend} at temperature {args.temperature:g} -> "
        f"{plan.output_dir}"
    )


def _trainer(plan: AdvicePlan, task: Any, args: Any, display, logs) -> tuple[Any, str | None, dict | None]:
    """The run's model, precision (chosen and measured as at the run's start) and a PODSTrainer to generate with."""
    from peft import LoraConfig

    from pods_rl.run.step_costs import RunPrecision
    from pods_rl.run.train import load_settled_model
    from pods_rl.trainer import PODSTrainer

    settings = plan.settings
    startup = RunPrecision(settings, args)
    for line in startup.plan_lines():
        display.print(line, highlight=False)
    model, tokenizer, args, precision = load_settled_model(
        settings, startup, args, task, display, logs, plan.output_dir, _trainer_fields()
    )
    if args.reward_weights is None:
        args.reward_weights = task.reward_weights
    measured = None
    if startup.costs is not None and precision.name in startup.costs:
        measured = {"phases": startup.costs[precision.name], "shape": startup.shape}
    with logs.native_output():
        trainer = PODSTrainer(
            model=model,
            reward_funcs=task.reward_funcs,
            args=args,
            train_dataset=task.train,
            processing_class=tokenizer,
            peft_config=LoraConfig(**settings.lora) if settings.lora else None,
        )
    return trainer, precision.name, measured


def _call_rows(plan: AdvicePlan, args: Any) -> int:
    """Rows per generation call: the run's pool, or its evaluation batch when larger (as `pods eval` batches)."""
    return max(args.local_pool_size, plan.settings.eval.batch_size)


def sample_passes(
    trainer: Any, rows: list[dict], samples: int, threshold: float, call_rows: int, display=None
) -> dict[str, Any]:
    """Generate `samples` rollouts of each row with `trainer._generate_rows` (the trainer's own generation and
    scoring), in calls of whole prompts of about `call_rows` rows; count each prompt's passes (weighted reward >=
    `threshold`; an unscorable rollout fails) and the multiplicities of its distinct weighted rewards."""
    import torch

    from pods_rl.trainer.pools import selection_scores

    per_call = max(1, call_rows // samples)
    total = samples * len(rows)
    successes, value_counts, unscorable, tokens, seconds = [], [], 0, 0, 0.0
    trainer.model.train()  # TRL generates `num_generations` per prompt in training mode
    for start in range(0, len(rows), per_call):
        if display is not None:
            display.update("sampling", start * samples, total)
        batch = rows[start : start + per_call]
        began = time.perf_counter()
        with torch.no_grad():
            columns, rewards, _ = trainer._generate_rows([row for row in batch for _ in range(samples)], samples)
        seconds += time.perf_counter() - began
        weights = trainer.reward_weights.to(rewards.device)
        scores = selection_scores(rewards, weights, samples, "sum_then_normalize")[0]  # the weighted sums, NaN: none
        unscorable += int(torch.isnan(scores).sum())
        successes += (scores >= threshold).sum(dim=1).tolist()  # NaN compares False: a failure
        for group in scores.tolist():
            values = [round(value, SCORE_DECIMALS) if not math.isnan(value) else "nan" for value in group]
            value_counts.append([values.count(value) for value in dict.fromkeys(values)])
        tokens += sum(len(ids) for ids in columns["completion_ids"])
    if display is not None:
        display.update("sampling", total, total)
    return {
        "successes": successes,
        "value_counts": value_counts,
        "unscorable": unscorable,
        "rollouts": total,
        "tokens": tokens,
        "seconds": seconds,
    }


def _measured_cost(measured: dict | None, sampled: dict, setup: Any, precision: str | None) -> StepCost | None:
    """This machine's step cost from the start-up measurement (per generated rollout and per trained row, no fixed
    cost); with vLLM, a generated rollout's seconds from this command's own generation. None: nothing measured."""
    if measured is None:
        return None
    phases, shape = measured["phases"], measured["shape"]
    if shape.rollouts:
        per_generated = phases["generate"] / shape.rollouts
        source = f"measured at start-up as `pods train` measures a step ({precision}; completions at full length)"
    else:
        per_generated = sampled["seconds"] / sampled["rollouts"]
        source = f"update measured at start-up ({precision}); generation timed on this command's vLLM rollouts"
    per_trained = phases["update"] / (shape.rows * shape.passes)
    trained = setup.prompts_per_step * setup.m
    return StepCost("this machine", source, 0.0, per_generated, per_trained, trained)


def _question(prompt: Any) -> str:
    """A prompt's last message (its question), or the prompt itself when it is plain text."""
    return prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)


def _sample_line(sample: dict[str, Any]) -> str:
    return (
        f"{sample['prompts']} prompts x {sample['samples_per_prompt']} rollouts, mean pass rate "
        f"{sample['mean_pass_rate']:.1%}, {sample['never_passed']} never passed, {sample['always_passed']} always "
        f"passed, {sample['mean_completion_tokens']:.0f} tokens a completion on average, {sample['seconds']:.0f} s"
    )


def _cost_line(cost: StepCost | None) -> str:
    if cost is None:
        return "none (on an accelerator the run measures no step at start-up; --cost-model FILE gives one)"
    trained = "not given" if cost.per_trained is None else f"{1e3 * cost.per_trained:.2f} ms"
    return (
        f"{cost.name} ({cost.source}): {1e3 * cost.per_generated:.2f} ms a generated rollout, {trained} a trained "
        f"row, {cost.per_step:.2f} s a step, at {cost.trained_per_step:g} trained rows a step"
    )


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].rstrip(".")
