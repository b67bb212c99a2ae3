"""`pods compare`: several arms (GRPO, PODS and its ablations) on one task, model, seed set and time budget.

Each arm and seed is a separate `pods train` process, run one after another so arms never share the cores, seed by
seed with the arms interleaved. The comparison follows the paper's measure: the training time each arm needs to
reach 99% of vanilla GRPO's best held-out accuracy, and the speedup over GRPO that this gives.

Definitions (also written into comparison.json):
- Curves: each seed's accuracy-vs-training-seconds evaluations are linearly interpolated onto the union of the arm's
  evaluation times (held at the last value after a run's last evaluation); the mean over seeds is the arm's curve,
  min and max its band.
- Target: `target` (0.99) x the peak of the baseline arm's (`grpo`) mean curve.
- Time to target: the first time on an arm's mean curve whose accuracy reaches the target (with one seed: the first
  evaluation at or above it, as in the paper). Speedup: baseline's time to target / the arm's.
- Prompts per step: every arm trains on `prompts_per_step` prompts per optimizer step, i.e. `prompts_per_step * m`
  rows (m = n for the GRPO arms), split over `gradient_accumulation_steps` micro-batches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import yaml
from rich.console import Console
from rich.table import Table

from pods_rl.defaults import default_run_settings
from pods_rl.run.cost_model import PHASES, CostModel, when_pods_pays
from pods_rl.run.folders import CONFIG_FILE, METRICS_FILE, check_model_name, check_output_dir, replace_output_dir
from pods_rl.run.settings import RunSettings, merge, read_yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt

COMPARE_FILE = "compare.yaml"
ARM_KEYS = ("n", "m", "rule")  # arm shorthands; the rest of an arm is run-settings overrides
DERIVED_TRAINER_KEYS = ("num_generations", "num_selected", "selection_rule", "per_device_train_batch_size")
COUNTS = ("rollouts_generated", "rollouts_trained", "tokens_generated", "tokens_trained")


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

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "compare settings") -> CompareSettings:
        names = [f.name for f in fields(cls) if f.name != "base"]
        values = {name: data[name] for name in names if name in data}
        missing = sorted(set(names) - set(values))
        if missing:
            raise ValueError(f"{where}: missing key(s) {missing}.")
        settings = cls(base={k: v for k, v in data.items() if k not in names}, **values)
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
        if not isinstance(self.arms, dict) or not self.arms:
            raise ValueError(f"{where}: arms must be a non-empty mapping of arm name to settings.")
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

    def arm_sizes(self, name: str) -> tuple[int, int, str]:
        """The arm's pool size n, trained size m and rule; 'n' and 'm' refer to the comparison's values."""
        arm = self.arms[name]
        sizes = {"n": self.n, "m": self.m}
        n, m = (sizes.get(value, value) for value in (arm.get("n", "n"), arm.get("m", "m")))
        return n, m, arm.get("rule", "max_variance")

    def arm_settings(self, name: str, seed: int) -> RunSettings:
        """The full run settings of one arm and seed: base, then the arm's overrides, then n, m, rule and batch."""
        arm = self.arms[name]
        n, m, rule = self.arm_sizes(name)
        data = merge(self.base, {k: v for k, v in arm.items() if k not in ARM_KEYS})
        trainer = {"num_generations": n, "num_selected": m, "selection_rule": rule}
        if "per_device_train_batch_size" not in (arm.get("trainer") or {}):
            accumulation = data["trainer"].get("gradient_accumulation_steps", 1)
            rows = self.prompts_per_step * m
            if rows % accumulation:
                raise ValueError(
                    f"arm {name!r}: prompts_per_step * m = {rows} rows per step do not split into "
                    f"gradient_accumulation_steps={accumulation} equal micro-batches."
                )
            trainer["per_device_train_batch_size"] = rows // accumulation
        settings = RunSettings.from_dict(merge(data, {"trainer": trainer, "seed": seed}), where=f"arm {name!r}")
        settings.trainer_config(Path("unused"))  # raises on an invalid trainer setting
        return settings

    def to_dict(self) -> dict[str, Any]:
        return {**self.base, **{k: v for k, v in asdict(self).items() if k != "base"}}


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
    table = Table("arm", "n", "m", "rule", "rows/step", "prompts/step", "seeds", title="comparison plan")
    for name in settings.arms:
        trainer = settings.arm_settings(name, settings.seeds[0]).trainer
        n, m, rule = settings.arm_sizes(name)
        rows = trainer["per_device_train_batch_size"] * trainer.get("gradient_accumulation_steps", 1)
        seeds = ",".join(map(str, settings.seeds))
        table.add_row(name, str(n), str(m), _rule(n, m, rule), str(rows), f"{rows / m:g}", seeds)
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
        (output_dir / COMPARE_FILE).write_text(yaml.safe_dump(settings.to_dict(), sort_keys=False))
    # Seed by seed, every arm in turn: slow drifts in machine load (shared cores) hit every arm alike.
    runs = [(name, seed) for seed in settings.seeds for name in settings.arms]
    for index, (name, seed) in enumerate(runs, start=1):
        run_dir = output_dir / name / f"seed-{seed}"
        planned = settings.arm_settings(name, seed)
        label = f"[{index}/{len(runs)}] {name} seed {seed}"
        if _finished(run_dir, planned):
            console.print(f"{label}: done earlier, kept")
            continue
        start = time.perf_counter()
        console.print(f"{label}: training ... (log: {run_dir}.log)")
        _train_in_subprocess(planned, run_dir)
        summary = json.loads((run_dir / "summary.json").read_text())
        console.print(
            f"{label}: {summary['steps']} steps, peak accuracy {summary['peak_accuracy']:.3f}, "
            f"{time.perf_counter() - start:.0f} s wall"
        )
    records = {
        name: [load_run(output_dir / name / f"seed-{seed}") for seed in settings.seeds] for name in settings.arms
    }
    comparison = summarize(settings, records)
    write_comparison(output_dir, comparison)
    for table in results_tables(comparison):
        console.print(table)
    for warning in comparison["warnings"]:
        console.print(f"[bold yellow]warning:[/] {warning}")
    return comparison


def load_compare(output_dir: Path) -> CompareSettings:
    """The settings a comparison folder was started with, to finish it (`--resume`)."""
    path = Path(output_dir) / COMPARE_FILE
    if not path.exists():
        raise ValueError(f"--resume {output_dir}: no comparison there ({COMPARE_FILE} is missing).")
    return CompareSettings.from_dict(read_yaml(path), where=str(path))


def _finished(run_dir: Path, planned: RunSettings) -> bool:
    if not (run_dir / "summary.json").exists():
        return False
    changed = _changed_settings(run_dir, planned)
    if changed:
        raise ValueError(f"{run_dir} was trained with other settings than planned ({changed}); remove it.")
    return True


def _changed_settings(run_dir: Path, planned: RunSettings) -> list[str]:
    """Dotted keys whose value in the run's config.yaml differs from the planned settings."""

    def flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
        items: dict[str, Any] = {}
        for key, value in data.items():
            items.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return items

    ran = flat(read_yaml(run_dir / CONFIG_FILE))
    wanted = flat(yaml.safe_load(yaml.safe_dump(planned.to_dict())))
    return sorted(key for key in ran.keys() | wanted.keys() if ran.get(key) != wanted.get(key))


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
    if result.returncode != 0 or not (run_dir / "summary.json").exists():
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ArmFailed(f"{' '.join(command)} failed (exit {result.returncode}); end of {log}:\n{tail}")
    changed = _changed_settings(run_dir, settings)
    if changed:
        raise ArmFailed(
            f"{run_dir} ran with settings {changed} other than planned: the built-in defaults changed since this "
            "comparison started. Start a new comparison."
        )


def load_run(run_dir: Path) -> dict[str, list[dict]]:
    """A finished run's step and eval records from its metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line]
    return {kind: [r for r in records if r["type"] == kind] for kind in ("step", "eval")}


# ---------------------------------------------------------------- measures


def first_time_at_least(times: list[float], values: list[float], target: float) -> float | None:
    """The first time whose value reaches the target (a 1e-12 tolerance absorbs float averaging); None if never."""
    return next((float(t) for t, v in zip(times, values, strict=True) if v >= target - 1e-12), None)


def speedup(baseline_seconds: float | None, arm_seconds: float | None) -> float | None:
    """How many times faster the arm reaches the target; None when either never does or the arm needs no training."""
    if baseline_seconds is None or arm_seconds is None or arm_seconds <= 0:
        return None
    return baseline_seconds / arm_seconds


def band(curves: list[tuple[list[float], list[float]]]) -> dict[str, list[float]]:
    """Mean, min and max over seeds of curves interpolated onto the union of their times."""
    grid = np.array(sorted({t for times, _ in curves for t in times}), dtype=float)
    stacked = np.array([np.interp(grid, times, values) for times, values in curves])
    return {
        "train_seconds": grid.tolist(),
        "mean": stacked.mean(axis=0).tolist(),
        "min": stacked.min(axis=0).tolist(),
        "max": stacked.max(axis=0).tolist(),
    }


def spread(values: list[float]) -> dict[str, Any]:
    """Mean, sample std (0 for one value), min, max and the values themselves."""
    array = np.asarray(values, dtype=float)
    return {
        "mean": float(array.mean()),
        "std": float(array.std(ddof=1)) if len(array) > 1 else 0.0,
        "min": float(array.min()),
        "max": float(array.max()),
        "per_seed": array.tolist(),
    }


def summarize(settings: CompareSettings, records: dict[str, list[dict[str, list[dict]]]]) -> dict[str, Any]:
    """The comparison: accuracy, time to target and speedup, step costs and work per arm, and the cost model."""
    curves = {name: band([_accuracy_curve(run["eval"]) for run in runs]) for name, runs in records.items()}
    baseline = curves.get(settings.baseline)
    target = settings.target * max(baseline["mean"]) if baseline else None
    baseline_time = None if target is None else first_time_at_least(baseline["train_seconds"], baseline["mean"], target)
    all_steps = [step for runs in records.values() for run in runs for step in run["step"]]
    cost_model = CostModel.fit(all_steps)
    arms = {}
    for name, runs in records.items():
        curve = curves[name]
        steps = [step for run in runs for step in run["step"]]
        seconds = {phase: float(np.mean([s[f"pods/time_{phase}"] for s in steps])) for phase in PHASES}
        seconds["total"] = sum(seconds.values())
        per_step = {c: float(np.mean([s[f"pods/{c}"] for s in steps])) for c in COUNTS}
        time_to_target = None if target is None else first_time_at_least(curve["train_seconds"], curve["mean"], target)
        n, m, rule = settings.arm_sizes(name)
        arms[name] = {
            "n": n,
            "m": m,
            "rule": rule,
            "runs": [f"{name}/seed-{seed}" for seed in settings.seeds],
            "peak_accuracy": spread([max(e["accuracy"] for e in run["eval"]) for run in runs]),
            "final_accuracy": spread([run["eval"][-1]["accuracy"] for run in runs]),
            "steps": spread([len(run["step"]) for run in runs]),
            "train_seconds": spread([run["step"][-1]["train_seconds"] for run in runs]),
            "time_to_target": time_to_target,
            "time_to_target_per_seed": [_time_to(run["eval"], target) for run in runs],
            "speedup": speedup(baseline_time, time_to_target),
            "seconds_per_step": seconds,
            "predicted_seconds_per_step": cost_model.step_seconds(
                per_step["rollouts_generated"], per_step["rollouts_trained"]
            ),
            "per_step": per_step,
            "totals": {c: float(np.mean([sum(s[f"pods/{c}"] for s in run["step"]) for run in runs])) for c in COUNTS},
            "curve": curve,
        }
    return {
        "settings": settings.to_dict(),
        "target": {
            "baseline": settings.baseline,
            "fraction": settings.target,
            "baseline_peak": max(baseline["mean"]) if baseline else None,
            "accuracy": target,
        },
        "arms": arms,
        "cost_model": {
            "phases": cost_model.to_dict(),
            "when_pods_pays": when_pods_pays(cost_model, settings.n, settings.m, settings.prompts_per_step),
        },
        "warnings": _warnings(settings, records, baseline_time),
        "definitions": DEFINITIONS,
    }


def _warnings(
    settings: CompareSettings, records: dict[str, list[dict[str, list[dict]]]], baseline_time: float | None
) -> list[str]:
    """Conditions under which the numbers mean little: no baseline, a target met untrained, unequal starts."""
    warnings = []
    if settings.baseline not in records:
        warnings.append(f"The baseline arm {settings.baseline!r} was not run: no target, times or speedups.")
    elif baseline_time == 0:
        warnings.append(
            "The target is met before any training (the baseline never beats its start by 1%): train longer or "
            "evaluate on more examples before reading times to target."
        )
    for index, seed in enumerate(settings.seeds):
        starts = {name: runs[index]["eval"][0]["accuracy"] for name, runs in records.items()}
        if max(starts.values()) - min(starts.values()) > 1e-9:
            warnings.append(
                f"Seed {seed}: the accuracy before training differs between arms {starts}; the arms did not start "
                "from the same model, evaluation set or code."
            )
    return warnings


def _accuracy_curve(evaluations: list[dict]) -> tuple[list[float], list[float]]:
    return [e["train_seconds"] for e in evaluations], [e["accuracy"] for e in evaluations]


def _time_to(evaluations: list[dict], target: float | None) -> float | None:
    return None if target is None else first_time_at_least(*_accuracy_curve(evaluations), target)


DEFINITIONS = {
    "curve": "each seed's evaluations interpolated linearly onto the union of the arm's evaluation times "
    "(held at the last value after the run ends); mean over seeds, band = min..max",
    "target": "fraction x the peak of the baseline arm's mean curve",
    "time_to_target": "training seconds of the first point of the arm's mean curve at or above the target; null "
    "when never reached (per seed: first evaluation of that seed at or above the same target)",
    "speedup": "baseline's time_to_target / the arm's; null when either never reaches the target",
    "peak_accuracy": "highest evaluation of each seed; mean, sample std, min, max over seeds",
    "seconds_per_step": "mean over all steps of all seeds of the logged phase times (pods/time_*)",
    "totals": "per run (mean over seeds) sums over steps of rollouts and completion tokens generated and trained",
    "predicted_seconds_per_step": "cost model (per-phase least squares over all steps of all arms: generate, score "
    "and select vs rollouts generated, update vs rollouts trained) at the arm's mean rollouts per step",
}


# ---------------------------------------------------------------- outputs


def write_comparison(output_dir: Path, comparison: dict[str, Any]) -> None:
    (output_dir / "comparison.json").write_text(json.dumps(comparison, indent=2))
    plot_comparison(comparison, output_dir / "comparison.png")
    (output_dir / "comparison.md").write_text(comparison_markdown(comparison))


def _rule(n: int, m: int, rule: str) -> str:
    return rule if m < n else "none (all n)"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _peak(arm: dict[str, Any]) -> str:
    peak = arm["peak_accuracy"]
    return f"{_percent(peak['mean'])} ± {_percent(peak['std'])} ({_percent(peak['min'])}–{_percent(peak['max'])})"


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f}"


def _speedup(arm: dict[str, Any]) -> str:
    if arm["speedup"] is not None:
        return f"{arm['speedup']:.2f}x"
    return "not reached" if arm["time_to_target"] is None else "-"


def results_tables(comparison: dict[str, Any]) -> list[Table]:
    """Accuracy and time to target; measured and predicted seconds per step (two tables, to fit a terminal)."""
    target = comparison["target"]
    title = f"target {_percent(target['accuracy'])}% = {target['fraction']:g} x {target['baseline']}'s peak"
    accuracy = Table("arm", "n/m", "peak acc (%)", "time to target (s)", "speedup", title=title)
    costs = Table("arm", *PHASES, "measured", "predicted", title="seconds per step")
    for name, arm in comparison["arms"].items():
        peak = arm["peak_accuracy"]
        accuracy.add_row(
            name,
            f"{arm['n']}/{arm['m']}",
            f"{_percent(peak['mean'])} ± {_percent(peak['std'])}",
            _seconds(arm["time_to_target"]),
            _speedup(arm),
        )
        seconds = [*(arm["seconds_per_step"][p] for p in (*PHASES, "total")), arm["predicted_seconds_per_step"]]
        costs.add_row(name, *(f"{value:.3f}" for value in seconds))
    return [accuracy, costs]


def comparison_markdown(comparison: dict[str, Any]) -> str:
    settings, target, arms = comparison["settings"], comparison["target"], comparison["arms"]
    accuracy_rows = "\n".join(
        f"| {name} | {a['n']} | {a['m']} | {_rule(a['n'], a['m'], a['rule'])} | {_peak(a)} | "
        f"{_percent(a['final_accuracy']['mean'])} | {_seconds(a['time_to_target'])} | {_speedup(a)} | "
        f"{a['steps']['mean']:.0f} |"
        for name, a in arms.items()
    )
    cost_rows = "\n".join(
        f"| {name} | "
        + " | ".join(f"{a['seconds_per_step'][p]:.3f}" for p in (*PHASES, "total"))
        + f" | {a['predicted_seconds_per_step']:.3f} |"
        for name, a in arms.items()
    )
    work_rows = "\n".join(
        f"| {name} | {a['per_step']['rollouts_generated']:.0f} | {a['per_step']['rollouts_trained']:.0f} | "
        + " | ".join(f"{a['totals'][c]:.0f}" for c in COUNTS)
        + " |"
        for name, a in arms.items()
    )
    fit_rows = "\n".join(
        f"| {phase} | {fit['driver'].removeprefix('pods/')} | {1e3 * fit['per_rollout']:.3f} | {fit['constant']:.3f} |"
        for phase, fit in comparison["cost_model"]["phases"].items()
    )
    note = "\n".join(f"- {line}" for line in comparison["cost_model"]["when_pods_pays"]["note"])
    definitions = "\n".join(f"- **{key}**: {text}." for key, text in comparison["definitions"].items())
    warnings = "".join(f"\n**Warning:** {warning}\n" for warning in comparison["warnings"])
    budget = settings["time_budget"]
    return f"""# Comparison: {Path(settings["model"]).name} on {settings["task"]}

Pool n = {settings["n"]}, trained m = {settings["m"]}, {settings["prompts_per_step"]} prompt(s) per step, \
seeds {settings["seeds"]}, {"no" if budget is None else f"{budget:g} s"} training-time budget per run, \
evaluation every {settings["eval"]["every_seconds"]} s of training.
Target: {_percent(target["accuracy"])}% = {target["fraction"]:g} x the peak of `{target["baseline"]}`'s mean curve \
({_percent(target["baseline_peak"])}%).
{warnings}
![accuracy vs training time](comparison.png)

## Accuracy and time to target

| arm | n | m | rule | peak accuracy (%) mean ± std (min–max) | final (%) | time to target (s) | speedup | steps |
|---|---|---|---|---|---|---|---|---|
{accuracy_rows}

## Seconds per step: measured and predicted

| arm | generate | score | select | update | measured total | predicted |
|---|---|---|---|---|---|---|
{cost_rows}

## Work per step and per run (mean over seeds)

| arm | rollouts generated / step | rollouts trained / step | rollouts generated | rollouts trained | \
tokens generated | tokens trained |
|---|---|---|---|---|---|---|
{work_rows}

## Cost model

| phase | driver | ms per rollout | fixed s per step |
|---|---|---|---|
{fit_rows}

When PODS pays:
{note}

## Definitions

{definitions}
"""


def plot_comparison(comparison: dict[str, Any], path: Path) -> None:
    """Accuracy vs training time (mean line, min-max band over seeds) and the measured seconds per step by phase."""
    arms = comparison["arms"]
    figure, (curves, costs) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    for name, arm in arms.items():
        curve = arm["curve"]
        seconds = curve["train_seconds"]
        (line,) = curves.plot(seconds, [100 * v for v in curve["mean"]], marker=".", label=name)
        low, high = [100 * v for v in curve["min"]], [100 * v for v in curve["max"]]
        curves.fill_between(seconds, low, high, color=line.get_color(), alpha=0.2)
    target = comparison["target"]
    if target["accuracy"] is not None:
        label = f"target ({target['fraction']:g} x {target['baseline']} peak)"
        curves.axhline(100 * target["accuracy"], color="gray", linestyle="--", linewidth=1, label=label)
    curves.set_xlabel("training time (s, evaluation excluded)")
    curves.set_ylabel("held-out accuracy (%)")
    curves.set_title(f"{Path(comparison['settings']['model']).name} on {comparison['settings']['task']}")
    curves.grid(alpha=0.3)
    curves.legend(loc="lower right", fontsize="small")

    names = list(arms)
    left = np.zeros(len(names))
    for phase in PHASES:
        widths = np.array([arms[name]["seconds_per_step"][phase] for name in names])
        costs.barh(names, widths, left=left, label=phase)
        left += widths
    predicted = [arms[name]["predicted_seconds_per_step"] for name in names]
    costs.scatter(predicted, names, color="black", marker="x", zorder=3, label="predicted")
    costs.invert_yaxis()
    costs.set_xlabel("seconds per step")
    costs.set_title("measured step time by phase")
    costs.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
