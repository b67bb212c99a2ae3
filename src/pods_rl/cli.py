"""The `pods` command: train, eval, compare, and list tasks and models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from pods_rl.console import make_console

app = typer.Typer(
    help="PODS: GRPO that trains on the most informative m of n rollouts per prompt.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = make_console()  # wide off a terminal, so that a table's cells never wrap in a log


def _fail(error: Exception) -> None:
    """One line (wrapped only by the terminal's width), exit status 2."""
    console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _cli_overrides(**options: Any) -> list[dict[str, Any]]:
    """Named command-line options as nested overrides (only those the user gave)."""
    from pods_rl.run.settings import parse_override

    places = {
        "model": ("model",),
        "task": ("task",),
        "seed": ("seed",),
        "time_budget": ("time_budget",),
        "num_generations": ("trainer", "num_generations"),
        "num_selected": ("trainer", "num_selected"),
        "selection_rule": ("trainer", "selection_rule"),
        "learning_rate": ("trainer", "learning_rate"),
        "max_steps": ("trainer", "max_steps"),
        "eval_every": ("eval", "every_steps"),
        "vllm": ("trainer", "use_vllm"),
    }
    overrides = []
    for name, path in places.items():
        value = options.get(name)
        if value is not None:
            for key in reversed(path):
                value = {key: value}
            overrides.append(value)
    if options.get("asynchronous"):
        overrides.append({"asynchronous": {}})
    if options.get("lora_r"):
        overrides.append({"lora": {"r": options["lora_r"], "lora_alpha": 2 * options["lora_r"]}})
    overrides.extend(parse_override(text) for text in options.get("set") or [])
    return overrides


@app.command()
def train(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file (see configs/).")] = None,
    output_dir: Annotated[Path | None, typer.Option(help="Run folder (default: a new folder under runs/).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Continue the run in this folder from its last checkpoint. Options may change when to stop, "
            "evaluate, save and log (--max-steps, --time-budget, --eval-every, ...); others are refused."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace the run in --output-dir (only a folder holding a run's config.yaml).")
    ] = False,
    model: Annotated[str | None, typer.Option(help="'tiny', 'smollm2-135m', a local folder or a hub id.")] = None,
    task: Annotated[str | None, typer.Option(help="Task name; see `pods tasks`.")] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-n", help="Pool size n.")] = None,
    num_selected: Annotated[int | None, typer.Option("--num-selected", "-m", help="Rollouts trained, m.")] = None,
    selection_rule: Annotated[str | None, typer.Option(help="max_variance (PODS), max_reward or random.")] = None,
    learning_rate: Annotated[float | None, typer.Option(help="Learning rate.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Optimizer steps.")] = None,
    time_budget: Annotated[float | None, typer.Option(help="Stop after this many seconds of training.")] = None,
    eval_every: Annotated[int | None, typer.Option(help="Evaluate every this many steps.")] = None,
    lora_r: Annotated[int | None, typer.Option(help="Train a LoRA adapter of this rank (alpha = 2r).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of the data order, sampling and selection.")] = None,
    vllm: Annotated[
        bool | None,
        typer.Option(
            "--vllm/--no-vllm",
            help="Generate with vLLM in this process (trainer.use_vllm; needs `make vllm`'s environment).",
        ),
    ] = None,
    asynchronous: Annotated[
        bool,
        typer.Option(
            "--async",
            help="Generate on a vLLM server while training (the `asynchronous` settings; needs `make vllm`'s "
            "environment, see docs/async.md).",
        ),
    ] = False,
    set: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Any other setting as KEY=VALUE, e.g. trainer.beta=0.04, task_options.operands=3, "
            "eval.sampled_k=4, lora.target_modules=[q_proj,v_proj]. Trainer keys are PODSConfig fields.",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Check the settings and data, print the plan (rollouts and rows per step), stop.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' logs, warnings and progress bars.")
    ] = False,
) -> None:
    """Train a model with PODS; writes checkpoints, metrics.jsonl, summary.json, report.md and accuracy.png."""
    # Only light modules until the settings are checked: a mistyped setting fails in about a second.
    from pods_rl.defaults import default_run_settings
    from pods_rl.run.folders import check_model_name, check_output_dir, default_output_dir, load_settings_of
    from pods_rl.run.settings import apply_on_resume, resolve

    changes: dict[str, Any] = {}
    try:
        overrides = _cli_overrides(
            model=model,
            task=task,
            seed=seed,
            time_budget=time_budget,
            num_generations=num_generations,
            num_selected=num_selected,
            selection_rule=selection_rule,
            learning_rate=learning_rate,
            max_steps=max_steps,
            eval_every=eval_every,
            lora_r=lora_r,
            vllm=vllm,
            asynchronous=asynchronous,
            set=set,
        )
        if resume is not None:
            if config is not None or output_dir is not None:
                raise ValueError("--resume continues a run in its own folder: drop --config and --output-dir.")
            settings = load_settings_of(resume)
            settings, changes = apply_on_resume(settings, overrides, where=f"--resume {resume}")
            output_dir = resume
        else:

            def defaults(model: str, task: str) -> dict[str, Any]:
                check_model_name(model)  # first: the defaults of a model off the presets ask torch about a GPU
                return default_run_settings(model, task)

            settings = resolve(defaults, config, overrides)
            output_dir = output_dir or default_output_dir(settings)
            check_output_dir(output_dir, overwrite=overwrite)
        check_model_name(settings.model)
    except ValueError as error:
        _fail(error)

    from pods_rl.run.train import train as run_training

    try:
        summary = run_training(
            settings,
            output_dir,
            resume=resume is not None,
            overwrite=overwrite,
            changes=changes,
            console=console,
            verbose=verbose,
            dry_run=dry_run,
        )
    except ValueError as error:
        _fail(error)
    if dry_run:
        return
    if summary:  # the main process's: one line; summary.json keeps every field
        from pods_rl.run.report import summary_line

        line = summary_line(summary, output_dir / "report.md")
        console.print(f"[bold green]done:[/] {line}", highlight=False, soft_wrap=True)


@app.command("eval")
def eval_command(
    model: Annotated[
        str,
        typer.Option(
            help="A run folder, its final/ or a checkpoint-N/ (scored on the run's task variant and evaluation "
            "settings, from its config.yaml); or 'tiny', 'smollm2-135m', a local folder or a hub id (scored with the "
            "defaults `pods train` gives it)."
        ),
    ],
    task: Annotated[
        str | None, typer.Option(help="Task name (see `pods tasks`); default: the run's, else arithmetic.")
    ] = None,
    num_examples: Annotated[int | None, typer.Option(help="Evaluate on the first N test examples.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(help="Completion length limit.")] = None,
    sampled_k: Annotated[int | None, typer.Option(help="Also sampled pass@1 over k samples.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature for sampled pass@1.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Generation batch size.")] = None,
    set: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="A setting of the evaluation as KEY=VALUE: task_options.KEY (e.g. task_options.num_test=50), seed, "
            "trainer.temperature or eval.num_examples / max_new_tokens / batch_size / sampled_k.",
        ),
    ] = None,
    output: Annotated[Path | None, typer.Option(help="Write the results as JSON here.")] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' logs, warnings and progress bars.")
    ] = False,
) -> None:
    """Held-out pass@1 accuracy of a run or any model on a task's test split, scored as `pods train` scores it.

    Options left out take the run's settings (or `pods train`'s defaults for the model and task)."""
    from pods_rl.run.eval_settings import eval_overrides, resolve_eval

    try:
        overrides = eval_overrides(
            task=task,
            num_examples=num_examples,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            sampled_k=sampled_k,
            temperature=temperature,
            set=set,
        )
        plan = resolve_eval(model, overrides)
    except ValueError as error:
        _fail(error)

    from pods_rl.run.display import Display
    from pods_rl.run.logs import RunLogs

    display, logs = Display(console), RunLogs(verbose=verbose)  # before the heavy imports: they log too
    try:
        from pods_rl.evaluation import evaluate
        from pods_rl.run.eval_settings import load_weights
        from pods_rl.run.train import load_run_task

        logs.route_libraries()
        dataset = plan.examples(load_run_task(plan.settings).test)
        display.print(plan.describe(len(dataset)), markup=False, highlight=False)
        loaded, tokenizer = load_weights(plan, display)
        results = evaluate(
            loaded,
            tokenizer,
            dataset,
            max_new_tokens=plan.max_new_tokens,
            batch_size=plan.settings.eval.batch_size,
            num_samples=plan.settings.eval.sampled_k,
            temperature=plan.temperature,
            seed=plan.settings.seed,
            progress=display.callback("evaluation", quiet_if_short=True),
        )
    except ValueError as error:
        _fail(error)
    finally:
        display.close()
        logs.close()
    variant = {"task_options": plan.settings.task_options, "max_new_tokens": plan.max_new_tokens}
    results = {"model": model, "task": plan.settings.task, **variant, **results}
    if output is not None:
        output.write_text(json.dumps(results, indent=2))
    typer.echo(json.dumps(results, indent=2))


@app.command()
def tasks() -> None:
    """List the tasks `--task` accepts."""
    from pods_rl.tasks import list_tasks

    table = Table("task", "description")
    for name, description in list_tasks():
        table.add_row(name, description)
    make_console(stderr=False).print(table)


@app.command()
def models() -> None:
    """List the built-in models (any hub id or local folder works too)."""
    from pods_rl.models import list_models

    table = Table("model", "description")
    for name, description in list_models().items():
        table.add_row(name, description)
    make_console(stderr=False).print(table)


@app.command()
def compare(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="Compare config (see configs/compare-*.yaml).")
    ] = None,
    output_dir: Annotated[Path | None, typer.Option(help="Comparison folder (default: a new folder in runs/).")] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Finish the comparison in this folder: keep finished runs, train the rest; --set / --seed may add "
            "learning rates (lr_grid), tuning seeds or seeds."
        ),
    ] = None,
    status: Annotated[
        Path | None,
        typer.Option(
            help="Show what the comparison in this folder has finished and what is left (trains nothing), then stop."
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(
            help="Write comparison.md/.json/.png in this folder from the seeds whose every arm finished (trains "
            "nothing), then stop: an interim report, which says so, while seeds are left."
        ),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace the files of an existing comparison.")] = False,
    arm: Annotated[
        list[str] | None,
        typer.Option(
            "--arm",
            help="Run this arm (repeatable). Default: grpo, pods, grpo-ds, pods-ds; also built in: grpo-pool, "
            "pods-random, pods-max-reward, and grpo-async, pods-async, pods-ds-async (docs/async.md).",
        ),
    ] = None,
    seed: Annotated[list[int] | None, typer.Option("--seed", help="Seeds to run (repeatable).")] = None,
    model: Annotated[str | None, typer.Option(help="'tiny', 'smollm2-135m', a local folder or a hub id.")] = None,
    task: Annotated[str | None, typer.Option(help="Task name; see `pods tasks`.")] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-n", help="Pool size n.")] = None,
    num_selected: Annotated[int | None, typer.Option("--num-selected", "-m", help="Rollouts trained, m.")] = None,
    prompts_per_step: Annotated[int | None, typer.Option(help="Prompts per optimizer step, in every arm.")] = None,
    time_budget: Annotated[float | None, typer.Option(help="Seconds of training per run.")] = None,
    dry_run: Annotated[
        bool, typer.Option(help="Print the plan and the simulated power of its verdicts, and stop.")
    ] = False,
    until_resolved: Annotated[
        bool,
        typer.Option(
            help="Add seeds in batches (--seed-batch) until every arm's primary verdict is resolved or --max-seeds "
            "is reached, with alpha spending over the looks (docs/comparing.md)."
        ),
    ] = False,
    max_seeds: Annotated[
        int | None, typer.Option(help="With --until-resolved: seeds per arm at most (default: twice the seeds).")
    ] = None,
    seed_batch: Annotated[
        int | None, typer.Option(help="With --until-resolved: seeds added at each look (default 2).")
    ] = None,
    set: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Any other setting as KEY=VALUE: run settings shared by the arms (trainer.learning_rate=1e-4, "
            "eval.every_seconds=20), comparison keys (target_gain=0.75, primary=mean_accuracy) or one arm's "
            "(arms.pods.trainer.beta=0.04).",
        ),
    ] = None,
) -> None:
    """Run GRPO, PODS and both with dynamic sampling (or the arms named) one after another on one time budget;
    writes comparison.json/.md/.png."""
    from pods_rl.compare.runner import (
        ArmFailed,
        ComparisonLock,
        ComparisonStopped,
        plan_table,
        plan_warnings,
        report_comparison,
    )
    from pods_rl.compare.runner import run_comparison as run_arms
    from pods_rl.compare.settings import (
        default_compare_dir,
        extend_on_resume,
        load_compare,
        resolve_compare,
        with_sequential_plan,
    )

    try:
        named = {"n": num_generations, "m": num_selected, "prompts_per_step": prompts_per_step, "seeds": seed}
        overrides = [{key: value} for key, value in named.items() if value is not None]
        overrides += _cli_overrides(model=model, task=task, time_budget=time_budget, set=set)
        alone = [flag for flag, value in (("--status", status), ("--report", report)) if value is not None]
        sequential = until_resolved or max_seeds is not None or seed_batch is not None
        if alone and (
            overrides or config or output_dir or resume or arm or dry_run or overwrite or sequential or len(alone) > 1
        ):
            raise ValueError(f"{alone[0]} takes a comparison folder and nothing else: give it alone.")
        if (max_seeds is not None or seed_batch is not None) and not until_resolved:
            raise ValueError("--max-seeds and --seed-batch go with --until-resolved.")
        if until_resolved and resume is not None:
            raise ValueError(
                "--until-resolved is chosen when a comparison starts (its looks are planned before any result); "
                "--resume continues a sequential comparison by itself."
            )
        if report is not None:
            comparison = report_comparison(report, console=console)
            console.print(f"[bold green]written:[/] {report}/comparison.md")
            typer.echo("\n".join(comparison["summary"]))
            return
        if status is not None:
            from pods_rl.compare.status import comparison_progress, progress_tables

            progress = comparison_progress(status)
            for table in progress_tables(progress):
                console.print(table)
            for warning in progress.warnings:
                console.print(f"[bold yellow]warning:[/] {warning}")
            return
        if resume is not None:
            if config is not None or output_dir is not None or arm:
                raise ValueError(
                    "--resume finishes a comparison with its saved settings: drop --config, --output-dir and --arm."
                )
            ComparisonLock(resume).check("--resume")  # before the plan: one line when another process trains it
            settings, added = extend_on_resume(load_compare(resume), overrides, where=f"--resume {resume}")
            for key, (old, new) in added.items():
                line = f"--resume: {key} {old} -> {new} (the finished runs are kept)"
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            output_dir = resume
        else:
            settings = resolve_compare(config, overrides, only=arm)
            if until_resolved:
                settings = with_sequential_plan(settings, max_seeds, seed_batch)
            output_dir = output_dir or default_compare_dir(settings)
        console.print(plan_table(settings))
        for line in plan_warnings(settings):
            console.print(f"[yellow]warning:[/] {line}", highlight=False, soft_wrap=True)
        if dry_run:
            from pods_rl.compare.power import design_power, power_lines

            with console.status("simulating the verdicts' power ..."):
                lines = power_lines(design_power(settings))
            for line in lines:
                console.print(line, highlight=False, soft_wrap=True)
            return
        comparison = run_arms(settings, output_dir, resume=resume is not None, overwrite=overwrite, console=console)
    except (ValueError, ArmFailed) as error:
        _fail(error)
    except ComparisonStopped as stopped:
        console.print(f"[bold yellow]{stopped}[/]", highlight=False, soft_wrap=True)
        raise typer.Exit(128 + stopped.signal_number) from None
    console.print(f"[bold green]done:[/] {output_dir}/comparison.md")
    typer.echo("\n".join(comparison["summary"]))  # one line per arm: speedup, interval, seeds, accuracy


@app.command()
def advise(
    config: Annotated[Path | None, typer.Option("--config", "-c", help="YAML settings file of the run.")] = None,
    model: Annotated[str | None, typer.Option(help="'tiny', 'smollm2-135m', a local folder or a hub id.")] = None,
    task: Annotated[str | None, typer.Option(help="Task name; see `pods tasks`.")] = None,
    num_generations: Annotated[int | None, typer.Option("--num-generations", "-n", help="Pool size n.")] = None,
    num_selected: Annotated[int | None, typer.Option("--num-selected", "-m", help="Rollouts trained, m.")] = None,
    prompts: Annotated[
        int | None, typer.Option(help="Training prompts to sample: the run's first P (default 32).")
    ] = None,
    samples: Annotated[
        int | None, typer.Option(help="Rollouts per prompt, K >= n (default max(n, 16); 2n makes the history exact).")
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option(help="Folder of advice.json (default: a new one in runs/).")
    ] = None,
    cost_model: Annotated[
        str | None,
        typer.Option(
            help="Step costs of another machine: a YAML/JSON file with one StepCost entry (benchmarks/gpu_check.py "
            "prints one) or a built-in one's name ('H200 (0.5B)', 'paper (L40S)'). Default: measured here."
        ),
    ] = None,
    set: Annotated[
        list[str] | None,
        typer.Option("--set", help="Any run setting as KEY=VALUE, as `pods train --set` takes it."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also show the libraries' logs, warnings and progress bars.")
    ] = False,
) -> None:
    """Forecast, from the base model's rollouts, what GRPO, PODS, dynamic sampling and allocation would learn per step
    and per second here; writes advice.json (docs/advise.md)."""
    from pods_rl.run.advise import plan_advice

    try:
        overrides = _cli_overrides(
            model=model, task=task, num_generations=num_generations, num_selected=num_selected, set=set
        )
        plan = plan_advice(
            config, overrides, prompts=prompts, samples=samples, output_dir=output_dir, cost_model=cost_model
        )
    except ValueError as error:
        _fail(error)

    from pods_rl.run.advise import run_advice

    try:
        run_advice(plan, console=console, verbose=verbose)
    except ValueError as error:
        _fail(error)
    console.print(f"[bold green]written:[/] {plan.output_dir / 'advice.json'}", highlight=False, soft_wrap=True)
