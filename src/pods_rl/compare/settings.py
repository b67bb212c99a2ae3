"""A comparison's settings (compare.yaml): the shared run settings, the arms, the seeds and the measure; built-in
defaults, command-line overrides, and what `--resume` may change.

Prompts per step: every arm trains on `prompts_per_step` prompts per optimizer step, i.e. `prompts_per_step * m`
rows (m = n for the GRPO arms), split over `gradient_accumulation_steps` micro-batches.
"""

from __future__ import annotations

import time
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pods_rl.defaults import default_run_settings
from pods_rl.run.settings import RunSettings, changed_values, merge, read_yaml

COMPARE_FILE = "compare.yaml"


ARM_KEYS = ("n", "m", "rule")  # arm shorthands; the rest of an arm is run-settings overrides


DERIVED_TRAINER_KEYS = ("num_generations", "num_selected", "selection_rule", "per_device_train_batch_size")


METRICS = ("accuracy", "accuracy_sampled")  # what an evaluation records: greedy, and sampled over eval.sampled_k


# What `pods compare` races when neither a config file nor --arm names the arms: GRPO, PODS and both with dynamic
# sampling, 3 arms against GRPO, which 5 seeds can resolve (statistics.seeds_to_resolve). The other built-in arms
# (ablations) run when named: --arm grpo --arm grpo-pool.
DEFAULT_ARMS = ("grpo", "pods", "grpo-ds", "pods-ds")


def default_arms() -> dict[str, dict[str, Any]]:
    """Every built-in arm: GRPO with n = m, GRPO on the whole pool (n = m = pool), PODS n -> m with each selection
    rule, GRPO and PODS with dynamic sampling, and GRPO, PODS and PODS with dynamic sampling trained asynchronously
    (`pods train --async`, docs/async.md)."""
    return {
        "grpo": {"n": "m"},
        "grpo-pool": {"m": "n"},
        "pods": {"rule": "max_variance"},
        "pods-random": {"rule": "random"},
        "pods-max-reward": {"rule": "max_reward"},
        "grpo-ds": {"n": "m", "trainer": {"dynamic_sampling": True}},
        "pods-ds": {"rule": "max_variance", "trainer": {"dynamic_sampling": True}},
        "grpo-async": {"n": "m", "asynchronous": {}},
        "pods-async": {"rule": "max_variance", "asynchronous": {}},
        "pods-ds-async": {"rule": "max_variance", "trainer": {"dynamic_sampling": True}, "asynchronous": {}},
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
            "seeds": [0, 1, 2, 3, 4],  # the fewest with which the default arms can resolve a time to target
            "target_gain": 0.75,
            "target_gains": [0.5, 0.75, 0.9],
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
    baseline: str
    # The target: this fraction of the baseline's gain, from its accuracy before training to its plateau (the mean
    # curve over the last quarter of the window); the verdicts are drawn there. `target_gains`: the fractions every
    # speedup is also reported at. `target_accuracy`: an absolute target instead of `target_gain`, when set.
    target_gain: float = 0.75
    target_gains: list[float] = field(default_factory=lambda: [0.5, 0.75, 0.9])
    target_accuracy: float | None = None
    metric: str = "accuracy"
    lr_grid: list[float] | None = None  # each arm's learning rate is chosen from these on the tuning seeds
    tuning_seeds: list[int] | None = None
    # Step costs to project the steps to target onto (pods_rl.compare.cost_model.StepCost fields), besides the
    # built-in references; they change no run, so --resume may change them.
    cost_models: list[dict[str, Any]] | None = None
    # The one question each arm's verdict answers (Holm over the arms): steps_to_target, time_to_target (a comparison
    # clocked by seconds only) or mean_accuracy; null: steps to target when clocked by steps, else time to target.
    primary: str | None = None
    # Seeds added in batches until every primary verdict is resolved (`pods compare --until-resolved`):
    # {first: seeds at the first look, batch: seeds added at each look, max_seeds: the most}; null: one look.
    sequential: dict[str, int] | None = None
    # The learning curve the plan's power is simulated with, {base, plateau, spread} (accuracy before training, its
    # plateau, the spread of log time constants over seeds); null: `compare.power.DEFAULT_CURVE`. Changes no run.
    power_curve: dict[str, float] | None = None
    # Not settings: whether the arms are checked against this environment (vLLM installed, the process count,
    # TRL's config; a folder that is only read, by --report or --status, needs neither, nor TRL), and the target of a
    # folder started before `target_gain` (a fraction of the baseline's peak), which its report names.
    environment_checks: bool = field(default=True, repr=False)
    legacy_target: float | None = field(default=None, repr=False)

    @classmethod
    def from_dict(
        cls,
        data: dict[str, Any],
        *,
        where: str = "compare settings",
        environment_checks: bool = True,
        saved: bool = False,
    ) -> CompareSettings:
        """`saved`: the settings of an existing folder, which may hold the old `target` (a fraction of the
        baseline's peak): kept aside to be named in the report, not used."""
        data = dict(data)
        legacy = data.pop("target", None)
        if legacy is not None and not saved:
            raise ValueError(
                f"{where}: 'target' (a fraction of the baseline's peak) is replaced by 'target_gain', a fraction of "
                "the baseline's gain from its start to its plateau (e.g. target_gain: 0.75), or 'target_accuracy'."
            )
        names = [f.name for f in fields(cls) if f.name not in NOT_SETTINGS]
        values = {name: data[name] for name in names if name in data}
        required = [
            f.name
            for f in fields(cls)
            if f.name not in NOT_SETTINGS and f.default is MISSING and f.default_factory is MISSING
        ]
        missing = sorted(set(required) - set(values))
        if missing:
            raise ValueError(f"{where}: missing key(s) {missing}.")
        base = {k: v for k, v in data.items() if k not in names}
        settings = cls(base=base, **values, environment_checks=environment_checks, legacy_target=legacy)
        settings.check(where)
        return settings

    def check(self, where: str) -> None:
        if not (isinstance(self.n, int) and isinstance(self.m, int) and 2 <= self.m <= self.n):
            raise ValueError(f"{where}: need integers 2 <= m <= n, got n={self.n!r}, m={self.m!r}.")
        if not isinstance(self.prompts_per_step, int) or self.prompts_per_step < 1:
            raise ValueError(f"{where}: prompts_per_step must be a positive integer, got {self.prompts_per_step!r}.")
        if not self.seeds or not all(isinstance(s, int) for s in self.seeds):
            raise ValueError(f"{where}: seeds must be a non-empty list of integers, got {self.seeds!r}.")
        gains = self.target_gains
        if not isinstance(gains, list) or not all(_fraction(g) for g in [self.target_gain, *gains]):
            raise ValueError(
                f"{where}: target_gain and target_gains must be fractions of the baseline's gain in (0, 1], got "
                f"{self.target_gain!r} and {gains!r}."
            )
        if self.cost_models is not None:
            from pods_rl.compare.cost_model import StepCost

            StepCost.check_all(self.cost_models, where)
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
        self._check_clock(where)
        self._check_primary(where)
        self._check_sequential(where)
        self._check_power_curve(where)
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

    @property
    def primary_measure(self) -> str:
        """The measure each arm's verdict answers (`primary`, or the clock's default)."""
        if self.primary is not None:
            return self.primary
        return "steps_to_target" if self.clock == "steps" else "time_to_target"

    def _check_primary(self, where: str) -> None:
        allowed = PRIMARY_MEASURES if self.clock == "seconds" else ("steps_to_target", "mean_accuracy")
        if self.primary is not None and self.primary not in allowed:
            clocked = "" if self.clock == "seconds" else " (clocked by steps: seconds mix machines and are not tested)"
            raise ValueError(f"{where}: primary must be one of {list(allowed)} or null{clocked}, got {self.primary!r}.")

    def _check_sequential(self, where: str) -> None:
        plan = self.sequential
        if plan is None:
            return
        keys = {"first", "batch", "max_seeds"}
        if not isinstance(plan, dict) or set(plan) != keys or not all(_positive_int(plan[k]) for k in keys):
            raise ValueError(
                f"{where}: sequential must be null or {{first: F, batch: B, max_seeds: K}} with positive integers, "
                f"got {plan!r}."
            )
        if not plan["first"] <= plan["max_seeds"] or len(self.seeds) > plan["max_seeds"]:
            raise ValueError(
                f"{where}: sequential: the first look's {plan['first']} seeds and the {len(self.seeds)} seeds so far "
                f"must not exceed max_seeds {plan['max_seeds']}."
            )

    def _check_power_curve(self, where: str) -> None:
        curve = self.power_curve
        if curve is None:
            return
        keys = ("base", "plateau", "spread", "reaches")
        numbers = isinstance(curve, dict) and all(
            isinstance(curve.get(key, 0.5), (int, float)) and not isinstance(curve.get(key), bool) for key in keys
        )
        if not numbers or set(curve) - set(keys):
            raise ValueError(
                f"{where}: power_curve must be null or {{base, plateau, spread, reaches}} numbers, got {curve!r}."
            )
        base, plateau = curve.get("base", 0.4), curve.get("plateau", 0.8)
        if not 0 <= base < plateau <= 1 or curve.get("spread", 0.35) < 0:
            raise ValueError(f"{where}: power_curve needs 0 <= base < plateau <= 1 and spread >= 0, got {curve!r}.")
        if not 0 < curve.get("reaches", 0.9) < 1:
            raise ValueError(
                f"{where}: power_curve.reaches (the share of its gain the median baseline run makes by the end) must "
                f"be between 0 and 1, got {curve['reaches']!r}."
            )

    def planned_looks(self) -> list[int]:
        """Seeds per arm at each look: one look at the seeds, or the sequential plan's."""
        if self.sequential is None:
            return [len(self.seeds)]
        from pods_rl.compare.sequential import planned_looks

        plan = self.sequential
        return planned_looks(plan["first"], plan["batch"], plan["max_seeds"])

    def next_seeds(self, count: int) -> list[int]:
        """`count` seeds to add: the smallest non-negative integers that are neither seeds nor tuning seeds."""
        taken, added, candidate = {*self.seeds, *(self.tuning_seeds or [])}, [], 0
        while len(added) < count:
            if candidate not in taken:
                added.append(candidate)
            candidate += 1
        return added

    @property
    def clock(self) -> str:
        """What a run's budget, its evaluations and the window count: "seconds" of training (`time_budget`), or
        optimizer "steps" (`trainer.max_steps` with `time_budget: null`). Learning per step does not depend on the
        machine, so a comparison clocked by steps may be resumed on another CPU; its seconds are per machine."""
        return "seconds" if self.base.get("time_budget") is not None else "steps"

    def _check_clock(self, where: str) -> None:
        evaluation = self.base.get("eval") or {}
        if self.clock == "steps" and (evaluation.get("every_seconds") is not None or not evaluation.get("every_steps")):
            raise ValueError(
                f"{where}: a comparison clocked by steps (time_budget: null) evaluates every eval.every_steps steps "
                f"(e.g. every_steps: 5) with eval.every_seconds: null; got every_steps "
                f"{evaluation.get('every_steps')!r}, every_seconds {evaluation.get('every_seconds')!r}."
            )

    def arm_sizes(self, name: str) -> tuple[int, int, str]:
        """The arm's pool size n, trained size m and rule; 'n' and 'm' refer to the comparison's values."""
        arm = self.arms[name]
        sizes = {"n": self.n, "m": self.m}
        n, m = (sizes.get(value, value) for value in (arm.get("n", "n"), arm.get("m", "m")))
        return n, m, arm.get("rule", "max_variance")

    def asynchronous(self, name: str) -> bool:
        """Whether arm `name` trains asynchronously (`asynchronous` settings: generation beside the update)."""
        return merge(self.base, self.arms[name]).get("asynchronous") is not None

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


NOT_SETTINGS = ("base", "environment_checks", "legacy_target")  # CompareSettings fields compare.yaml does not hold


PRIMARY_MEASURES = ("steps_to_target", "time_to_target", "mean_accuracy")


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _fraction(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1


def _reject_derived(trainer: dict[str, Any], where: str, *, allow_batch: bool = False) -> None:
    derived = [k for k in DERIVED_TRAINER_KEYS if k in trainer and not (allow_batch and k.startswith("per_device"))]
    if derived:
        raise ValueError(
            f"{where}: trainer {derived} are set per arm from n, m, rule and prompts_per_step; use those instead."
        )


def resolve_compare(
    config_file: Path | None, overrides: list[dict[str, Any]], *, only: list[str] | None = None
) -> CompareSettings:
    """Built-in defaults, then the file, then command-line overrides. The file's `arms` replace the built-in arms;
    without them, the arms are those `only` names, else DEFAULT_ARMS and any arm the overrides define or change."""
    user = read_yaml(config_file) if config_file is not None else {}
    where = str(config_file) if config_file else "compare settings"
    file_arms = user.pop("arms", None)
    arms = file_arms or default_arms()
    for override in overrides:
        user = merge(user, override)
    overridden = user.pop("arms", {})
    arms = merge(arms, overridden)
    if "seed" in user:
        raise ValueError(f"{where}: use 'seeds: [...]' (every arm runs every seed), not 'seed'.")
    _reject_derived(user.get("trainer") or {}, where)
    data = merge(default_compare_settings(user.get("model", "tiny"), user.get("task", "arithmetic")), user)
    if data["time_budget"] is None and "max_steps" not in (user.get("trainer") or {}):
        raise ValueError(f"{where}: set time_budget (seconds of training per run) or trainer.max_steps.")
    if data["time_budget"] is None and "every_seconds" not in (user.get("eval") or {}):
        data["eval"]["every_seconds"] = None  # clocked by steps: the built-in evaluation grid in seconds goes too
    if only:
        unknown = sorted(set(only) - set(arms))
        if unknown:
            raise ValueError(f"Unknown arm(s) {unknown}; the arms are {list(arms)}.")
        arms = {name: spec for name, spec in arms.items() if name in only}
    elif not file_arms:
        arms = {name: spec for name, spec in arms.items() if name in DEFAULT_ARMS or name in overridden}
    return CompareSettings.from_dict({**data, "arms": arms}, where=where)


def default_compare_dir(settings: CompareSettings) -> Path:
    model = Path(settings.base["model"]).name
    return Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-compare-{settings.base['task']}-{model}".replace(":", "_")


SEED_BATCH = 2  # seeds a sequential comparison adds at each look, unless --seed-batch says


def with_sequential_plan(settings: CompareSettings, max_seeds: int | None, batch: int | None) -> CompareSettings:
    """`settings` made sequential (`pods compare --until-resolved`): the first look at its seeds, then `batch` more
    at each look (default SEED_BATCH), up to `max_seeds` (default twice the seeds)."""
    plan = {
        "first": len(settings.seeds),
        "batch": SEED_BATCH if batch is None else batch,
        "max_seeds": 2 * len(settings.seeds) if max_seeds is None else max_seeds,
    }
    sequential = replace(settings, sequential=plan)
    sequential.check("--until-resolved")
    return sequential


GROWABLE = ("lr_grid", "tuning_seeds", "seeds")
FREE_ON_RESUME = ("cost_models", "power_curve")  # change no run


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
        if key.split(".")[0] not in FREE_ON_RESUME
        and (key not in GROWABLE or not isinstance(old, list) or not set(old) <= set(new or []))
    ]
    if saved.sequential is not None and "seeds" in changes:
        refused.append("seeds (a sequential comparison adds its own seeds at its looks)")
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
    return CompareSettings.from_dict(
        read_yaml(path), where=str(path), environment_checks=option == "--resume", saved=True
    )
