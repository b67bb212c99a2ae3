"""`pods compare`: running the arms (GRPO, PODS and its ablations) on one task, model, seed set and time budget.

This module holds a comparison's settings and runs it: each arm and seed is a separate `pods train` process, run one
after another so arms never share the cores, seed by seed with the arms interleaved; `--resume` keeps the runs that
finished. What is measured is in `pods_rl.run.compare_summary` (on `pods_rl.run.statistics`), how it is shown in
`pods_rl.run.compare_report`. The measure follows the paper's: the training time each arm needs to reach a target
accuracy (by default 99% of the baseline's peak), and the speedup over the baseline that this gives, per seed with
the brackets the evaluation schedule allows and over seeds with an interval.

Prompts per step: every arm trains on `prompts_per_step` prompts per optimizer step, i.e. `prompts_per_step * m`
rows (m = n for the GRPO arms), split over `gradient_accumulation_steps` micro-batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from pods_rl.defaults import default_run_settings
from pods_rl.run.compare_report import results_tables, rule_text, write_comparison
from pods_rl.run.compare_summary import choose_learning_rates, summarize, tuning_warnings
from pods_rl.run.folders import (
    CONFIG_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    check_model_name,
    check_output_dir,
    replace_output_dir,
)
from pods_rl.run.settings import RunSettings, changed_values, merge, read_yaml

COMPARE_FILE = "compare.yaml"
ARM_KEYS = ("n", "m", "rule")  # arm shorthands; the rest of an arm is run-settings overrides
DERIVED_TRAINER_KEYS = ("num_generations", "num_selected", "selection_rule", "per_device_train_batch_size")
METRICS = ("accuracy", "accuracy_sampled")  # what an evaluation records: greedy, and sampled over eval.sampled_k


class ArmFailed(RuntimeError):
    """A `pods train` process of the comparison exited with an error."""


def default_arms() -> dict[str, dict[str, Any]]:
    """GRPO with n = m, GRPO on the whole pool (n = m = pool), and PODS n -> m with each selection rule."""
    return {
        "grpo": {"n": "m"},
        "grpo-pool": {"m": "n"},
        "pods": {"rule": "max_variance"},
        "pods-random": {"rule": "random"},
        "pods-max-reward": {"rule": "max_reward"},
        "grpo-ds": {"n": "m", "trainer": {"dynamic_sampling": True}},
        "pods-ds": {"rule": "max_variance", "trainer": {"dynamic_sampling": True}},
    }


def default_compare_settings(model: str = "tiny", task: str = "arithmetic") -> dict[str, Any]:
    """The built-in comparison: the default run (tiny model, arithmetic) stopped by a time budget, not a step count."""
    return merge(
        default_run_settings(model, task),
        {
            # The budget ends the runs; a constant learning rate keeps arms with different step counts comparable.
            "trainer": {"max_steps": 1_000_000, "lr_scheduler_type": "constant", "save_strategy": "no"},
            "eval": {"every_steps": None, "every_seconds": 30.0},
            "time_budget": 300.0,
            "n": 16,
            "m": 4,
            "prompts_per_step": 16,  # as the default run: 64 trained rows / m = 4
            "seeds": [0, 1, 2],
            "target": 0.99,
            "target_accuracy": None,
            "metric": "accuracy",
            "baseline": "grpo",
        },
    )


@dataclass
class CompareSettings:
    """A comparison: shared run settings (`base`), the arms, the seeds and the measure."""

    base: dict[str, Any]
    arms: dict[str, dict[str, Any]]
    seeds: list[int]
    n: int
    m: int
    prompts_per_step: int
    target: float
    baseline: str
    target_accuracy: float | None = None  # an absolute target; replaces `target` x the baseline's peak when set
    metric: str = "accuracy"
    lr_grid: list[float] | None = None  # each arm's learning rate is chosen from these on the tuning seeds
    tuning_seeds: list[int] | None = None
    # Not a setting: whether the arms are checked against this environment (vLLM installed, the process count,
    # TRL's config). A folder that is only read (--report, --status) needs neither, nor TRL.
    environment_checks: bool = field(default=True, repr=False)

    @classmethod
    def from_dict(
        cls, data: dict[str, Any], *, where: str = "compare settings", environment_checks: bool = True
    ) -> CompareSettings:
        names = [f.name for f in fields(cls) if f.name not in NOT_SETTINGS]
        values = {name: data[name] for name in names if name in data}
        required = [f.name for f in fields(cls) if f.name not in NOT_SETTINGS and f.default is MISSING]
        missing = sorted(set(required) - set(values))
        if missing:
            raise ValueError(f"{where}: missing key(s) {missing}.")
        base = {k: v for k, v in data.items() if k not in names}
        settings = cls(base=base, **values, environment_checks=environment_checks)
        settings.check(where)
        return settings

    def check(self, where: str) -> None:
        if not (isinstance(self.n, int) and isinstance(self.m, int) and 2 <= self.m <= self.n):
            raise ValueError(f"{where}: need integers 2 <= m <= n, got n={self.n!r}, m={self.m!r}.")
        if not isinstance(self.prompts_per_step, int) or self.prompts_per_step < 1:
            raise ValueError(f"{where}: prompts_per_step must be a positive integer, got {self.prompts_per_step!r}.")
        if not self.seeds or not all(isinstance(s, int) for s in self.seeds):
            raise ValueError(f"{where}: seeds must be a non-empty list of integers, got {self.seeds!r}.")
        if not isinstance(self.target, (int, float)) or not 0 < self.target <= 1:
            raise ValueError(f"{where}: target must be a fraction in (0, 1], got {self.target!r}.")
        absolute = self.target_accuracy
        if absolute is not None and (isinstance(absolute, bool) or not isinstance(absolute, (int, float))):
            raise ValueError(f"{where}: target_accuracy must be an accuracy in (0, 1] or null, got {absolute!r}.")
        if absolute is not None and not 0 < absolute <= 1:
            raise ValueError(f"{where}: target_accuracy must be an accuracy in (0, 1] or null, got {absolute!r}.")
        if self.metric not in METRICS:
            raise ValueError(f"{where}: metric must be one of {list(METRICS)}, got {self.metric!r}.")
        if self.metric == "accuracy_sampled" and not (self.base.get("eval") or {}).get("sampled_k"):
            raise ValueError(f"{where}: metric accuracy_sampled needs eval.sampled_k > 0 (samples per question).")
        if not isinstance(self.arms, dict) or not self.arms:
            raise ValueError(f"{where}: arms must be a non-empty mapping of arm name to settings.")
        self._check_tuning(where)
        for name, arm in self.arms.items():
            if not isinstance(arm, dict):
                raise ValueError(f"{where}: arm {name!r} must be a mapping, got {arm!r}.")
            for key in ("seed", "time_budget"):
                if key in arm:
                    raise ValueError(f"{where}: arm {name!r} sets {key!r}; every arm shares the comparison's.")
            _reject_derived(arm.get("trainer") or {}, f"{where}: arm {name!r}", allow_batch=True)
            if not all(isinstance(size, int) for size in self.arm_sizes(name)[:2]):
                raise ValueError(f"{where}: arm {name!r}: n and m must be integers or 'n' / 'm', got {arm!r}.")
            self.arm_settings(name, self.seeds[0])  # validates the arm's run settings now, not hours later

    def _check_tuning(self, where: str) -> None:
        if self.lr_grid is None and self.tuning_seeds is None:
            return
        grid, seeds = self.lr_grid or [], self.tuning_seeds or []
        if not grid or not all(isinstance(rate, float) and rate > 0 for rate in grid) or len(set(grid)) < len(grid):
            raise ValueError(f"{where}: lr_grid must be a list of distinct positive learning rates, got {grid!r}.")
        if not seeds or not all(isinstance(s, int) for s in seeds):
            raise ValueError(f"{where}: lr_grid needs tuning_seeds, a non-empty list of integers; got {seeds!r}.")
        if set(seeds) & set(self.seeds):
            raise ValueError(
                f"{where}: tuning_seeds {seeds} overlap seeds {self.seeds}: the reported seeds must be "
                "ones the tuning never saw."
            )
        tuned = [name for name, arm in self.arms.items() if "learning_rate" in (arm.get("trainer") or {})]
        if tuned:
            raise ValueError(
                f"{where}: arm(s) {tuned} set trainer.learning_rate; with lr_grid every arm's rate is "
                "chosen from the grid."
            )

    def arm_sizes(self, name: str) -> tuple[int, int, str]:
        """The arm's pool size n, trained size m and rule; 'n' and 'm' refer to the comparison's values."""
        arm = self.arms[name]
        sizes = {"n": self.n, "m": self.m}
        n, m = (sizes.get(value, value) for value in (arm.get("n", "n"), arm.get("m", "m")))
        return n, m, arm.get("rule", "max_variance")

    def arm_settings(self, name: str, seed: int, learning_rate: float | None = None) -> RunSettings:
        """The full run settings of one arm and seed: base, then the arm's overrides, then n, m, rule and batch (and
        the learning rate, when it is tuned)."""
        arm = self.arms[name]
        n, m, rule = self.arm_sizes(name)
        data = merge(self.base, {k: v for k, v in arm.items() if k not in ARM_KEYS})
        trainer = {"num_generations": n, "num_selected": m, "selection_rule": rule}
        if learning_rate is not None:
            trainer["learning_rate"] = learning_rate
        if "per_device_train_batch_size" not in (arm.get("trainer") or {}):
            accumulation = data["trainer"].get("gradient_accumulation_steps", 1)
            rows = self.prompts_per_step * m
            if rows % accumulation:
                raise ValueError(
                    f"arm {name!r}: prompts_per_step * m = {rows} rows per step do not split into "
                    f"gradient_accumulation_steps={accumulation} equal micro-batches."
                )
            trainer["per_device_train_batch_size"] = rows // accumulation
        checks = "all" if self.environment_checks else "portable"
        settings = RunSettings.from_dict(
            merge(data, {"trainer": trainer, "seed": seed}), where=f"arm {name!r}", checks=checks
        )
        if self.environment_checks:
            settings.trainer_config(Path("unused"))  # raises on an invalid trainer setting
        return settings

    def to_dict(self) -> dict[str, Any]:
        return {**self.base, **{k: v for k, v in asdict(self).items() if k not in NOT_SETTINGS}}


NOT_SETTINGS = ("base", "environment_checks")  # CompareSettings fields that compare.yaml does not hold as keys


def _reject_derived(trainer: dict[str, Any], where: str, *, allow_batch: bool = False) -> None:
    derived = [k for k in DERIVED_TRAINER_KEYS if k in trainer and not (allow_batch and k.startswith("per_device"))]
    if derived:
        raise ValueError(
            f"{where}: trainer {derived} are set per arm from n, m, rule and prompts_per_step; use those instead."
        )


def resolve_compare(
    config_file: Path | None, overrides: list[dict[str, Any]], *, only: list[str] | None = None
) -> CompareSettings:
    """Built-in defaults, then the file, then command-line overrides. The file's `arms` replace the default arms."""
    user = read_yaml(config_file) if config_file is not None else {}
    where = str(config_file) if config_file else "compare settings"
    arms = user.pop("arms", None) or default_arms()
    for override in overrides:
        user = merge(user, override)
    arms = merge(arms, user.pop("arms", {}))
    if "seed" in user:
        raise ValueError(f"{where}: use 'seeds: [...]' (every arm runs every seed), not 'seed'.")
    _reject_derived(user.get("trainer") or {}, where)
    data = merge(default_compare_settings(user.get("model", "tiny"), user.get("task", "arithmetic")), user)
    if data["time_budget"] is None and "max_steps" not in (user.get("trainer") or {}):
        raise ValueError(f"{where}: set time_budget (seconds of training per run) or trainer.max_steps.")
    if only:
        unknown = sorted(set(only) - set(arms))
        if unknown:
            raise ValueError(f"Unknown arm(s) {unknown}; the arms are {list(arms)}.")
        arms = {name: spec for name, spec in arms.items() if name in only}
    return CompareSettings.from_dict({**data, "arms": arms}, where=where)


def default_compare_dir(settings: CompareSettings) -> Path:
    model = Path(settings.base["model"]).name
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-compare-{settings.base['task']}-{model}".replace(":", "_")


# ---------------------------------------------------------------- running


def plan_table(settings: CompareSettings) -> Table:
    """The arms, their sizes and learning rates, and how many runs the comparison trains (tuning runs first)."""
    runs = f"{len(settings.arms) * len(settings.seeds)} runs"
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
    console = console or Console(stderr=True)
    output_dir = Path(output_dir)
    replace = (
        False if resume else check_output_dir(output_dir, overwrite=overwrite, marker=COMPARE_FILE, what="comparison")
    )
    for name in settings.arms:
        check_model_name(settings.arm_settings(name, settings.seeds[0]).model)
    if not resume:
        from pods_rl.run.train import load_run_task

        load_run_task(settings.arm_settings(next(iter(settings.arms)), settings.seeds[0]))  # its data can be read
        replace_output_dir(output_dir, replace=replace)  # every check passed: only now is a folder replaced
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
        )
        learning_rates = choose_learning_rates(settings, tuning_records(settings, tuning))
        for warning in tuning_warnings(learning_rates):  # before hours of reported runs at these rates
            console.print(f"[bold yellow]warning:[/] {warning}")
    _train_runs(
        {
            reported_label(name, seed): (run_dir, planned)
            for (name, seed), (run_dir, planned) in _planned_reported_runs(settings, output_dir, learning_rates).items()
        },
        console,
    )
    return _write_report(settings, output_dir, learning_rates, settings.seeds, console)


def report_comparison(output_dir: Path, console: Console | None = None) -> dict[str, Any]:
    """Write the comparison files from the runs `output_dir` has finished, training nothing: the seeds whose every
    arm finished. While seeds are left it is an interim report, and says so; with all of them it is the report
    `run_comparison` writes. Raises ValueError while a tuning run or every seed is unfinished."""
    console = console or Console(stderr=True)
    settings = load_compare(output_dir, "--report")
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
    write_comparison(output_dir, comparison)
    for table in results_tables(comparison):
        console.print(table)
    for warning in comparison["warnings"]:
        console.print(f"[bold yellow]warning:[/] {warning}")
    return comparison


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


def _train_runs(runs: dict[str, tuple[Path, RunSettings]], console: Console) -> None:
    """Train each (folder, settings) in order, one `pods train` process each; finished runs are kept."""
    for index, (what, (run_dir, planned)) in enumerate(runs.items(), start=1):
        label = f"[{index}/{len(runs)}] {what}"
        if _finished(run_dir, planned):
            console.print(f"{label}: done earlier, kept")
            continue
        start = time.perf_counter()
        console.print(f"{label}: training ... (log: {run_dir}.log)")
        _train_in_subprocess(planned, run_dir)
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        console.print(
            f"{label}: {summary['steps']} steps, peak accuracy {summary['peak_accuracy']:.3f}, "
            f"{time.perf_counter() - start:.0f} s wall"
        )


GROWABLE = ("lr_grid", "tuning_seeds", "seeds")


def extend_on_resume(
    saved: CompareSettings, overrides: list[dict[str, Any]], *, where: str
) -> tuple[CompareSettings, dict[str, tuple[list, list]]]:
    """The saved comparison with `overrides` applied, and the changes as {key: (old, new)}.

    Only the lists of GROWABLE may change, and only by adding values, so that every finished run stays one the
    comparison plans (a wider learning-rate grid or more seeds train only the new runs). Raises ValueError otherwise.
    """
    data = saved.to_dict()
    for override in overrides:
        data = merge(data, override)
    updated = CompareSettings.from_dict(data, where=where)
    changes = changed_values(saved.to_dict(), updated.to_dict())
    refused = [
        key
        for key, (old, new) in changes.items()
        if key not in GROWABLE or not isinstance(old, list) or not set(old) <= set(new or [])
    ]
    if refused:
        raise ValueError(
            f"{where}: cannot change {', '.join(refused)}: a resumed comparison keeps its settings; it may only add "
            f"values to {', '.join(GROWABLE)} (e.g. --set 'lr_grid=[1e-5, 2e-5, 4e-5, 8e-5]')."
        )
    return updated, changes


def load_compare(output_dir: Path, option: str = "--resume") -> CompareSettings:
    """The settings a comparison folder was started with, to finish or report it (`option` names the flag that
    gave the folder, for the error). Only --resume checks the arms against this environment: a comparison that
    trained with vLLM can be reported where vLLM is not installed."""
    path = Path(output_dir) / COMPARE_FILE
    if not path.exists():
        raise ValueError(f"{option} {output_dir}: no comparison there ({COMPARE_FILE} is missing).")
    return CompareSettings.from_dict(read_yaml(path), where=str(path), environment_checks=option == "--resume")


def is_finished(run_dir: Path) -> bool:
    """Whether `pods train` ended this run (it writes summary.json last)."""
    return (run_dir / SUMMARY_FILE).exists()


def _finished(run_dir: Path, planned: RunSettings) -> bool:
    if not is_finished(run_dir):
        return False
    changed = _changed_settings(run_dir, planned)
    if changed:
        raise ValueError(f"{run_dir} was trained with other settings than planned ({changed}); remove it.")
    return True


def _changed_settings(run_dir: Path, planned: RunSettings) -> list[str]:
    """Dotted keys whose value in the run's config.yaml differs from the planned settings."""
    return list(changed_values(read_yaml(run_dir / CONFIG_FILE), yaml.safe_load(yaml.safe_dump(planned.to_dict()))))


def _train_in_subprocess(settings: RunSettings, run_dir: Path) -> None:
    """One `pods train` process, so each arm starts from a fresh interpreter and no two arms share the cores.

    `pods train` lays the config file over its built-in defaults; the file holds every setting, so the run gets
    exactly the planned ones unless the defaults gained keys since the comparison started, which is checked.
    """
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config = run_dir.with_suffix(".yaml")
    config.write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    command = [sys.executable, "-m", "pods_rl", "train", "--config", str(config), "--output-dir", str(run_dir)]
    log = run_dir.with_suffix(".log")
    with log.open("w") as handle:
        result = subprocess.run([*command, "--overwrite"], stdout=handle, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0 or not is_finished(run_dir):
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ArmFailed(f"{' '.join(command)} failed (exit {result.returncode}); end of {log}:\n{tail}")
    changed = _changed_settings(run_dir, settings)
    if changed:
        raise ArmFailed(
            f"{run_dir} ran with settings {changed} other than planned: the built-in defaults changed since this "
            "comparison started. Start a new comparison."
        )


def load_run(run_dir: Path) -> dict[str, Any]:
    """A finished run's step and eval records from its metrics.jsonl, and the machine it ran on (None for a run
    that predates that record)."""
    records = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line]
    machine = json.loads((run_dir / SUMMARY_FILE).read_text()).get("machine")
    return {**{kind: [r for r in records if r["type"] == kind] for kind in ("step", "eval")}, "machine": machine}
