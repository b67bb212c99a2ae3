"""The outputs of a comparison, from the dict `measures.summarize` returns: comparison.json (raw per-seed
data included), comparison.md, comparison.png and the console's rich tables."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from rich.table import Table

from pods_rl.compare.cost_model import PHASES
from pods_rl.compare.measures import COUNTS, bracket_text, tuning_machines

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_comparison(output_dir: Path, comparison: dict[str, Any]) -> None:
    (output_dir / "comparison.json").write_text(json.dumps(comparison, indent=2))
    plot_comparison(comparison, output_dir / "comparison.png")
    (output_dir / "comparison.md").write_text(comparison_markdown(comparison))


# ---------------------------------------------------------------- cells


def rule_text(n: int, m: int, rule: str) -> str:
    return rule if m < n else "none (all n)"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _peak(arm: dict[str, Any]) -> str:
    peak = arm["peak_accuracy"]
    return f"{_percent(peak['mean'])} ± {_percent(peak['std'])} ({_percent(peak['min'])}–{_percent(peak['max'])})"


def time_text(hit: dict[str, Any]) -> str:
    """'15.0 [10, 20]': the interpolated crossing in its bracket; '> 300' for a run that never reached the target."""
    if hit["censored"]:
        return f"> {hit['crossing']:.0f}"
    below = "-" if hit["below"] is None else f"{hit['below']:.0f}"
    return f"{hit['crossing']:.1f} [{below}, {hit['reached']:.0f}]"


def seed_speedup_text(speedup: dict[str, Any]) -> str:
    """'2.00x [1.00, 4.00]'; '≤ 0.50x' where the arm never reached the target, '≥' where the baseline never did."""
    if speedup["estimate"] is None:
        return "- (arm met the target untrained)"
    if speedup["bound"] == "unknown":
        return "? (neither reached the target)"
    high = "∞" if speedup["high"] is None else f"{speedup['high']:.2f}"
    prefix = {"at most": "≤ ", "at least": "≥ "}.get(speedup["bound"], "")
    return f"{prefix}{speedup['estimate']:.2f}x [{speedup['low']:.2f}, {high}]"


def _versus_cell(arm: dict[str, Any], figure: str, render: Callable[[dict[str, Any]], str]) -> str:
    """One figure of the arm against the baseline: 'baseline' for the baseline itself, '-' where it is undefined."""
    versus = arm["vs_baseline"]
    if versus is None:
        return "baseline"
    return "-" if versus[figure] is None else render(versus[figure])


def _geometric_mean_text(speedup: dict[str, Any]) -> str:
    interval = "" if speedup["low"] is None else f" ({speedup['low']:.2f}-{speedup['high']:.2f}x)"
    return f"{speedup['estimate']:.2f}x{interval}"


def speedup_text(arm: dict[str, Any]) -> str:
    """'2.10x (1.30-3.40x)': the geometric mean over seeds and its interval."""
    return _versus_cell(arm, "speedup", _geometric_mean_text)


def brackets_text(arm: dict[str, Any]) -> str:
    """The speedups the brackets alone allow, interpolating inside none (`measures.bracket_text`)."""
    return _versus_cell(arm, "speedup_by_brackets", bracket_text)


def difference_text(arm: dict[str, Any]) -> str:
    """The mean-accuracy difference over the window in points, with its interval."""
    versus = arm["vs_baseline"]
    if versus is None:
        return "baseline"
    difference = versus["mean_accuracy_difference"]
    interval = (
        "" if difference["low"] is None else f" ({100 * difference['low']:+.1f} to {100 * difference['high']:+.1f})"
    )
    return f"{100 * difference['estimate']:+.1f}{interval}"


def seeds_text(arm: dict[str, Any]) -> str:
    versus = arm["vs_baseline"]
    return "-" if versus is None else f"{versus['seeds_faster']} of {len(versus['speedup_per_seed'])}"


def target_text(target: dict[str, Any]) -> str:
    if target["accuracy"] is None:
        return "no target (no baseline)"
    if target["fraction"] is None:
        return f"target {_percent(target['accuracy'])}% (absolute)"
    return (
        f"target {_percent(target['accuracy'])}% = {target['fraction']:g} x {target['baseline']}'s peak "
        f"{_percent(target['baseline_peak'])}% ({target['peak']})"
    )


def _per_seed_rows(comparison: dict[str, Any]) -> list[tuple[str, ...]]:
    """(arm, seed, steps, training s, peak %, time to target, speedup, mean-accuracy difference) per arm and seed."""
    seeds = comparison["settings"]["seeds"]
    rows = []
    for name, arm in comparison["arms"].items():
        versus = arm["vs_baseline"]
        for index, seed in enumerate(seeds):
            hit = "-" if arm["time_to_target"] is None else time_text(arm["time_to_target"][index])
            speedup = "baseline" if versus is None else seed_speedup_text(versus["speedup_per_seed"][index])
            difference = (
                "baseline" if versus is None else f"{100 * versus['mean_accuracy_difference_per_seed'][index]:+.1f}"
            )
            rows.append(
                (
                    name,
                    str(seed),
                    f"{arm['steps']['per_seed'][index]:.0f}",
                    f"{arm['train_seconds']['per_seed'][index]:.0f}",
                    _percent(arm["peak_accuracy"]["per_seed"][index]),
                    hit,
                    speedup,
                    difference,
                )
            )
    return rows


PER_SEED_COLUMNS = (
    "arm",
    "seed",
    "steps",
    "training s",
    "peak (%)",
    "time to target (s) [bracket]",
    "speedup [bounds]",
    "Δ mean acc (points)",
)


# ---------------------------------------------------------------- console


def results_tables(comparison: dict[str, Any]) -> list[Table]:
    """Per arm: accuracy, speedup and mean-accuracy difference; per seed: brackets and bounds; seconds per step."""
    accuracy = Table(
        "arm",
        "n/m",
        "peak acc (%)",
        "speedup (95% interval)",
        "seeds faster",
        "speedup, brackets alone",
        "Δ mean acc (points)",
        title=target_text(comparison["target"]),
    )
    per_seed = Table(*PER_SEED_COLUMNS, title="per seed")
    costs = Table("arm", *PHASES, "measured", "predicted", title="seconds per step")
    for name, arm in comparison["arms"].items():
        peak = arm["peak_accuracy"]
        accuracy.add_row(
            name,
            f"{arm['n']}/{arm['m']}",
            f"{_percent(peak['mean'])} ± {_percent(peak['std'])}",
            speedup_text(arm),
            seeds_text(arm),
            brackets_text(arm),
            difference_text(arm),
        )
        seconds = [*(arm["seconds_per_step"][p] for p in (*PHASES, "total")), arm["predicted_seconds_per_step"]]
        costs.add_row(name, *(f"{value:.3f}" for value in seconds))
    for row in _per_seed_rows(comparison):
        per_seed.add_row(*row)
    return [accuracy, per_seed, costs]


# ---------------------------------------------------------------- markdown


def _markdown_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def comparison_markdown(comparison: dict[str, Any]) -> str:
    settings, target, arms = comparison["settings"], comparison["target"], comparison["arms"]
    accuracy_rows = [
        (
            name,
            str(a["n"]),
            str(a["m"]),
            rule_text(a["n"], a["m"], a["rule"]),
            _peak(a),
            _percent(a["final_accuracy"]["mean"]),
            speedup_text(a),
            seeds_text(a),
            brackets_text(a),
            difference_text(a),
            f"{a['steps']['mean']:.0f}",
        )
        for name, a in arms.items()
    ]
    cost_rows = [
        (
            name,
            *(f"{a['seconds_per_step'][p]:.3f}" for p in (*PHASES, "total")),
            f"{a['predicted_seconds_per_step']:.3f}",
            "—" if a["seconds_per_evaluation"] is None else f"{a['seconds_per_evaluation']:.1f}",
        )
        for name, a in arms.items()
    ]
    work_rows = [
        (
            name,
            f"{a['per_step']['rollouts_generated']:.0f}",
            f"{a['per_step']['rollouts_trained']:.0f}",
            f"{a['rollouts_per_trained_row']:.2f}",
            *_refill_cells(a["dynamic_sampling"]),
            *(f"{a['totals'][c]:.0f}" for c in COUNTS),
        )
        for name, a in arms.items()
    ]
    fit_rows = [
        (phase, fit["driver"].removeprefix("pods/"), f"{1e3 * fit['per_rollout']:.3f}", f"{fit['constant']:.3f}")
        for phase, fit in comparison["cost_model"]["phases"].items()
    ]
    note = "\n".join(f"- {line}" for line in comparison["cost_model"]["when_pods_pays"]["note"])
    definitions = "\n".join(f"- **{key}**: {text}." for key, text in comparison["definitions"].items())
    summary = "\n".join(f"- {line}" for line in comparison["summary"]) or "- no arm besides the baseline"
    warnings = "".join(f"\n**Warning:** {warning}\n" for warning in comparison["warnings"])
    budget = settings["time_budget"]
    every = settings["eval"]["every_seconds"]
    schedule = (
        f"evaluation each time the training clock crosses a multiple of {every:g} s"
        if every
        else f"evaluation every {settings['eval']['every_steps']} steps"
    )
    work = _markdown_table(
        (
            "arm",
            "rollouts generated / step",
            "rollouts trained / step",
            "generated / trained row",
            "generation rounds / step",
            "prompts generated / step",
            "groups dropped (%)",
            "rollouts generated",
            "rollouts trained",
            "tokens generated",
            "tokens trained",
        ),
        work_rows,
    )
    accuracy_columns = (
        "arm",
        "n",
        "m",
        "rule",
        "peak accuracy (%) mean ± std (min–max)",
        "final (%)",
        "speedup, geometric mean (95% interval)",
        "seeds faster",
        "speedup by the brackets alone: every seed at its lowest-highest (95% interval; seeds)",
        "Δ mean accuracy (points, 95% interval)",
        "steps",
    )
    return f"""# Comparison: {Path(settings["model"]).name} on {settings["task"]}{_interim_text(comparison)}

Pool n = {settings["n"]}, trained m = {settings["m"]}, {settings["prompts_per_step"]} prompt(s) per step, \
seeds {settings["seeds"]}, {"no" if budget is None else f"{budget:g} s"} training-time budget per run, \
{schedule}; measure: `{comparison["metric"]}`.
{target_text(target).capitalize()}.
Machine: {"; ".join(f"{label} ({count} runs)" for label, count in comparison["machines"].items())}.

## Summary

{summary}
{warnings}
![accuracy vs training time](comparison.png)

## Accuracy and speedup over `{target["baseline"]}`

{_markdown_table(accuracy_columns, accuracy_rows)}

## Per seed: time to target and speedup

Time to target: the interpolated crossing [last evaluation below, first at or above]; "> T": never reached in T s
of training (censored). Speedup: the estimate [lowest, highest the brackets allow]; ≤ / ≥: a censored run bounds it.

{_markdown_table(PER_SEED_COLUMNS, _per_seed_rows(comparison))}

{_learning_rates_markdown(comparison["learning_rates"])}## Seconds per step: measured and predicted

{_markdown_table(("arm", *PHASES, "measured total", "predicted", "s per evaluation"), cost_rows)}

## Work per step and per run (mean over seeds)

{work}

## Cost model

{_markdown_table(("phase", "driver", "ms per rollout", "fixed s per step"), fit_rows)}

When PODS pays:
{note}

## Definitions

{definitions}
"""


def _interim_text(comparison: dict[str, Any]) -> str:
    """The title's suffix "(interim: k of K seeds)" for a report of the finished seeds while others are left."""
    seeds, seeds_left = comparison["settings"]["seeds"], comparison["seeds_left"]
    return f" (interim: {len(seeds)} of {len(seeds) + len(seeds_left)} seeds)" if seeds_left else ""


def _refill_cells(refills: dict[str, float] | None) -> tuple[str, str, str]:
    """Dynamic sampling's rounds, prompts and dropped share per step; dashes for an arm without it."""
    if refills is None:
        return ("—", "—", "—")
    return (
        f"{refills['generation_rounds']:.2f}",
        f"{refills['prompts_generated']:.1f}",
        f"{100 * refills['groups_dropped_frac']:.1f}",
    )


def _learning_rates_markdown(learning_rates: dict[str, Any] | None) -> str:
    """The tuning's grid results (window mean and steps reached), each arm's chosen rate and the machines it was
    tuned on; empty when the rates were not tuned."""
    if learning_rates is None:
        return ""
    grid = [f"{rate:g}" for rate in learning_rates["grid"]]

    def cell(arm: dict[str, Any], rate: str) -> str:
        accuracy = f"{100 * arm['mean_accuracy'][rate]:.1f}"
        if rate == f"{arm['chosen']:g}":
            accuracy = f"**{accuracy}**"
        return f"{accuracy} / {arm['steps'][rate]:g}"

    rows = [
        (name, *(cell(arm, rate) for rate in grid), f"{arm['chosen']:g}")
        for name, arm in learning_rates["arms"].items()
    ]
    table = _markdown_table(("arm", *(f"lr {rate}" for rate in grid), "chosen"), rows)
    machines = "; ".join(f"{', '.join(names)}: {labels}" for labels, names in tuning_machines(learning_rates).items())
    return f"""## Learning rates, tuned on seeds {learning_rates["tuning_seeds"]}

Each cell: mean accuracy over the window (%) / steps reached in it (mean over the tuning seeds); the rule:
{learning_rates["rule"]}. The reported seeds above ran at each arm's chosen rate and were never used to choose it.

{table}

Tuned on: {machines}.

"""


# ---------------------------------------------------------------- plot


def plot_comparison(comparison: dict[str, Any], path: Path) -> None:
    """Accuracy vs training time (each seed thin, the mean over seeds bold, the target dashed) and the measured
    seconds per step by phase."""
    arms, metric = comparison["arms"], comparison["metric"]
    figure, (curves, costs) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    for name, arm in arms.items():
        curve = arm["curve"]
        (line,) = curves.plot(curve["train_seconds"], [100 * v for v in curve["mean"]], linewidth=2.2, label=name)
        for evaluations in arm["evaluations"]:
            times = [e["train_seconds"] for e in evaluations]
            curves.plot(times, [100 * e[metric] for e in evaluations], color=line.get_color(), linewidth=0.7, alpha=0.5)
        for hit in arm["time_to_target"] or []:
            if not hit["censored"]:
                curves.plot(
                    hit["crossing"], 100 * comparison["target"]["accuracy"], "|", color=line.get_color(), ms=12, mew=2
                )
    target = comparison["target"]
    if target["accuracy"] is not None:
        label = (
            "target"
            if target["fraction"] is None
            else f"target ({target['fraction']:g} x {target['baseline']}'s mean seed peak)"
        )
        curves.axhline(100 * target["accuracy"], color="gray", linestyle="--", linewidth=1, label=label)
    curves.set_xlabel("training time (s, evaluation excluded)")
    curves.set_ylabel(f"held-out {metric} (%)")
    curves.set_title(
        f"{Path(comparison['settings']['model']).name} on {comparison['settings']['task']}{_interim_text(comparison)}"
        ": seeds thin, mean bold, | = a seed's crossing",
        fontsize="medium",
    )
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
