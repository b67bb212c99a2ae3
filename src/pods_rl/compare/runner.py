"""`pods compare`: running the arms (GRPO, PODS and its ablations) on one task, model, seed set and time budget.

Each arm and seed is a separate `pods train` process, run one after another so arms never share the cores, seed by
seed with the arms interleaved; `--resume` keeps the runs that finished. The settings are in
`pods_rl.compare.settings`, the folder's layout in `pods_rl.compare.layout`, what is measured in
`pods_rl.compare.measures` (on `pods_rl.compare.statistics`), how it is shown in `pods_rl.compare.render`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from pods_rl.compare.cost_model import CostModel
from pods_rl.compare.layout import (
    BASE_MODELS,
    is_finished,
    load_run,
    reported_label,
    reported_runs,
    tuning_label,
    tuning_records,
    tuning_runs,
)
from pods_rl.compare.measures import NOT_RESOLVED, STEP_MEASURES, resolvable_warnings, summarize
from pods_rl.compare.power import report_power, report_power_lines
from pods_rl.compare.render import results_tables, rule_text, write_comparison
from pods_rl.compare.settings import COMPARE_FILE, CompareSettings, load_compare
from pods_rl.compare.tuning import choose_learning_rates, tuning_warnings
from pods_rl.console import make_console
from pods_rl.models.tiny import PINNED_ENV
from pods_rl.run.folders import CONFIG_FILE, SUMMARY_FILE, check_model_name, check_output_dir, replace_output_dir
from pods_rl.run.lock import FolderLock
from pods_rl.run.settings import RunSettings, changed_values, read_yaml


class ArmFailed(RuntimeError):
    """A `pods train` process of the comparison exited with an error."""


class ComparisonStopped(RuntimeError):
    """SIGINT or SIGTERM stopped the comparison: passed on to the run in training, which saved and stopped."""

    def __init__(self, signal_number: int, run_dir: Path):
        name = signal.Signals(signal_number).name
        super().__init__(
            f"stopped by {name}: the run in {run_dir} was passed the signal and stopped after its step, as `pods "
            "train` does alone; the finished runs are kept, and `pods compare --resume <folder>` trains the rest."
        )
        self.signal_number = signal_number


LOCK_FILE = "compare.lock"  # {"pid": the `pods compare` process, "child": its `pods train` run, "run": that folder}
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ComparisonLock(FolderLock):
    """A comparison folder's lock: which process trains it (and which `pods train` run it has started), so that no
    second process trains the same folder. A lock whose processes are all gone is stale and taken over."""

    pid_fields = ("pid", "child")

    def __init__(self, output_dir: Path):
        super().__init__(output_dir, LOCK_FILE)
        self.record.update(child=None, run=None)

    def running(self, child: int, run_dir: Path) -> None:
        """Record the `pods train` process now training `run_dir`."""
        self.update(child=child, run=str(run_dir))

    def busy_message(self, option: str, record: dict[str, Any]) -> str:
        running = f"process {record.get('pid', '?')}"
        if record.get("child"):
            running += f", whose `pods train` (process {record['child']}) trains {record.get('run')}"
        return (
            f"{option} {self.path.parent}: another comparison is training this folder ({running}, since "
            f"{record.get('started', '?')}); stop it first, or remove {self.path} if no such process runs."
        )


def plan_table(settings: CompareSettings) -> Table:
    """The arms, their sizes and learning rates, and how many runs the comparison trains (tuning runs first)."""
    runs = f"{len(settings.arms) * len(settings.seeds)} runs"
    if settings.sequential:
        looks = ", ".join(map(str, settings.planned_looks()))
        runs += f" (until resolved: looks at {looks} seeds per arm, more runs while verdicts are open)"
    if settings.lr_grid:
        tuning = len(settings.arms) * len(settings.lr_grid) * len(settings.tuning_seeds)
        runs = f"{tuning} tuning runs (seeds {settings.tuning_seeds}), then {runs}"
    table = Table(
        "arm",
        "n",
        "m",
        "rule",
        "rows/step",
        "prompts/step",
        "learning rate",
        "seeds",
        title="comparison plan",
        caption=f"{runs}, one after another",
    )
    for name in settings.arms:
        trainer = settings.arm_settings(name, settings.seeds[0]).trainer
        n, m, rule = settings.arm_sizes(name)
        rows = trainer["per_device_train_batch_size"] * trainer.get("gradient_accumulation_steps", 1)
        seeds = ",".join(map(str, settings.seeds))
        rate = (
            "best of " + ", ".join(f"{rate:g}" for rate in settings.lr_grid)
            if settings.lr_grid
            else f"{trainer.get('learning_rate', 'TRL default')}"
        )
        table.add_row(name, str(n), str(m), rule_text(n, m, rule), str(rows), f"{rows / m:g}", rate, seeds)
    return table


def plan_warnings(settings: CompareSettings) -> list[str]:
    """What the plan can be told before anything trains: seeds too few to resolve any time to target."""
    arms = sum(name != settings.baseline for name in settings.arms)
    return (
        resolvable_warnings(len(settings.seeds), arms, settings.clock)
        if arms and settings.baseline in settings.arms
        else []
    )


def run_comparison(
    settings: CompareSettings,
    output_dir: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    console: Console | None = None,
) -> dict[str, Any]:
    """Train every seed of every arm (each a `pods train` process, arms interleaved), then write the comparison files.

    With `resume`, runs already finished in `output_dir` are kept and the others are trained again from the start.
    """
    console = console or make_console(stderr=True)
    output_dir = Path(output_dir)
    lock = ComparisonLock(output_dir)
    lock.check("--resume" if resume else "--output-dir")
    replace = (
        False if resume else check_output_dir(output_dir, overwrite=overwrite, marker=COMPARE_FILE, what="comparison")
    )
    for name in settings.arms:
        check_model_name(settings.arm_settings(name, settings.seeds[0]).model)
    if not resume:
        from pods_rl.run.train import load_run_task

        load_run_task(settings.arm_settings(next(iter(settings.arms)), settings.seeds[0]))  # its data can be read
        replace_output_dir(output_dir, replace=replace)  # every check passed: only now is a folder replaced
    lock.acquire("--resume" if resume else "--output-dir")
    try:
        return _run_comparison(settings, output_dir, lock, console)
    finally:
        lock.release()


def _run_comparison(
    settings: CompareSettings, output_dir: Path, lock: ComparisonLock, console: Console
) -> dict[str, Any]:
    # Written on resume too: the settings may have been widened (`extend_on_resume`), and the folder keeps them.
    (output_dir / COMPARE_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    learning_rates = None
    if settings.lr_grid:
        # Tuning first, on seeds the reported runs never use: every arm gets the same grid and the same seeds.
        tuning = tuning_runs(settings, output_dir)
        _train_runs(
            {
                tuning_label(name, rate, seed): (run_dir, settings.arm_settings(name, seed, rate))
                for (name, rate, seed), run_dir in tuning.items()
            },
            console,
            lock,
        )
        learning_rates = choose_learning_rates(settings, tuning_records(settings, tuning))
        for warning in tuning_warnings(learning_rates):  # before hours of reported runs at these rates
            console.print(f"[bold yellow]warning:[/] {warning}")
    while True:
        _train_runs(
            {
                reported_label(name, seed): (run_dir, planned)
                for (name, seed), (run_dir, planned) in _planned_reported_runs(
                    settings, output_dir, learning_rates
                ).items()
            },
            console,
            lock,
        )
        comparison = _write_report(settings, output_dir, learning_rates, settings.seeds, console)
        added = seeds_to_add(settings, comparison)
        if not added:
            return comparison
        open_arms = [
            name for name, words in comparison["verdicts"].items() if words[settings.primary_measure] == NOT_RESOLVED
        ]
        console.print(
            f"look at {len(settings.seeds)} seeds: {', '.join(open_arms)} not resolved; adding seed(s) "
            f"{', '.join(map(str, added))} (at most {settings.sequential['max_seeds']} seeds per arm)",
            highlight=False,
        )
        settings = replace(settings, seeds=[*settings.seeds, *added])
        (output_dir / COMPARE_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))


def seeds_to_add(settings: CompareSettings, comparison: dict[str, Any]) -> list[int]:
    """The seeds a sequential comparison adds after this report: up to its next look, while some arm's primary
    verdict is not resolved and fewer than max_seeds ran; none otherwise (a comparison of one look: none)."""
    if settings.sequential is None:
        return []
    if all(words[settings.primary_measure] != NOT_RESOLVED for words in comparison["verdicts"].values()):
        return []
    later = [look for look in settings.planned_looks() if look > len(settings.seeds)]
    return settings.next_seeds(later[0] - len(settings.seeds)) if later else []


def report_comparison(output_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Write the comparison files from the runs `output_dir` has finished, training nothing: the seeds whose every
    arm finished. While seeds are left it is an interim report, and says so; with all of them it is the report
    `run_comparison` writes. Raises ValueError while a tuning run or every seed is unfinished."""
    console = console or make_console(stderr=True)
    settings = load_compare(output_dir, "--report")
    saved = Path(output_dir) / "comparison.json"
    if saved.exists() and not any(run_dir.exists() for run_dir in reported_runs(settings, output_dir).values()):
        return _write_saved_report(settings, output_dir, json.loads(saved.read_text()), console)
    learning_rates = None
    if settings.lr_grid:
        tuning = tuning_runs(settings, output_dir)
        left = sum(not is_finished(run_dir) for run_dir in tuning.values())
        if left:
            raise ValueError(
                f"--report {output_dir}: {left} of {len(tuning)} tuning runs have not finished, so the learning "
                f"rates are not chosen yet; `pods compare --resume {output_dir}` trains them."
            )
        learning_rates = choose_learning_rates(settings, tuning_records(settings, tuning))
    planned = _planned_reported_runs(settings, output_dir, learning_rates)
    finished = {key for key, (run_dir, settings_planned) in planned.items() if _finished(run_dir, settings_planned)}
    seeds = [seed for seed in settings.seeds if all((name, seed) in finished for name in settings.arms)]
    if not seeds:
        raise ValueError(
            f"--report {output_dir}: no seed has finished every arm yet; `pods compare --resume {output_dir}` "
            "trains them."
        )
    return _write_report(settings, output_dir, learning_rates, seeds, console)


def _planned_reported_runs(
    settings: CompareSettings, output_dir: Path, learning_rates: dict[str, Any] | None
) -> dict[tuple[str, int], tuple[Path, RunSettings]]:
    """Each reported run's folder and settings, at its arm's chosen learning rate when the rates were tuned."""
    chosen = {
        name: None if learning_rates is None else learning_rates["arms"][name]["chosen"] for name in settings.arms
    }
    return {
        (name, seed): (run_dir, settings.arm_settings(name, seed, chosen[name]))
        for (name, seed), run_dir in reported_runs(settings, output_dir).items()
    }


def _write_report(
    settings: CompareSettings,
    output_dir: Path,
    learning_rates: dict[str, Any] | None,
    seeds: list[int],
    console: Console,
) -> dict[str, Any]:
    """Summarize the reported runs of `seeds` (all of `settings.seeds`, or the finished ones for an interim
    report), write comparison.json/.md/.png and print the tables."""
    reported = reported_runs(settings, output_dir)
    records = {name: [load_run(reported[name, seed]) for seed in seeds] for name in settings.arms}
    comparison = summarize(replace(settings, seeds=seeds), records, learning_rates, planned_seeds=settings.seeds)
    return _show(settings, output_dir, comparison, console)


def _write_saved_report(
    settings: CompareSettings, output_dir: Path, saved: dict[str, Any], console: Console
) -> dict[str, Any]:
    """Rewrite the comparison files of a folder that keeps comparison.json but not its runs (their step logs were
    not kept): the evaluations, step measures, cost model and learning rates saved there, measured anew."""
    seeds = saved["settings"]["seeds"]
    machines = list(saved.get("machines") or {})
    label = machines[0] if len(machines) == 1 else "not recorded"
    records = {
        name: [{"eval": evaluations, "machine_label": label} for evaluations in saved["arms"][name]["evaluations"]]
        for name in settings.arms
    }
    comparison = summarize(
        replace(settings, seeds=seeds),
        records,
        saved.get("learning_rates"),
        planned_seeds=settings.seeds,
        saved_steps={name: {key: saved["arms"][name].get(key) for key in STEP_MEASURES} for name in settings.arms},
        saved_cost_model=CostModel.from_dict(saved["cost_model"]["phases"]),
    )
    comparison["warnings"].insert(
        0,
        "Rewritten from the records saved in comparison.json (each seed's evaluations, the step measures, the cost "
        "model and the learning rates): this folder does not keep its runs' step logs."
        + ("" if len(machines) == 1 else f" The runs ran on: {'; '.join(machines) or 'not recorded'}."),
    )
    return _show(settings, output_dir, comparison, console)


def _show(settings: CompareSettings, output_dir: Path, comparison: dict[str, Any], console: Console) -> dict[str, Any]:
    """Add the design's power (as planned and at what the runs show), write comparison.json/.md/.png and print the
    tables, the power and the warnings."""
    comparison["power"] = report_power(settings, comparison)
    write_comparison(output_dir, comparison)
    for table in results_tables(comparison):
        console.print(table)
    for line in report_power_lines(comparison["power"]):
        console.print(line)
    for warning in comparison["warnings"]:
        console.print(f"[bold yellow]warning:[/] {warning}")
    return comparison


def _train_runs(runs: dict[str, tuple[Path, RunSettings]], console: Console, lock: ComparisonLock) -> None:
    """Train each (folder, settings) in order, one `pods train` process each; finished runs are kept."""
    for index, (what, (run_dir, planned)) in enumerate(runs.items(), start=1):
        label = f"[{index}/{len(runs)}] {what}"
        planned = one_precision(planned)
        if _finished(run_dir, planned):
            console.print(f"{label}: done earlier, kept")
            continue
        start = time.perf_counter()
        console.print(f"{label}: training ... (log: {run_dir}.log)")
        _train_in_subprocess(planned, run_dir, lock)
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        console.print(
            f"{label}: {summary['steps']} steps, peak accuracy {summary['peak_accuracy']:.3f}, "
            f"{time.perf_counter() - start:.0f} s wall"
        )


def _finished(run_dir: Path, planned: RunSettings) -> bool:
    if not is_finished(run_dir):
        return False
    changed = _changed_settings(run_dir, planned)
    if changed:
        raise ValueError(f"{run_dir} was trained with other settings than planned ({changed}); remove it.")
    return True


def one_precision(planned: RunSettings) -> RunSettings:
    """Every arm in one precision. On a CPU `pods train` chooses bf16 by measuring the run's own step, so arms of
    different shapes (GRPO 4/4, PODS 16 -> 4) could train in different precisions and the comparison would measure
    that too. Unless the comparison's settings set `trainer.bf16`, every arm on a machine without an accelerator
    trains in fp32 (set `trainer.bf16: true` to run them all in bf16); on a GPU every arm keeps TRL's default."""
    if "bf16" in planned.trainer:
        return planned
    import torch

    if torch.cuda.is_available() or torch.accelerator.is_available():
        return planned
    return planned.model_copy(update={"trainer": {**planned.trainer, "bf16": False}})


def _changed_settings(run_dir: Path, planned: RunSettings) -> list[str]:
    """Dotted keys whose value in the run's config.yaml differs from the planned settings. A run saved before the
    precision was chosen per machine has no `trainer.bf16`: it trained in fp32 on a CPU, as `one_precision` plans."""
    saved = read_yaml(run_dir / CONFIG_FILE)
    changed = changed_values(saved, yaml.safe_load(yaml.safe_dump(one_precision(planned).to_dict())))
    if "bf16" not in (saved.get("trainer") or {}) and changed.get("trainer.bf16") == (None, False):
        del changed["trainer.bf16"]
    return list(changed)


def _train_command(config: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "pods_rl", "train", "--config", str(config), "--output-dir", str(run_dir)]


def _train_in_subprocess(settings: RunSettings, run_dir: Path, lock: ComparisonLock | None = None) -> None:
    """One `pods train` process, so each arm starts from a fresh interpreter and no two arms share the cores.

    `pods train` lays the config file over its built-in defaults; the file holds every setting, so the run gets
    exactly the planned ones unless the defaults gained keys since the comparison started, which is checked.
    SIGINT and SIGTERM are passed on to the run, which runs in its own session so that a terminal's Ctrl-C reaches
    it once, through this process: it saves and stops as it does alone, and then ComparisonStopped ends the
    comparison. On Linux the run also gets SIGTERM if this process dies without passing one on (SIGKILL).
    With the comparison's lock, the run's tiny model is the one pinned in the comparison's folder (`BASE_MODELS`):
    the warm start differs between CPU instruction sets, and a comparison resumed on another CPU keeps its own.
    """
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config = run_dir.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    command = _train_command(config, run_dir)
    log = run_dir.with_suffix(".log")
    with log.open("w") as handle, _signals_passed_on() as passed:
        child = subprocess.Popen(
            [*command, "--overwrite"],
            env=None if lock is None else {**os.environ, PINNED_ENV: str(lock.path.parent / BASE_MODELS)},
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_stop_with_parent if sys.platform == "linux" else None,
        )
        passed.child = child
        for number in passed.received:  # a signal that came before the run started
            child.send_signal(number)
        if lock is not None:
            lock.running(child.pid, run_dir)
        returncode = child.wait()
    if passed.received:
        raise ComparisonStopped(passed.received[0], run_dir)
    if returncode != 0 or not is_finished(run_dir):
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ArmFailed(f"{' '.join(command)} failed (exit {returncode}); end of {log}:\n{tail}")
    changed = _changed_settings(run_dir, settings)
    if changed:
        raise ArmFailed(
            f"{run_dir} ran with settings {changed} other than planned: the built-in defaults changed since this "
            "comparison started. Start a new comparison."
        )


def _stop_with_parent() -> None:
    """In the child, before exec: ask Linux for SIGTERM when the parent dies (prctl PR_SET_PDEATHSIG = 1)."""
    import ctypes

    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))


class _Passed:
    """The run a signal is passed on to, and the signals received."""

    def __init__(self) -> None:
        self.child: subprocess.Popen | None = None
        self.received: list[int] = []


@contextmanager
def _signals_passed_on() -> Iterator[_Passed]:
    """While a run trains, SIGINT/SIGTERM go on to it and are recorded; the handlers are restored on exit. Only the
    main thread can handle signals; elsewhere they keep their action."""
    passed = _Passed()
    if threading.current_thread() is not threading.main_thread():
        yield passed
        return

    def pass_on(number: int, _frame: object) -> None:
        passed.received.append(number)
        if passed.child is not None and passed.child.poll() is None:
            passed.child.send_signal(number)

    previous = {number: signal.signal(number, pass_on) for number in STOP_SIGNALS}
    try:
        yield passed
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
