"""The measures of a comparison: from each arm's per-seed records to the numbers comparison.json holds.

The statistics themselves are in `pods_rl.compare.statistics`; this module decides which curves they see (each
seed's evaluations on the comparison's metric, against training seconds and against optimizer steps), the target
and the targets every speedup is also read at, the family of tests and their Holm adjustment, the verdicts, the step
costs and their projections onto other machines, and the warnings. Definitions (also in comparison.json):
`DEFINITIONS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pods_rl.compare.cost_model import PHASES, REFERENCE_COSTS, CostModel, StepCost, when_pods_pays
from pods_rl.compare.curve_fit import FIT_METHOD, fit_speedup
from pods_rl.compare.sequential import SPENDING, nominal_levels
from pods_rl.compare.sequential import decide as sequential_decide
from pods_rl.compare.statistics import (
    ALPHA,
    CLOCK_AXES,
    LEVEL,
    PLATEAU_SHARE,
    SPEEDUP_METHOD,
    WIDE_BRACKET,
    Curve,
    Target,
    band,
    comparison_target,
    gain_target,
    holm,
    least_adjusted_p_value,
    resolution_warnings,
    seed_speedup,
    seeds_to_resolve,
    speedup_test,
    time_to_target,
    window_difference,
    window_differences,
)
from pods_rl.compare.tuning import tuning_warnings
from pods_rl.machine import machine_label

if TYPE_CHECKING:
    from pods_rl.compare.settings import CompareSettings

COUNTS = ("rollouts_generated", "rollouts_trained", "tokens_generated", "tokens_trained")
# What dynamic sampling's refills did, per step (logged by arms with `dynamic_sampling` only).
REFILLS = ("generation_rounds", "prompts_generated", "groups_dropped_frac")
PEAK = "the mean over seeds of each seed's highest evaluation"
MEASURES = ("time_to_target", "steps_to_target", "mean_accuracy")  # the tests of each arm against the baseline
# A comparison clocked by steps tests what does not depend on the machine; its times to target are reported (seconds
# of whichever machines ran it) and projected onto each machine's cost per step, not tested.
STEP_CLOCK_MEASURES = ("steps_to_target", "mean_accuracy")
NOT_TESTED = "not tested"


def family_measures(clock: str) -> tuple[str, ...]:
    """The measures tested against the baseline under `clock` ("seconds" or "steps")."""
    return MEASURES if clock == "seconds" else STEP_CLOCK_MEASURES


VERDICTS = {"time_to_target": ("faster", "slower"), "steps_to_target": ("faster", "slower")}
VERDICTS["mean_accuracy"] = ("higher", "lower")
NOT_RESOLVED = "not resolved"
Records = dict[str, list[dict[str, Any]]]  # arm -> per seed {"step": [...], "eval": [...], "machine": {...} | None}
STEP_MEASURES = (
    "steps",
    "seconds_per_step",
    "seconds_per_step_by_machine",
    "per_step",
    "rollouts_per_trained_row",
    "dynamic_sampling",
    "totals",
)


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


def _interim_warnings(seeds: list[int], seeds_left: list[int]) -> list[str]:
    if not seeds_left:
        return []
    return [
        f"Interim report: {len(seeds)} of the {len(seeds) + len(seeds_left)} planned seeds finished every arm "
        f"({_seed_list(seeds)}); {_seed_list(seeds_left)} {'is' if len(seeds_left) == 1 else 'are'} left, and every "
        "figure across seeds may move when they have run."
    ]


def _seed_list(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def run_machine(run: dict[str, Any]) -> str:
    """The machine a run ran on (`machine_label`; a record rebuilt from comparison.json carries the label)."""
    return run.get("machine_label") or machine_label(run.get("machine"))


def machine_counts(records: Records) -> dict[str, int]:
    """How many of the runs ran on each machine."""
    return dict(Counter(run_machine(run) for runs in records.values() for run in runs))


def _evaluation_seconds(runs: list[dict[str, list[dict]]]) -> float | None:
    """Mean wall seconds of one evaluation over every seed's evaluations (None for records that predate it)."""
    seconds = [e["eval_seconds"] for run in runs for e in run["eval"] if "eval_seconds" in e]
    return float(np.mean(seconds)) if seconds else None


def _refills(steps: list[dict]) -> dict[str, float] | None:
    """Mean over steps of what dynamic sampling's rounds did, or None for an arm without it."""
    if not any(f"pods/{name}" in step for step in steps for name in REFILLS):
        return None
    return {name: float(np.mean([step[f"pods/{name}"] for step in steps])) for name in REFILLS}


def _machine_warnings(settings: CompareSettings, records: Records) -> list[str]:
    """Seeds whose arms ran on different machines (their speedup divides seconds of two CPUs), else a note when the
    seeds did (each seed's speedup holds; pooled seconds, such as seconds per step, mix CPUs). A comparison clocked
    by steps tests nothing in seconds: one note when its runs ran on several machines."""
    machines = machine_counts(records)
    listing = "; ".join(f"{label}: {count} runs" for label, count in machines.items())
    if settings.clock == "steps":
        if len(machines) < 2:
            return []
        return [
            f"The runs ran on {len(machines)} machines ({listing}). The comparison is clocked by steps, so its tests "
            "(steps to target, the window mean over steps) hold across them; its times to target in seconds mix "
            "those CPUs and are not tested: read the projections, one per machine that ran both arms."
        ]
    labels = {name: [run_machine(run) for run in runs] for name, runs in records.items()}
    mixed = []
    for index, seed in enumerate(settings.seeds):
        seed_machines = sorted({arm_labels[index] for arm_labels in labels.values()})
        if len(seed_machines) > 1:
            mixed.append(f"seed {seed} ({'; '.join(seed_machines)})")
    if mixed:
        return [
            f"The arms of {', '.join(mixed)} ran on different machines: those seeds' times and speedups compare "
            "seconds from different CPUs. Rerun them on one machine."
        ]
    if len(machines) > 1:
        return [
            f"The seeds ran on {len(machines)} machines ({listing}); "
            "each seed's arms share one, so per-seed speedups hold, but pooled seconds (per step, per evaluation, "
            "the curves' time axis) mix CPUs."
        ]
    return []


def curves_of(runs: list[dict[str, Any]], metric: str, axis: str) -> list[Curve]:
    """Each run's evaluations against `axis`: "train_seconds" or "step"."""
    return [([e[axis] for e in run["eval"]], [e[metric] for e in run["eval"]]) for run in runs]


def choose_target(settings: CompareSettings, curves: dict[str, list[Curve]]) -> Target | None:
    """`target_accuracy` when set, else `target_gain` of the baseline's gain, or of the best other arm's where the
    baseline gained nothing (`statistics.comparison_target`); None without a baseline or any gain."""
    baseline = curves.get(settings.baseline)
    if baseline is None:
        return None
    others = {name: arm_curves for name, arm_curves in curves.items() if name != settings.baseline}
    reference = comparison_target(baseline, others, settings.target_gain)
    if settings.target_accuracy is not None:
        base, plateau = (None, None) if reference is None else (reference.base, reference.plateau)
        return Target(float(settings.target_accuracy), None, base, plateau)
    return reference


def reported_targets(settings: CompareSettings, curves: dict[str, list[Curve]], primary: Target) -> list[Target]:
    """The targets every speedup is also read at: `target_gains` of the same gain as the primary target's (the
    baseline's, or the arm's it names), and the primary one."""
    source = curves[primary.of or settings.baseline]
    targets = []
    for fraction in sorted(set(settings.target_gains)):
        target = gain_target(source, fraction)
        if target is not None and primary.of is not None:  # the arm's gain, from the baseline's start
            base = primary.base if primary.base is not None else target.base
            target = Target(base + fraction * (target.plateau - base), fraction, base, target.plateau, primary.of)
        targets.append(target)
    targets = [t for t in targets if t is not None and t.fraction != primary.fraction]
    return sorted([*targets, primary], key=lambda t: t.accuracy)


def arm_versus(
    baseline: dict[str, list[Curve]],
    arm: dict[str, list[Curve]],
    target: Target | None,
    targets: list[Target],
    clock: str = "seconds",
) -> dict[str, Any]:
    """One arm against the baseline (`baseline` and `arm`: curves against "seconds" and against "steps", seed by
    seed): the window-mean difference over the `clock` axis, always; with a target, times and steps to it per seed
    and over seeds (by the permutation test, and by curve fits as a second method), and the same at every one of
    `targets`."""
    difference, paired = window_difference(baseline[clock], arm[clock])
    windows, differences = window_differences(baseline[clock], arm[clock])
    versus: dict[str, Any] = {
        "mean_accuracy_difference": asdict(difference),
        "mean_accuracy_test": paired,
        "mean_accuracy_window": windows,
        "mean_accuracy_difference_per_seed": differences,
    }
    if target is None:
        return {**versus, **dict.fromkeys(SPEEDUP_KEYS)}
    accuracy = target.accuracy
    per_seed = {
        axis: [
            seed_speedup(time_to_target(*b, accuracy), time_to_target(*a, accuracy))
            for b, a in zip(baseline[axis], arm[axis], strict=False)
        ]
        for axis in ("seconds", "steps")
    }
    by_target = []
    for other in targets:
        row = {"fraction": other.fraction, "accuracy": other.accuracy}
        for axis, key in (("seconds", "time_to_target"), ("steps", "steps_to_target")):
            result = speedup_test(baseline[axis], arm[axis], other.accuracy)
            row[key] = asdict(result)
        by_target.append(row)
    primary = next(row for row in by_target if row["accuracy"] == accuracy)
    return {
        **versus,
        "time_to_target": primary["time_to_target"],
        "steps_to_target": primary["steps_to_target"],
        "time_to_target_fit": asdict(fit_speedup(baseline["seconds"], arm["seconds"], accuracy)),
        "steps_to_target_fit": asdict(fit_speedup(baseline["steps"], arm["steps"], accuracy)),
        "speedup_per_seed": [asdict(s) for s in per_seed["seconds"]],
        "steps_speedup_per_seed": [asdict(s) for s in per_seed["steps"]],
        "seed_verdicts": dict(Counter(s.verdict for s in per_seed["seconds"])),
        "by_target": by_target,
        "sign_across_targets": {key: _sign_across(by_target, key) for key in ("time_to_target", "steps_to_target")},
    }


# What `arm_versus` leaves None without a target.
SPEEDUP_KEYS = (
    "time_to_target",
    "steps_to_target",
    "time_to_target_fit",
    "steps_to_target_fit",
    "speedup_per_seed",
    "steps_speedup_per_seed",
    "seed_verdicts",
    "by_target",
    "sign_across_targets",
)


def _sign_across(by_target: list[dict[str, Any]], key: str) -> str:
    """ "faster" or "slower" when the test's sign is that at every target, else "changes"."""
    directions = {row[key]["direction"] for row in by_target}
    return directions.pop() if len(directions) == 1 and directions != {"tie"} else "changes"


def figure_of(versus: dict[str, Any], measure: str) -> dict[str, Any] | None:
    """The figure a measure's test gives: a speedup (`Speedup` as a dict) or the window-mean difference."""
    return versus["mean_accuracy_difference" if measure == "mean_accuracy" else measure]


def test_result(versus: dict[str, Any], measure: str) -> tuple[int, float | None]:
    """(sign, p-value) of one measure's test: +1 when the arm is faster (higher), -1 slower (lower), 0 no lean; the
    p-value None when it was not tested (no target, no spread)."""
    figure = figure_of(versus, measure)
    if figure is None:
        return 0, None
    if measure == "mean_accuracy":
        return int(np.sign(figure["estimate"])), figure["p_value"]
    return {"faster": 1, "slower": -1}.get(figure["direction"], 0), figure["p_value"]


def decide(
    versus: dict[str, dict[str, Any]],
    clock: str = "seconds",
    primary: str | None = None,
    earlier: list[list[tuple[int, float | None]]] | None = None,
    looks: list[int] | None = None,
    max_seeds: int | None = None,
) -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """Verdicts of every arm against the baseline ({arm: {measure: word}}) and the family's description.

    The family asks each question once: the `primary` measure of every arm (default: steps to target when clocked
    by steps, else time to target), Holm-adjusted over the arms (`sequential.decide`: with `looks`, at every look of
    a sequential design, `earlier` holding the primary (sign, p) of each arm at the looks before this one). A
    primary verdict needs the adjusted test at s = 1 (or 0) at the level, its side the sign of the statistic there.
    The other tested measures are secondary: their verdict is their own test at the level, unadjusted, and labelled
    so. The roles, the adjusted p-values (primary only) and the verdicts are written into `versus`."""
    primary = primary or default_primary(clock)
    tested = family_measures(clock)
    names = list(versus)
    current = [test_result(versus[name], primary) for name in names]
    looks = looks or [len_seeds(versus)]
    sequential = max_seeds is not None
    results = [*(earlier or []), current]
    decisions = sequential_decide(results, looks[: len(results)], max_seeds or looks[-1])
    adjusted = holm([p for _, p in current])
    verdicts: dict[str, dict[str, str]] = {name: {} for name in names}
    for index, name in enumerate(names):
        figure = versus[name]
        roles, adjusted_p, words = {}, {}, {}
        for measure in MEASURES:
            up, down = VERDICTS[measure]
            if measure not in tested:
                roles[measure], adjusted_p[measure], words[measure] = NOT_TESTED, None, NOT_TESTED
                continue
            sign, p_value = test_result(figure, measure)
            if measure == primary:
                roles[measure] = "primary"
                adjusted_p[measure] = None if sequential else adjusted[index]
                decision = decisions[index]
                resolved = decision is not None
                sign = decision[1] if decision is not None else sign
            else:
                roles[measure] = "secondary"
                adjusted_p[measure] = None
                resolved = p_value is not None and p_value <= ALPHA and sign != 0
            words[measure] = NOT_RESOLVED if p_value is None or not resolved else up if sign > 0 else down
        figure["roles"], figure["adjusted_p_values"], figure["verdicts"] = roles, adjusted_p, words
        if sequential:
            figure["resolved_at_look"] = None if decisions[index] is None else looks[decisions[index][0]]
        verdicts[name] = words
    family = {
        "primary": primary,
        "tests": sum(p is not None for _, p in current),
        "measures": [primary],
        "secondary": [measure for measure in tested if measure != primary],
        "adjustment": f"Holm at each look, {SPENDING} alpha spending" if sequential else "Holm",
        "level": LEVEL,
        "members": [f"{name}: {primary}" for name in names],
    }
    if sequential:
        family["looks"] = looks
        family["max_seeds"] = max_seeds
        family["levels"] = nominal_levels(looks, max_seeds)
    return verdicts, family


def default_primary(clock: str) -> str:
    """The primary measure when the settings name none: steps to target when clocked by steps, else time."""
    return "steps_to_target" if clock == "steps" else "time_to_target"


def len_seeds(versus: dict[str, dict[str, Any]]) -> int:
    """Seeds of the comparison (from any arm's window differences)."""
    return max((len(figure["mean_accuracy_difference_per_seed"]) for figure in versus.values()), default=0)


def step_measures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What each arm's step records give (`STEP_MEASURES`): steps per run, seconds per step by phase, rollouts and
    tokens per step and per run, and dynamic sampling's refills."""
    steps = [step for run in runs for step in run["step"]]
    seconds = {phase: float(np.mean([s[f"pods/time_{phase}"] for s in steps])) for phase in PHASES}
    seconds["total"] = sum(seconds.values())
    per_step = {c: float(np.mean([s[f"pods/{c}"] for s in steps])) for c in COUNTS}
    by_machine: dict[str, list[float]] = {}
    for run in runs:
        by_machine.setdefault(run_machine(run), []).extend(
            sum(step[f"pods/time_{phase}"] for phase in PHASES) for step in run["step"]
        )
    return {
        "steps": spread([len(run["step"]) for run in runs]),
        "seconds_per_step": seconds,
        "seconds_per_step_by_machine": {label: float(np.mean(s)) for label, s in by_machine.items() if s},
        "per_step": per_step,
        "rollouts_per_trained_row": per_step["rollouts_generated"] / per_step["rollouts_trained"],
        "dynamic_sampling": _refills(steps),
        "totals": {c: float(np.mean([sum(s[f"pods/{c}"] for s in run["step"]) for run in runs])) for c in COUNTS},
    }


def projections(
    arms: dict[str, dict[str, Any]],
    baseline: str,
    cost_model: CostModel,
    cost_models: list[StepCost],
    asynchronous: set[str] = frozenset(),
) -> None:
    """Each arm's steps-to-target speedup turned into a time-to-target speedup by a step cost: the measured seconds
    per step (on each machine that ran both arms, when the runs ran on several), the fitted cost model, and
    `cost_models` (the built-in references and the user's).
    The projection is the steps speedup x the baseline's step cost / the arm's; its interval the steps interval's,
    scaled the same (the cost taken as known). Written into each arm's "vs_baseline". The fitted and reference
    costs are of a synchronous step (generation, then the update): an arm in `asynchronous`, or a baseline there,
    gets the measured cost alone (the others None: not projected)."""
    base = arms[baseline]
    base_generated, base_trained = base["per_step"]["rollouts_generated"], base["per_step"]["rollouts_trained"]
    base_machines = base.get("seconds_per_step_by_machine") or {}
    for arm_name, arm in arms.items():
        versus = arm["vs_baseline"]
        if versus is None or versus["steps_to_target"] is None:
            continue
        generated, trained = arm["per_step"]["rollouts_generated"], arm["per_step"]["rollouts_trained"]
        arm_machines = arm.get("seconds_per_step_by_machine") or {}
        if len(base_machines.keys() | arm_machines.keys()) > 1:
            costs = {
                f"measured on {label}": (
                    f"mean seconds per step of the runs on {label}",
                    arm_machines.get(label),
                    base_machines.get(label),
                )
                for label in sorted(base_machines.keys() | arm_machines.keys())
            }
        else:
            costs = {
                "this machine, measured": (
                    "mean seconds per step of these runs",
                    arm["seconds_per_step"]["total"],
                    base["seconds_per_step"]["total"],
                )
            }
        synchronous_costs = {
            "this machine, fitted": (
                "this comparison's cost model",
                cost_model.step_seconds(generated, trained),
                cost_model.step_seconds(base_generated, base_trained),
            ),
        }
        for cost in cost_models:
            synchronous_costs[cost.name] = (
                cost.source,
                cost.step_seconds(generated, trained, base_trained),
                cost.step_seconds(base_generated, base_trained, base_trained),
            )
        if asynchronous & {baseline, arm_name}:
            why = "not projected: an asynchronous step overlaps generation and the update"
            synchronous_costs = {key: (why, None, None) for key in synchronous_costs}
        costs |= synchronous_costs
        steps = versus["steps_to_target"]
        rows = {}
        for name, (source, arm_seconds, base_seconds) in costs.items():
            if arm_seconds is None or base_seconds is None or arm_seconds <= 0 or base_seconds <= 0:
                rows[name] = {"source": source, "step_cost_ratio": None, "estimate": None, "low": None, "high": None}
                continue
            ratio = arm_seconds / base_seconds

            def scaled(value: float | None, ratio: float = ratio) -> float | None:
                return None if value is None else value / ratio

            rows[name] = {
                "source": source,
                "step_cost_ratio": ratio,
                "estimate": scaled(steps["estimate"]),
                "low": scaled(steps["low"]),
                "high": scaled(steps["high"]),
            }
        versus["projections"] = rows


def summarize(
    settings: CompareSettings,
    records: Records,
    learning_rates: dict[str, Any] | None = None,
    *,
    planned_seeds: list[int] | None = None,
    saved_steps: dict[str, dict[str, Any]] | None = None,
    saved_cost_model: CostModel | None = None,
) -> dict[str, Any]:
    """The comparison of `records` run with `settings`: everything comparison.json holds. `learning_rates`: the
    tuning's choice (`tuning.choose_learning_rates`), when the arms' rates were tuned. `planned_seeds`: the
    comparison's seeds when `records` hold only the finished ones (`settings.seeds`), for an interim report that says
    so. `saved_steps` and `saved_cost_model`: each arm's `STEP_MEASURES` and the cost model, for records without
    step logs (a report rewritten from comparison.json)."""
    metric = settings.metric
    clock = settings.clock
    seconds = {name: curves_of(runs, metric, CLOCK_AXES["seconds"]) for name, runs in records.items()}
    steps = {name: curves_of(runs, metric, CLOCK_AXES["steps"]) for name, runs in records.items()}
    clocked = seconds if clock == "seconds" else steps  # the axis of the budget, the window and the target's plateau
    baseline = settings.baseline
    target = choose_target(settings, clocked)
    targets = [] if target is None else reported_targets(settings, clocked, target)
    if saved_steps is None:
        saved_steps = {name: step_measures(runs) for name, runs in records.items()}
    # The cost model is a synchronous step's (generate, then update): fit on the synchronous arms where there are any.
    asynchronous = {name for name in records if settings.asynchronous(name)}
    synchronous = [name for name in records if name not in asynchronous] or list(records)
    cost_model = saved_cost_model or CostModel.fit(
        [step for name in synchronous for run in records[name] for step in run["step"]]
    )
    arms = {}
    for name, runs in records.items():
        n, m, rule = settings.arm_sizes(name)
        measured = saved_steps[name]
        versus = None
        if baseline in records and name != baseline:
            versus = arm_versus(
                {"seconds": seconds[baseline], "steps": steps[baseline]},
                {"seconds": seconds[name], "steps": steps[name]},
                target,
                targets,
                clock,
            )
        arms[name] = {
            "n": n,
            "m": m,
            "rule": rule,
            "runs": [f"{name}/seed-{seed}" for seed in settings.seeds],
            "evaluations": [run["eval"] for run in runs],
            "peak_accuracy": spread([max(values) for _, values in seconds[name]]),
            "final_accuracy": spread([values[-1] for _, values in seconds[name]]),
            **{key: measured[key] for key in STEP_MEASURES},
            "train_seconds": spread([times[-1] for times, _ in seconds[name]]),
            "time_to_target": None
            if target is None
            else [asdict(time_to_target(*c, target.accuracy)) for c in seconds[name]],
            "steps_to_target": None
            if target is None
            else [asdict(time_to_target(*c, target.accuracy)) for c in steps[name]],
            "vs_baseline": versus,
            "seconds_per_evaluation": _evaluation_seconds(runs),
            "predicted_seconds_per_step": cost_model.step_seconds(
                measured["per_step"]["rollouts_generated"], measured["per_step"]["rollouts_trained"]
            ),
            "curve": band(clocked[name], CLOCK_AXES[clock]),
        }
    compared = {name: arm["vs_baseline"] for name, arm in arms.items() if arm["vs_baseline"] is not None}
    looks, earlier = _looks(settings, seconds, steps, planned_seeds)
    verdicts, family = decide(compared, clock, settings.primary_measure, earlier, looks, _max_seeds(settings))
    cost_models = [*REFERENCE_COSTS, *StepCost.check_all(settings.cost_models or [], "cost_models")]
    if compared:
        projections(arms, baseline, cost_model, cost_models, asynchronous)
    seeds_left = [seed for seed in planned_seeds or [] if seed not in settings.seeds]
    return {
        "settings": settings.to_dict(),
        "metric": metric,
        "clock": clock,
        "target": None if target is None else {**asdict(target), "baseline": baseline},
        "targets": [asdict(t) for t in targets],
        "method": {
            "speedup": SPEEDUP_METHOD,
            "speedup_fit": FIT_METHOD,
            "mean_accuracy": f"paired Student-t on the per-seed window-mean differences, {LEVEL:.0%} interval "
            "(Welch's t on each run's window mean where the arms' seed counts differ)",
            "family": family,
        },
        "verdicts": verdicts,
        "arms": arms,
        "learning_rates": learning_rates,
        "machines": machine_counts(records),
        "summary": summary_lines(baseline, arms, target, family),
        "cost_model": {
            "phases": cost_model.to_dict(),
            "when_pods_pays": when_pods_pays(cost_model, settings.n, settings.m, settings.prompts_per_step),
            "references": [asdict(cost) for cost in cost_models],
        },
        "seeds_left": seeds_left,
        "warnings": _interim_warnings(settings.seeds, seeds_left)
        + _legacy_warnings(settings)
        + tuning_warnings(learning_rates)
        + _warnings(settings, records, clocked, target, compared),
        "definitions": DEFINITIONS,
    }


def _max_seeds(settings: CompareSettings) -> int | None:
    return None if settings.sequential is None else settings.sequential["max_seeds"]


def _looks(
    settings: CompareSettings,
    seconds: dict[str, list[Curve]],
    steps: dict[str, list[Curve]],
    planned_seeds: list[int] | None,
) -> tuple[list[int], list[list[tuple[int, float | None]]]]:
    """The looks of a sequential comparison that `settings.seeds` (the finished ones) reach, and each earlier look's
    primary (sign, p-value) per arm, computed on its first seeds as the report at that look computed them; a
    comparison of one look: ([its seeds], [])."""
    seeds = len(settings.seeds)
    if settings.sequential is None:
        return [seeds], []
    looks = [look for look in settings.planned_looks() if look <= seeds]
    if not looks:
        return [seeds], []
    earlier = []
    for look in looks[:-1]:
        first = replace(settings, seeds=settings.seeds[:look])
        at_look = {name: curves[:look] for name, curves in seconds.items()}
        steps_at_look = {name: curves[:look] for name, curves in steps.items()}
        clocked = at_look if settings.clock == "seconds" else steps_at_look
        target = choose_target(first, clocked)
        row = []
        for name in seconds:
            if name == settings.baseline:
                continue
            versus = arm_versus(
                {"seconds": at_look[settings.baseline], "steps": steps_at_look[settings.baseline]},
                {"seconds": at_look[name], "steps": steps_at_look[name]},
                target,
                [] if target is None else [target],
                settings.clock,
            )
            row.append(test_result(versus, settings.primary_measure))
        earlier.append(row)
    return looks, earlier


def _legacy_warnings(settings: CompareSettings) -> list[str]:
    if settings.legacy_target is None:
        return []
    rule = (
        f"target_accuracy {settings.target_accuracy:g}"
        if settings.target_accuracy is not None
        else f"{settings.target_gain:.0%} of the baseline's gain (target_gain, the default)"
    )
    return [
        f"compare.yaml sets 'target: {settings.legacy_target:g}', the rule this folder was started with ("
        f"{settings.legacy_target:g} x the mean over the baseline's seeds of each seed's highest evaluation, a target "
        f"that evaluation noise sets); it is not used: this report's target is {rule}."
    ]


# ---------------------------------------------------------------- words


def ratio_text(value: float | None, *, low: bool = False) -> str:
    """'1.25'; '0' for a lower end at 0 (no bound); '∞' for an unbounded upper end; '-' for no estimate."""
    if value is None:
        return "-" if low else "∞"
    if value == 0:
        return "0"
    return f"{value:.2f}" if 0.01 <= value < 1000 else f"{value:.2g}"


def speedup_text(figure: dict[str, Any]) -> str:
    """'1.25x (95% interval 0.80-2.10x)', and the other speedups the test accepts where its accepted set has holes
    ('...; also accepted: 0.40-0.55x'); the estimate '-' when the data bound it on one side only."""
    estimate = "-" if figure["estimate"] is None else f"{ratio_text(figure['estimate'])}x"
    if figure["low"] is None:
        return f"{estimate} (no {LEVEL:.0%} interval: every speedup is rejected)"
    others = other_pieces(figure)
    also = f"; also accepted: {', '.join(piece_text(piece) for piece in others)}" if others else ""
    return f"{estimate} ({LEVEL:.0%} interval {piece_text((figure['low'], figure['high']))}{also})"


def piece_text(piece: Sequence[float | None]) -> str:
    """'0.80-2.10x'."""
    return f"{ratio_text(piece[0])}-{ratio_text(piece[1])}x"


def other_pieces(figure: dict[str, Any]) -> list[Sequence[float | None]]:
    """The pieces of a speedup's accepted set besides its interval (the piece holding the estimate): together they
    are the 95% confidence set, whose coverage the simulation checks (docs/comparing.md)."""
    chosen = (figure["low"], figure["high"])
    return [piece for piece in figure.get("accepted") or [] if tuple(piece) != chosen]


def difference_text(figure: dict[str, Any]) -> str:
    """'+4.5 points (-4.0 to +13.0)'."""
    text = f"{100 * figure['estimate']:+.1f} points"
    if figure["low"] is None:
        return text + (" (no interval from one seed)" if figure["seeds"] < 2 else " (no interval: every seed the same)")
    return text + f" ({100 * figure['low']:+.1f} to {100 * figure['high']:+.1f})"


def p_text(p_value: float | None) -> str:
    return "-" if p_value is None else f"{p_value:.3f}" if p_value >= 0.001 else "<0.001"


def comparison_clock(comparison: dict[str, Any]) -> str:
    """ "seconds" or "steps": what the comparison's budget, window and per-seed speedups count (older folders:
    seconds)."""
    return comparison.get("clock", "seconds")


def verdict_text(versus: dict[str, Any], measure: str) -> str:
    """A measure's verdict with what it rests on: 'faster (primary, Holm p 0.012)', 'not resolved (primary, at the
    looks of 6 and 8 seeds)', 'higher (secondary, p 0.031 unadjusted)' or 'not tested'."""
    word = versus["verdicts"][measure]
    role = (versus.get("roles") or {}).get(measure, "primary")
    if word == NOT_TESTED or role == NOT_TESTED:
        return NOT_TESTED
    bound = f"; {bound_text(figure_of(versus, measure), measure)}" if word == NOT_RESOLVED else ""
    if role == "secondary":
        _, p_value = test_result(versus, measure)
        return f"{word} (secondary, p {p_text(p_value)} unadjusted{bound})"
    if "resolved_at_look" in versus:
        look = versus["resolved_at_look"]
        where = "sequential: at no look" if look is None else f"at the look of {look} seeds"
        return f"{word} (primary, {where}{bound})"
    return f"{word} (primary, Holm p {p_text(versus['adjusted_p_values'][measure])}{bound})"


def bound_text(figure: dict[str, Any] | None, measure: str) -> str:
    """What an unresolved measure's 95% interval still bounds: 'the interval bounds it within 0.80-1.25x', 'within
    -3.0 to +4.5 points', or that it bounds it on one side only or not at all."""
    if figure is None or figure["low"] is None:
        return "no interval, no bound"
    if measure == "mean_accuracy":
        return f"the interval bounds it within {100 * figure['low']:+.1f} to {100 * figure['high']:+.1f} points"
    pieces = [figure["low"], figure["high"]], *other_pieces(figure)  # the hull of the 95% confidence set
    low = min(piece[0] or 0.0 for piece in pieces)
    high = None if any(piece[1] is None for piece in pieces) else max(piece[1] for piece in pieces)
    if high is None:
        return (
            "the interval bounds it on neither side" if not low else f"bounded below only: at least {ratio_text(low)}x"
        )
    if not low:
        return f"bounded above only: at most {ratio_text(high)}x"
    return f"the interval bounds it within {piece_text((low, high))}"


def target_text(target: dict[str, Any] | Target, baseline: str) -> str:
    """'75% of grpo's gain (42.5% -> 90.1%): 78.2%', '75% of pods's gain from grpo's start (...)' (the baseline
    gained nothing) or '78.2% (absolute)'."""
    target = target if isinstance(target, dict) else asdict(target)
    if target["fraction"] is None:
        return f"{100 * target['accuracy']:.1f}% (absolute)"
    whose = f"{baseline}'s gain" if not target.get("of") else f"{target['of']}'s gain from {baseline}'s start"
    return (
        f"{target['fraction']:.0%} of {whose} ({100 * target['base']:.1f}% -> "
        f"{100 * target['plateau']:.1f}%): {100 * target['accuracy']:.1f}%"
    )


def summary_lines(baseline: str, arms: dict[str, Any], target: Target | None, family: dict[str, Any]) -> list[str]:
    """One line per arm against the baseline: time and steps to target, whether the sign holds at every reported
    target, the curve fits' speedup, the window mean, each with its verdict; then the family."""
    lines = []
    for name, arm in arms.items():
        versus = arm["vs_baseline"]
        if versus is None:
            continue
        window = (
            f"mean accuracy over the window{' of steps' if versus['verdicts']['time_to_target'] == NOT_TESTED else ''} "
            f"{difference_text(versus['mean_accuracy_difference'])}: {verdict_text(versus, 'mean_accuracy')}"
        )
        if versus["time_to_target"] is None:
            lines.append(f"{name} vs {baseline}: no target (no arm gained), no times to target; {window}")
            continue
        time, steps = versus["time_to_target"], versus["steps_to_target"]
        seeds = time["seeds"]
        reached = (
            f"reached by {time['reached']['arm']} of {seeds} {name} and {time['reached']['baseline']} of {seeds} "
            f"{baseline} runs"
        )
        signs = versus["sign_across_targets"]
        fractions = "/".join(f"{row['fraction']:.0%}" if row["fraction"] else "abs" for row in versus["by_target"])
        by_steps = versus["verdicts"]["time_to_target"] == NOT_TESTED
        lead = "steps_to_target" if by_steps else "time_to_target"
        across = (
            f"{signs[lead]} at every target ({fractions} of the gain)"
            if signs[lead] != "changes"
            else f"its sign changes across the targets ({fractions} of the gain)"
        )
        fit = f"by curve fits {speedup_text(versus[lead + '_fit'])}"
        if by_steps:
            lines.append(
                f"{name} vs {baseline}: steps to target {speedup_text(steps)}, {reached}: "
                f"{verdict_text(versus, 'steps_to_target')}; {across}; {fit}; {window}; time to target in measured "
                f"seconds {speedup_text(time)} (not tested: see the projections per machine)"
            )
            continue
        lines.append(
            f"{name} vs {baseline}: time to target {speedup_text(time)}, {reached}: "
            f"{verdict_text(versus, 'time_to_target')}; {across}; {fit}; in steps {speedup_text(steps)}: "
            f"{verdict_text(versus, 'steps_to_target')}; {window}"
        )
    if lines:
        lines.append((f"Target: {target_text(target, baseline)}. " if target is not None else "") + family_text(family))
    return lines


def family_text(family: dict[str, Any]) -> str:
    """The family in words: which question is primary, how it is adjusted, what is secondary."""
    primary = family.get("primary") or family["measures"][0]
    arms = len(family["members"])
    if "looks" in family:
        looks = ", ".join(map(str, family["looks"]))
        adjustment = (
            f"resolved at the first look whose test reaches the {family['adjustment']} boundary (looks at {looks} "
            f"seeds of at most {family['max_seeds']}; error rate {1 - LEVEL:.0%} over all looks)"
        )
    else:
        adjustment = f"at the {1 - LEVEL:.0%} level after Holm's adjustment over the {arms} arm(s)' primary tests"
    secondary = family.get("secondary")
    rest = (
        f"; {_measure_names(secondary)} {'is' if len(secondary) == 1 else 'are'} secondary, each at {1 - LEVEL:.0%} "
        "unadjusted"
        if secondary
        else ""
    )
    return (
        f"Verdicts: one primary question per arm, {primary.replace('_', ' ')}, {adjustment}{rest}; the intervals are "
        f"{LEVEL:.0%} per comparison, unadjusted."
    )


def _measure_names(measures: list[str]) -> str:
    names = [measure.replace("_", " ") for measure in measures]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


# ---------------------------------------------------------------- warnings


def _warnings(
    settings: CompareSettings,
    records: Records,
    curves: dict[str, list[Curve]],
    target: Target | None,
    compared: dict[str, dict[str, Any]],
) -> list[str]:
    """Conditions under which the numbers mean little: no baseline or no gain, unequal starts, too few seeds, and
    `_target_warnings`."""
    warnings = []
    if settings.baseline not in records:
        warnings.append(f"The baseline arm {settings.baseline!r} was not run: no target, times or speedups.")
    elif target is None:
        warnings.append(
            f"Neither the baseline {settings.baseline!r} nor any other arm gained (each one's plateau, the mean curve "
            f"over the last {PLATEAU_SHARE:.0%} of the window, is not above its start): no target, times or "
            "speedups; the window means are compared."
        )
    elif target.of is not None:
        warnings.append(
            f"The baseline {settings.baseline!r} gained nothing (its plateau is not above its start): the target is "
            f"{target.fraction:.0%} of {target.of}'s gain, from the baseline's start, and the baseline's runs that "
            "never reach it rank after every run that did."
        )
    if target is not None:
        warnings += _target_warnings(settings, curves, target.accuracy)
    if compared:
        warnings += resolvable_warnings(len(settings.seeds), len(compared), settings.clock, settings.primary_measure)
    warnings += _machine_warnings(settings, records)
    for index, seed in enumerate(settings.seeds):
        starts = {name: runs[index]["eval"][0][settings.metric] for name, runs in records.items()}
        if max(starts.values()) - min(starts.values()) > 1e-9:
            warnings.append(
                f"Seed {seed}: the accuracy before training differs between arms {starts}; the arms did not start "
                "from the same model, evaluation set or code."
            )
    return warnings


def resolvable_warnings(seeds: int, arms: int, clock: str = "seconds", primary: str | None = None) -> list[str]:
    """One line when `seeds` per arm cannot resolve the primary time or steps to target of any of `arms` arms against
    the baseline, however large the difference: the permutation test's p-values are discrete and Holm multiplies
    them by the arms."""
    if (primary or default_primary(clock)) == "mean_accuracy":
        return []
    least = least_adjusted_p_value(seeds, arms)
    if least <= ALPHA:
        return []
    return [
        f"With {seeds} seed(s) per arm and {arms} arm(s) against the baseline, the smallest p-value the primary "
        f"{(primary or default_primary(clock)).replace('_', ' ')} can reach after Holm's adjustment over the arms is "
        f"{least:.3g}, above {ALPHA:g}: none can be resolved, however large; it takes at least "
        f"{seeds_to_resolve(arms)} seeds per arm."
    ]


def _target_warnings(settings: CompareSettings, curves: dict[str, list[Curve]], target: float) -> list[str]:
    """A target met untrained, figures bound by the evaluation schedule, runs that never reach the target."""
    warnings = []
    for name, arm_curves in curves.items():
        is_baseline = name == settings.baseline
        if is_baseline and all(values[0] >= target for _, values in arm_curves):
            warnings.append(
                "The target is met before any training in every baseline seed: train longer, raise the target or "
                "evaluate on more examples before reading times to target."
            )
            continue
        warnings += resolution_warnings(name, settings.seeds, arm_curves, target, baseline=is_baseline)
        never = sum(time_to_target(*curve, target).censored for curve in arm_curves)
        if never:
            who = f"{name} (the baseline)" if is_baseline else name
            warnings.append(
                f"{who}: {never} of {len(arm_curves)} seed(s) never reached the target; the speedup tests rank such "
                "a run after every run that reached it, and a seed where neither arm reached it counts for neither."
            )
    return warnings


DEFINITIONS = {
    "clock": "what each run's budget, the window and the target's plateau count: seconds of training (time_budget) "
    "or optimizer steps (trainer.max_steps with time_budget null, evaluations every eval.every_steps). Learning per "
    "step does not depend on the machine, so a comparison clocked by steps may run across machines: it tests steps "
    "to target and the window mean over steps, and reports times to target in seconds untested, with projections "
    "onto each machine's measured cost per step",
    "metric": "the held-out measure compared: accuracy (greedy pass@1) or accuracy_sampled (pass@1 averaged over "
    "eval.sampled_k samples at the training temperature)",
    "evaluations": "every evaluation of every seed, as in its metrics.jsonl: taken once the training clock crosses "
    "k x eval.every_seconds (or after every eval.every_steps steps; the same grid for every arm), at the exact "
    "training seconds and step recorded; the start and the end are evaluated too",
    "target": "target_accuracy when set, else target_gain of the baseline's gain: its base is the mean over seeds of "
    f"the first evaluation (before training), its plateau the mean over seeds of each curve's mean over the last "
    f"{PLATEAU_SHARE:.0%} of the window (up to the end of the shortest baseline run), so that no single noisy "
    "evaluation sets it; every speedup is also read at target_gains of the gain (by_target)",
    "peak accuracy": PEAK + " (reported; it no longer sets the target)",
    "time_to_target": "per seed: the bracket [below, reached] = [last evaluation below the target, first at or "
    "above it] and the crossing interpolated linearly inside it; a run that never reaches it is censored at its "
    "training time (reported as '> that time'); steps_to_target: the same against optimizer steps",
    "speedup": f"over seeds, by a {SPEEDUP_METHOD}; the p-value tests s = 1, and a seed where neither arm reached "
    "the target counts for neither (censored runs tie with each other and rank after every run that reached it). "
    "Per seed (speedup_per_seed): the baseline's crossing / the arm's where both reached the target, the bounds "
    "their brackets allow, and whether the brackets decide: faster, slower, undecided or neither reached",
    "mean_accuracy_difference": "per seed: the arm's minus the baseline's mean accuracy over the window from the "
    "start to the end of the shorter of the two runs, in seconds or steps by the clock (area under the linearly "
    "interpolated curve / its length); "
    f"over seeds: the mean with a {LEVEL:.0%} Student-t interval and its p-value",
    "verdicts": "per arm against the baseline: time_to_target and steps_to_target faster/slower, mean_accuracy "
    f"higher/lower, when the test's p-value after Holm's adjustment over the family (every arm's three tests; two, "
    f"steps and the window, when clocked by steps, its time to target then '{NOT_TESTED}') is at "
    f"most {ALPHA:g} and, for a speedup, its {LEVEL:.0%} interval lies wholly on that side of 1; else not resolved. "
    f"The intervals are {LEVEL:.0%} per comparison, not adjusted",
    "sign_across_targets": "faster (or slower) when the time (steps) to target test leans that way at every target "
    "of by_target, else changes",
    "projections": "the steps-to-target speedup x the baseline's step cost / the arm's, with its interval scaled "
    "alike: on this machine (measured seconds per step, per machine when the runs ran on several, and the fitted "
    "cost model) and on each step cost of "
    "cost_model.references (an H200's and the PODS paper's built in, and the settings' cost_models); an arm's rollouts "
    "per step are rescaled to the reference's batch (the baseline's trained rollouts per step at its "
    "trained_per_step); a reference without an update cost projects only arms that train as many rows as the baseline",
    "warnings": "an arm that reaches the target at its first evaluation, a baseline that reaches it only at its "
    f"last, a bracket wider than {WIDE_BRACKET:g} of the time it bounds: those figures are set by the evaluation "
    "schedule",
    "curve": "each seed's evaluations interpolated linearly onto the union of the arm's evaluation times or steps, "
    "by the clock (held at "
    "the last value after the run ends); the mean over seeds is drawn bold, each seed thin",
    "seconds_per_step": "mean over all steps of all seeds of the logged phase times (pods/time_*)",
    "seconds_per_evaluation": "mean wall time of one evaluation over all evaluations of all seeds (not on the "
    "training clock, but in the wall time of a run)",
    "rollouts_per_trained_row": "rollouts generated per step / rollouts trained per step (n / m without "
    "dynamic sampling; its refills add the rounds' rollouts)",
    "dynamic_sampling": "arms with dynamic sampling, mean over all steps of all seeds: generation rounds per step "
    "(the first included), prompts generated per step, and the share of generated groups dropped for equal rewards",
    "totals": "per run (mean over seeds) sums over steps of rollouts and completion tokens generated and trained",
    "predicted_seconds_per_step": "cost model (per-phase least squares over all steps of all arms: generate, score "
    "and select vs rollouts generated, update vs rollouts trained) at the arm's mean rollouts per step",
}
