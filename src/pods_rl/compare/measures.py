"""The measures of a comparison: from each arm's per-seed records to the numbers comparison.json holds.

The statistics themselves are in `pods_rl.compare.statistics`; this module decides which curves they see (the
evaluations of each seed, on the comparison's metric), the one target, the step costs and the warnings.
Definitions (also written into comparison.json): `DEFINITIONS`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import numpy as np

from pods_rl.compare.cost_model import PHASES, CostModel, when_pods_pays
from pods_rl.compare.statistics import (
    LEVEL,
    WIDE_BRACKET,
    band,
    compare_to_baseline,
    mean_accuracy,
    peak,
    resolution_warnings,
    time_to_target,
)
from pods_rl.machine import machine_label

if TYPE_CHECKING:
    from pods_rl.compare.settings import CompareSettings

COUNTS = ("rollouts_generated", "rollouts_trained", "tokens_generated", "tokens_trained")
# What dynamic sampling's refills did, per step (logged by arms with `dynamic_sampling` only).
REFILLS = ("generation_rounds", "prompts_generated", "groups_dropped_frac")
PEAK = "the mean over seeds of each seed's highest evaluation"
Records = dict[str, list[dict[str, Any]]]  # arm -> per seed {"step": [...], "eval": [...], "machine": {...} | None}


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


def target_accuracy(settings: CompareSettings, baseline_peak: float | None) -> float | None:
    """`target_accuracy` when set, else `target` x the baseline's peak; None without a baseline."""
    if settings.target_accuracy is not None:
        return float(settings.target_accuracy)
    return None if baseline_peak is None else settings.target * baseline_peak


LR_RULE = (
    "per arm, the rate of lr_grid with the highest mean accuracy over the window (each tuning run's curve from its "
    "start to its end), averaged over the tuning seeds; a tie goes to the lower rate"
)


def choose_learning_rates(settings: CompareSettings, tuning: dict[str, dict[float, list[dict]]]) -> dict[str, Any]:
    """Each arm's learning rate by `LR_RULE`, from its tuning runs ({arm: {rate: per-seed records}}), with the
    steps each rate reached in the window (mean over the tuning seeds) and the machines its runs ran on."""
    arms = {}
    for name, by_rate in tuning.items():
        scores = {
            rate: float(np.mean([window_accuracy(run["eval"], settings.metric) for run in runs]))
            for rate, runs in by_rate.items()
        }
        chosen = min(scores, key=lambda rate: (-scores[rate], rate))
        arms[name] = {
            "chosen": chosen,
            "mean_accuracy": {f"{rate:g}": score for rate, score in scores.items()},
            "steps": {
                f"{rate:g}": float(np.mean([run["eval"][-1]["step"] for run in runs])) for rate, runs in by_rate.items()
            },
            "machines": sorted({machine_label(run.get("machine")) for runs in by_rate.values() for run in runs}),
        }
    return {"rule": LR_RULE, "grid": settings.lr_grid, "tuning_seeds": settings.tuning_seeds, "arms": arms}


def tuning_warnings(learning_rates: dict[str, Any] | None) -> list[str]:
    """What keeps the tuning from being alike for every arm: an arm whose chosen rate is the grid's highest or
    lowest (the best rate may lie outside it; the remedy widens the grid for every arm, keeping the finished runs),
    and tuning runs on different machines (the window is seconds of training, so a faster CPU fits more steps into
    it and can move the best rate)."""
    if learning_rates is None:
        return []
    grid = sorted(learning_rates["grid"])
    warnings = []
    for name, arm in learning_rates["arms"].items():
        chosen = arm["chosen"]
        if len(grid) > 1 and chosen in (grid[0], grid[-1]):
            edge, beyond = ("highest", "higher") if chosen == grid[-1] else ("lowest", "lower")
            warnings.append(
                f"{name}: its chosen learning rate {chosen:g} is the {edge} of lr_grid {[f'{r:g}' for r in grid]}, "
                f"so a {beyond} one may do better; widen the grid for every arm and resume (pods compare --resume "
                "<folder> --set 'lr_grid=[...]') before reading the arms as tuned."
            )
    if len({label for arm in learning_rates["arms"].values() for label in arm["machines"]}) > 1:
        by_machines = tuning_machines(learning_rates)
        where = "; ".join(f"{', '.join(names)} on {labels}" for labels, names in by_machines.items())
        warnings.append(
            f"The tuning runs ran on different machines ({where}). The window is seconds of training, so a faster "
            "CPU fits more steps into it and can move an arm's best rate (the steps each rate reached are in the "
            "tuning table): the arms were not tuned alike."
        )
    return warnings


def tuning_machines(learning_rates: dict[str, Any]) -> dict[str, list[str]]:
    """{the machines an arm's tuning runs ran on, joined: the arms tuned there}, in the arms' order."""
    by_machines: dict[str, list[str]] = {}
    for name, arm in learning_rates["arms"].items():
        by_machines.setdefault("; ".join(arm["machines"]), []).append(name)
    return by_machines


def window_accuracy(evaluations: list[dict], metric: str) -> float:
    """The tuning rule's score of one run: its mean accuracy from its first evaluation to its last (the end)."""
    times = [e["train_seconds"] for e in evaluations]
    return mean_accuracy(times, [e[metric] for e in evaluations], times[-1])


def summarize(
    settings: CompareSettings,
    records: Records,
    learning_rates: dict[str, Any] | None = None,
    *,
    planned_seeds: list[int] | None = None,
) -> dict[str, Any]:
    """The comparison of `records` run with `settings`: everything comparison.json holds. `learning_rates`: the
    tuning's choice (`choose_learning_rates`), when the arms' rates were tuned. `planned_seeds`: the comparison's
    seeds when `records` hold only the finished ones (`settings.seeds`), for an interim report that says so."""
    metric = settings.metric
    curves = {
        name: [([e["train_seconds"] for e in run["eval"]], [e[metric] for e in run["eval"]]) for run in runs]
        for name, runs in records.items()
    }
    baseline = curves.get(settings.baseline)
    baseline_peak = peak(baseline) if baseline else None
    target = target_accuracy(settings, baseline_peak)
    cost_model = CostModel.fit([step for runs in records.values() for run in runs for step in run["step"]])
    arms = {}
    for name, runs in records.items():
        steps = [step for run in runs for step in run["step"]]
        seconds = {phase: float(np.mean([s[f"pods/time_{phase}"] for s in steps])) for phase in PHASES}
        seconds["total"] = sum(seconds.values())
        per_step = {c: float(np.mean([s[f"pods/{c}"] for s in steps])) for c in COUNTS}
        n, m, rule = settings.arm_sizes(name)
        arms[name] = {
            "n": n,
            "m": m,
            "rule": rule,
            "runs": [f"{name}/seed-{seed}" for seed in settings.seeds],
            "evaluations": [run["eval"] for run in runs],
            "peak_accuracy": spread([max(values) for _, values in curves[name]]),
            "final_accuracy": spread([values[-1] for _, values in curves[name]]),
            "steps": spread([len(run["step"]) for run in runs]),
            "train_seconds": spread([times[-1] for times, _ in curves[name]]),
            "time_to_target": None if target is None else [asdict(time_to_target(*c, target)) for c in curves[name]],
            "vs_baseline": None
            if target is None or name == settings.baseline
            else compare_to_baseline(baseline, curves[name], target),
            "seconds_per_step": seconds,
            "seconds_per_evaluation": _evaluation_seconds(runs),
            "predicted_seconds_per_step": cost_model.step_seconds(
                per_step["rollouts_generated"], per_step["rollouts_trained"]
            ),
            "per_step": per_step,
            "rollouts_per_trained_row": per_step["rollouts_generated"] / per_step["rollouts_trained"],
            "dynamic_sampling": _refills(steps),
            "totals": {c: float(np.mean([sum(s[f"pods/{c}"] for s in run["step"]) for run in runs])) for c in COUNTS},
            "curve": band(curves[name]),
        }
    seeds_left = [seed for seed in planned_seeds or [] if seed not in settings.seeds]
    return {
        "settings": settings.to_dict(),
        "metric": metric,
        "target": {
            "baseline": settings.baseline,
            "accuracy": target,
            "fraction": None if settings.target_accuracy is not None else settings.target,
            "baseline_peak": baseline_peak,
            "peak": PEAK,
        },
        "arms": arms,
        "learning_rates": learning_rates,
        "machines": machine_counts(records),
        "summary": summary_lines(settings.baseline, arms),
        "cost_model": {
            "phases": cost_model.to_dict(),
            "when_pods_pays": when_pods_pays(cost_model, settings.n, settings.m, settings.prompts_per_step),
        },
        "seeds_left": seeds_left,
        "warnings": _interim_warnings(settings.seeds, seeds_left)
        + tuning_warnings(learning_rates)
        + _warnings(settings, records, curves, target),
        "definitions": DEFINITIONS,
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


def machine_counts(records: Records) -> dict[str, int]:
    """How many of the runs ran on each machine (`machine_label`)."""
    return dict(Counter(machine_label(run.get("machine")) for runs in records.values() for run in runs))


def _evaluation_seconds(runs: list[dict[str, list[dict]]]) -> float | None:
    """Mean wall seconds of one evaluation over every seed's evaluations (None for records that predate it)."""
    seconds = [e["eval_seconds"] for run in runs for e in run["eval"] if "eval_seconds" in e]
    return float(np.mean(seconds)) if seconds else None


def _refills(steps: list[dict]) -> dict[str, float] | None:
    """Mean over steps of what dynamic sampling's rounds did, or None for an arm without it."""
    if not any(f"pods/{name}" in step for step in steps for name in REFILLS):
        return None
    return {name: float(np.mean([step[f"pods/{name}"] for step in steps])) for name in REFILLS}


def summary_lines(baseline: str, arms: dict[str, Any]) -> list[str]:
    """One line per arm: its speedup over the baseline with the interval and the seeds that favour it."""
    lines = []
    for name, arm in arms.items():
        versus = arm["vs_baseline"]
        if versus is None or versus["speedup"] is None:
            continue
        speedup, difference = versus["speedup"], versus["mean_accuracy_difference"]
        interval = (
            "no interval from one seed"
            if speedup["low"] is None
            else f"{LEVEL:.0%} interval {speedup['low']:.2f}-{speedup['high']:.2f}x"
        )
        seeds = len(versus["speedup_per_seed"])
        bounds = _censoring(versus["censored"])
        brackets = versus["speedup_by_brackets"]
        lines.append(
            f"{name} vs {baseline}: {speedup['estimate']:.2f}x ({interval}, {versus['seeds_faster']} of {seeds} "
            f"seeds faster{bounds}); by the brackets alone {bracket_text(brackets)}, "
            f"{BRACKET_VERDICTS[brackets['resolved']]}; "
            f"mean accuracy over the window {100 * difference['estimate']:+.1f} points"
            + (
                ""
                if difference["low"] is None
                else f" ({100 * difference['low']:+.1f} to {100 * difference['high']:+.1f})"
            )
        )
    return lines


BRACKET_VERDICTS = {
    "faster": "faster at the evaluations' resolution",
    "slower": "slower at the evaluations' resolution",
    "no": "not resolved at the evaluations' resolution",
}


def bracket_text(brackets: dict[str, Any]) -> str:
    """'1.32-∞x (95% interval 0.88-∞x; 5 of 6 seeds faster, 1 undecided)': from every seed at its lowest bound to
    every seed at its highest, and the seeds whose whole speedup bracket lies above (or below) 1."""

    def ratio(value: float | None) -> str:
        return "∞" if value is None else f"{value:.2f}"

    seeds = brackets["seeds_faster"] + brackets["seeds_slower"] + brackets["seeds_undecided"]
    counts = [f"{brackets['seeds_faster']} of {seeds} seeds faster"]
    counts += [f"{brackets[f'seeds_{kind}']} {kind}" for kind in ("slower", "undecided") if brackets[f"seeds_{kind}"]]
    inside = ", ".join(counts)
    if brackets["low_interval"] is not None:
        interval = f"{ratio(brackets['low_interval'])}-{ratio(brackets['high_interval'])}x"
        inside = f"{LEVEL:.0%} interval {interval}; {inside}"
    return f"{ratio(brackets['low'])}-{ratio(brackets['high'])}x ({inside})"


def _censoring(censored: dict[str, int]) -> str:
    parts = []
    if censored["arm"]:
        parts.append(f"{censored['arm']} censored for the arm: an upper bound")
    if censored["baseline"]:
        parts.append(f"{censored['baseline']} censored for the baseline: a lower bound")
    return "".join(f"; {part}" for part in parts)


def _warnings(settings: CompareSettings, records: Records, curves: dict[str, list], target: float | None) -> list[str]:
    """Conditions under which the numbers mean little: no baseline, unequal starts, and `_target_warnings`."""
    warnings = []
    if settings.baseline not in records:
        warnings.append(f"The baseline arm {settings.baseline!r} was not run: no target, times or speedups.")
    if target is not None:
        warnings += _target_warnings(settings, curves, target)
    warnings += _machine_warnings(settings, records)
    for index, seed in enumerate(settings.seeds):
        starts = {name: runs[index]["eval"][0][settings.metric] for name, runs in records.items()}
        if max(starts.values()) - min(starts.values()) > 1e-9:
            warnings.append(
                f"Seed {seed}: the accuracy before training differs between arms {starts}; the arms did not start "
                "from the same model, evaluation set or code."
            )
    return warnings


def _machine_warnings(settings: CompareSettings, records: Records) -> list[str]:
    """Seeds whose arms ran on different machines (their speedup divides seconds of two CPUs), else a note when the
    seeds did (each seed's speedup holds; pooled seconds, such as seconds per step, mix CPUs)."""
    labels = {name: [machine_label(run.get("machine")) for run in runs] for name, runs in records.items()}
    mixed = []
    for index, seed in enumerate(settings.seeds):
        machines = sorted({arm_labels[index] for arm_labels in labels.values()})
        if len(machines) > 1:
            mixed.append(f"seed {seed} ({'; '.join(machines)})")
    if mixed:
        return [
            f"The arms of {', '.join(mixed)} ran on different machines: those seeds' times and speedups compare "
            "seconds from different CPUs. Rerun them on one machine."
        ]
    machines = machine_counts(records)
    if len(machines) > 1:
        return [
            f"The seeds ran on {len(machines)} machines ({'; '.join(f'{m}: {k} runs' for m, k in machines.items())}); "
            "each seed's arms share one, so per-seed speedups hold, but pooled seconds (per step, per evaluation, "
            "the curves' time axis) mix CPUs."
        ]
    return []


def _target_warnings(settings: CompareSettings, curves: dict[str, list], target: float) -> list[str]:
    """A target met untrained, figures bound by the evaluation schedule, runs that never reach the target."""
    warnings = []
    for name, arm_curves in curves.items():
        if name == settings.baseline and all(values[0] >= target for _, values in arm_curves):
            warnings.append(
                "The target is met before any training in every baseline seed: train longer, raise the target or "
                "evaluate on more examples before reading times to target."
            )
            continue
        warnings += resolution_warnings(name, settings.seeds, arm_curves, target, baseline=name == settings.baseline)
        never = sum(time_to_target(*curve, target).censored for curve in arm_curves)
        if never:
            warnings.append(
                f"{name}: {never} of {len(arm_curves)} seed(s) never reached the target; they enter the speedups at "
                "their training time (censored), which makes those speedups bounds, not estimates."
            )
    return warnings


DEFINITIONS = {
    "metric": "the held-out measure compared: accuracy (greedy pass@1) or accuracy_sampled (pass@1 averaged over "
    "eval.sampled_k samples at the training temperature)",
    "evaluations": "every evaluation of every seed, as in its metrics.jsonl: taken once the training clock crosses "
    "k x eval.every_seconds (the same grid for every arm), at the exact training seconds and step recorded; the "
    "start and the end are evaluated too",
    "peak": PEAK + " (the peak accuracy column and the target use this one peak)",
    "target": "target_accuracy when set, else target x the baseline arm's peak",
    "time_to_target": "per seed: the bracket [below, reached] = [last evaluation below the target, first at or "
    "above it] and the crossing interpolated linearly inside it; a run that never reaches it is censored at its "
    "training time (reported as '> that time')",
    "speedup": "per seed: the baseline's crossing / the arm's (censored runs at their censoring time), bounded by "
    "the baseline's earliest / the arm's latest and the baseline's latest / the arm's earliest possible time; over "
    f"seeds: the geometric mean with a {LEVEL:.0%} Student-t interval on the log-ratios. A seed censored for the "
    "arm makes its speedup an upper bound, one censored for the baseline a lower bound",
    "speedup_by_brackets": "what the brackets alone allow, interpolating inside none: the geometric mean over "
    "seeds of each seed's lowest speedup and of each seed's highest (∞ when one is unbounded), the lower end of "
    f"the {LEVEL:.0%} Student-t interval of the first and the upper end of the second's; the seeds whose lowest "
    "speedup is above 1 (faster), whose highest is below 1 (slower), and the rest (undecided). It is faster (or "
    "slower) at the evaluations' resolution when that whole interval lies above (or below) 1",
    "mean_accuracy_difference": "per seed: the arm's minus the baseline's mean accuracy over the window from the "
    "start to the end of the shorter of the two runs (area under the linearly interpolated curve / its length); "
    f"over seeds: the mean with a {LEVEL:.0%} Student-t interval",
    "warnings": "an arm that reaches the target at its first evaluation, a baseline that reaches it only at its "
    f"last, a bracket wider than {WIDE_BRACKET:g} of the time it bounds: those figures are set by the evaluation "
    "schedule",
    "curve": "each seed's evaluations interpolated linearly onto the union of the arm's evaluation times (held at "
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
