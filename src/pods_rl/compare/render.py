"""The outputs of a comparison, from the dict `measures.summarize` returns: comparison.json (raw per-seed
data included), comparison.md, comparison.png and the console's rich tables."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from rich.table import Table

from pods_rl.compare.cost_model import PHASES
from pods_rl.compare.measures import (
    COUNTS,
    comparison_clock,
    difference_text,
    family_text,
    other_pieces,
    ratio_text,
    target_text,
    verdict_text,
)
from pods_rl.compare.power import report_power_lines
from pods_rl.compare.statistics import CLOCK_AXES
from pods_rl.compare.tuning import tuning_machines

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def write_comparison(output_dir: Path, comparison: dict[str, Any]) -> None:
    """comparison.json (strict JSON: no NaN or Infinity), comparison.png and comparison.md."""
    (output_dir / "comparison.json").write_text(json.dumps(_strict(comparison), indent=2, allow_nan=False))
    plot_comparison(comparison, output_dir / "comparison.png")
    (output_dir / "comparison.md").write_text(comparison_markdown(comparison))


def _strict(value: Any) -> Any:
    """`value` with every non-finite float as None (JSON has neither NaN nor Infinity)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


# ---------------------------------------------------------------- cells


def rule_text(n: int, m: int, rule: str) -> str:
    return rule if m < n else "none (all n)"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _peak(arm: dict[str, Any]) -> str:
    peak = arm["peak_accuracy"]
    return f"{_percent(peak['mean'])} ± {_percent(peak['std'])} ({_percent(peak['min'])}–{_percent(peak['max'])})"


def time_text(hit: dict[str, Any], unit: str = "") -> str:
    """'15.0 [10, 20]': the interpolated crossing in its bracket; '> 300' for a run that never reached the target."""
    if hit["censored"]:
        return f"> {hit['crossing']:.0f}{unit}"
    below = "-" if hit["below"] is None else f"{hit['below']:.0f}"
    return f"{hit['crossing']:.1f} [{below}, {hit['reached']:.0f}]{unit}"


def seed_speedup_text(speedup: dict[str, Any]) -> str:
    """'2.00x [1.00, 4.00], faster': the interpolated ratio where both reached the target, the bounds the brackets
    allow, and what they decide; 'neither reached' where both runs are censored."""
    if speedup["verdict"] == "neither reached":
        return "neither reached"
    estimate = "" if speedup["estimate"] is None else f"{speedup['estimate']:.2f}x "
    bounds = f"[{ratio_text(speedup['low'], low=True)}, {ratio_text(speedup['high'])}]"
    return f"{estimate}{bounds}, {speedup['verdict']}"


def _speedup_cell(figure: dict[str, Any] | None) -> str:
    """'1.25x (0.80-2.10x)'; '-' without a target."""
    if figure is None:
        return "-"
    estimate = "-" if figure["estimate"] is None else f"{ratio_text(figure['estimate'])}x"
    if figure["low"] is None:
        return f"{estimate} (none)"
    others = len(other_pieces(figure))
    more = f", +{others} piece{'s' if others > 1 else ''}" if others else ""
    return f"{estimate} ({ratio_text(figure['low'])}-{ratio_text(figure['high'])}x{more})"


def _reached(figure: dict[str, Any] | None) -> str:
    if figure is None:
        return "-"
    return f"{figure['reached']['arm']} / {figure['reached']['baseline']} of {figure['seeds']}"


def _verdict_rows(comparison: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per arm: time to target, steps to target (and the curve fits' speedup on the clock's axis) and window mean
    against the baseline, each with its verdict."""
    rows = []
    fit = "time_to_target_fit" if comparison_clock(comparison) == "seconds" else "steps_to_target_fit"
    for name, arm in comparison["arms"].items():
        versus = arm["vs_baseline"]
        if versus is None:
            continue
        time, steps = versus["time_to_target"], versus["steps_to_target"]
        rows.append(
            (
                name,
                _speedup_cell(time),
                _reached(time),
                verdict_text(versus, "time_to_target"),
                _speedup_cell(steps),
                verdict_text(versus, "steps_to_target"),
                _speedup_cell(versus.get(fit)),
                difference_text(versus["mean_accuracy_difference"]),
                verdict_text(versus, "mean_accuracy"),
            )
        )
    return rows


VERDICT_COLUMNS = (
    "arm",
    "time to target: speedup (95% interval)",
    "reached: arm / baseline",
    "verdict",
    "steps to target: speedup (95% interval)",
    "verdict",
    "by curve fits (secondary)",
    "Δ window mean (95% interval)",
    "verdict",
)


def _target_rows(comparison: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """The speedups at every reported target: seconds, then steps."""
    targets = comparison["targets"]
    columns = ["arm", "measure"]
    for target in targets:
        what = f"{target['fraction']:.0%} of the gain" if target["fraction"] is not None else "absolute"
        columns.append(f"{what}: {_percent(target['accuracy'])}%")
    columns.append("sign at every target")
    rows = []
    for name, arm in comparison["arms"].items():
        versus = arm["vs_baseline"]
        if versus is None or versus["by_target"] is None:
            continue
        for key, label in (("time_to_target", "time"), ("steps_to_target", "steps")):
            cells = [_speedup_cell(row[key]) for row in versus["by_target"]]
            rows.append((name, label, *cells, versus["sign_across_targets"][key]))
    return tuple(columns), rows


def _projection_rows(comparison: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Per arm: its steps-to-target speedup, and for each step cost the cost ratio and the time speedup it implies."""
    names = None
    rows = []
    for name, arm in comparison["arms"].items():
        versus = arm["vs_baseline"]
        if versus is None or not versus.get("projections"):
            continue
        names = names or list(versus["projections"])
        cells = []
        for figure in versus["projections"].values():
            if figure["step_cost_ratio"] is None:
                cells.append("not projected")
                continue
            cells.append(f"{figure['step_cost_ratio']:.2f}x a step: {_speedup_cell(figure)}")
        rows.append((name, _speedup_cell(versus["steps_to_target"]), *cells))
    columns = ("arm", "steps to target", *(f"on {name}" for name in names or []))
    return columns, rows


def _per_seed_rows(comparison: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per arm and seed: steps, training s, peak, time and steps to target, speedup per seed, window difference."""
    seeds = comparison["settings"]["seeds"]
    per_seed = "speedup_per_seed" if comparison_clock(comparison) == "seconds" else "steps_speedup_per_seed"
    rows = []
    for name, arm in comparison["arms"].items():
        versus = arm["vs_baseline"]
        for index, seed in enumerate(seeds):
            hit = "-" if arm["time_to_target"] is None else time_text(arm["time_to_target"][index])
            steps = "-" if arm["steps_to_target"] is None else time_text(arm["steps_to_target"][index])
            speedup = (
                "baseline"
                if versus is None
                else "-"
                if versus[per_seed] is None or index >= len(versus[per_seed])
                else seed_speedup_text(versus[per_seed][index])
            )
            paired = versus["mean_accuracy_difference_per_seed"] if versus is not None else []
            difference = (
                "baseline" if versus is None else "-" if index >= len(paired) else f"{100 * paired[index]:+.1f}"
            )
            rows.append(
                (
                    name,
                    str(seed),
                    f"{arm['steps']['per_seed'][index]:.0f}",
                    f"{arm['train_seconds']['per_seed'][index]:.0f}",
                    _percent(arm["peak_accuracy"]["per_seed"][index]),
                    hit,
                    steps,
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
    "steps to target [bracket]",
    "speedup [bounds], brackets decide",
    "Δ mean acc (points)",
)


_STEP_CLOCKED = " (clocked by steps: the window and the verdicts count steps)"


def _title(comparison: dict[str, Any]) -> str:
    target = comparison["target"]
    if target is None:
        return "no target"
    return f"target: {target_text(target, target['baseline'])}"


# ---------------------------------------------------------------- console


def results_tables(comparison: dict[str, Any]) -> list[Table]:
    """The verdicts against the baseline; per seed: brackets and bounds; seconds per step."""
    verdicts = Table(*VERDICT_COLUMNS, title=_title(comparison))
    for row in _verdict_rows(comparison):
        verdicts.add_row(*row)
    per_seed = Table(*PER_SEED_COLUMNS, title="per seed")
    for row in _per_seed_rows(comparison):
        per_seed.add_row(*row)
    costs = Table("arm", *PHASES, "measured", "predicted", title="seconds per step")
    for name, arm in comparison["arms"].items():
        seconds = [*(arm["seconds_per_step"][p] for p in (*PHASES, "total")), arm["predicted_seconds_per_step"]]
        costs.add_row(name, *(f"{value:.3f}" for value in seconds))
    return [verdicts, per_seed, costs]


# ---------------------------------------------------------------- markdown


def _markdown_table(columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _comparison_sections(comparison: dict[str, Any]) -> str:
    """Verdicts, speedups at every target and projections: empty without a target."""
    if not _verdict_rows(comparison):
        return ""
    method, family = comparison["method"], comparison["method"]["family"]
    target_columns, target_rows = _target_rows(comparison)
    projection_columns, projection_rows = _projection_rows(comparison)
    references = "\n".join(
        f"- **{cost['name']}** ({cost['source']}): {cost['per_step']:.3f} s a step + "
        f"{1e3 * cost['per_generated']:.3f} ms a generated rollout + "
        + (
            "the update in the fixed cost"
            if cost["per_trained"] is None
            else f"{1e3 * cost['per_trained']:.3f} ms a trained rollout"
        )
        + f", at {cost['trained_per_step']:g} trained rollouts a step for the baseline."
        for cost in comparison["cost_model"]["references"]
    )
    untested = (
        ""
        if comparison_clock(comparison) == "seconds"
        else " Clocked by steps: the time to target (seconds of whichever machines ran each run) is reported, not "
        "tested; the projections below give it per machine."
    )
    fit = f" By curve fits (reported, not a verdict): {method['speedup_fit']}." if "speedup_fit" in method else ""
    return f"""## Verdicts against `{comparison["settings"]["baseline"]}`

Speedup: {method["speedup"]}.{fit} Window mean: {method["mean_accuracy"]}. {family_text(family)}{untested}

{_markdown_table(VERDICT_COLUMNS, _verdict_rows(comparison))}

{_speedup_sections(comparison, target_columns, target_rows, projection_columns, projection_rows, references)}"""


def _speedup_sections(
    comparison: dict[str, Any],
    target_columns: tuple[str, ...],
    target_rows: list[tuple[str, ...]],
    projection_columns: tuple[str, ...],
    projection_rows: list[tuple[str, ...]],
    references: str,
) -> str:
    """The speedups at every target and their projections: empty without a target."""
    if comparison["target"] is None:
        return ""
    return f"""## Speedup at every target

The same tests at each fraction of the baseline's gain (seconds, then optimizer steps; estimate and 95% interval),
and whether the test leans the same way at every one.

{_markdown_table(target_columns, target_rows)}

## Steps to target projected onto other step costs

The steps-to-target speedup x the baseline's step cost / the arm's (its interval scaled alike), on the machines
that ran it (measured seconds per step, per machine when there were several; the fitted cost model) and on:
{references}

{_markdown_table(projection_columns, projection_rows)}

"""


def comparison_markdown(comparison: dict[str, Any]) -> str:
    settings, arms = comparison["settings"], comparison["arms"]
    accuracy_rows = [
        (
            name,
            str(a["n"]),
            str(a["m"]),
            rule_text(a["n"], a["m"], a["rule"]),
            _peak(a),
            _percent(a["final_accuracy"]["mean"]),
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
    steps_budget = (settings.get("trainer") or {}).get("max_steps")
    budget_text = f"{budget:g} s training-time budget" if budget is not None else f"{steps_budget} steps"
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
        "steps",
    )
    return f"""# Comparison: {Path(settings["model"]).name} on {settings["task"]}{_interim_text(comparison)}

Pool n = {settings["n"]}, trained m = {settings["m"]}, {settings["prompts_per_step"]} prompt(s) per step, \
seeds {settings["seeds"]}, {budget_text} per run, {schedule}; measure: `{comparison["metric"]}`{
        "" if comparison_clock(comparison) == "seconds" else _STEP_CLOCKED
    }.
{_title(comparison).capitalize()}.
Machine: {"; ".join(f"{label} ({count} runs)" for label, count in comparison["machines"].items())}.

## Summary

{summary}
{_power_section(comparison)}{warnings}
![accuracy vs training {"time" if comparison_clock(comparison) == "seconds" else "steps"}](comparison.png)

{_comparison_sections(comparison)}## Accuracy per arm

{_markdown_table(accuracy_columns, accuracy_rows)}

## Per seed: time and steps to target, speedup

Time (steps) to target: the interpolated crossing [last evaluation below, first at or above]; "> T": never reached
in T s (steps) of training (censored). Speedup: the interpolated ratio where both runs reached the target [the
lowest, highest the brackets allow], and what the brackets decide: faster, slower, undecided, or neither reached
(no direction).

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


def _power_section(comparison: dict[str, Any]) -> str:
    """The design's power, as planned and at what the runs show (`power.report_power`); empty in older reports."""
    lines = report_power_lines(comparison.get("power"))
    if not lines:
        return ""
    return f"\n## Power\n\n{lines[0]}\n\n" + "".join(f"- {line}\n" for line in lines[1:])


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
    axis = CLOCK_AXES[comparison_clock(comparison)]
    hits = "time_to_target" if comparison_clock(comparison) == "seconds" else "steps_to_target"
    figure, (curves, costs) = plt.subplots(1, 2, figsize=(13, 4.8), dpi=120, gridspec_kw={"width_ratios": [3, 2]})
    for name, arm in arms.items():
        curve = arm["curve"]
        (line,) = curves.plot(curve[axis], [100 * v for v in curve["mean"]], linewidth=2.2, label=name)
        for evaluations in arm["evaluations"]:
            times = [e[axis] for e in evaluations]
            curves.plot(times, [100 * e[metric] for e in evaluations], color=line.get_color(), linewidth=0.7, alpha=0.5)
        for hit in arm[hits] or []:
            if not hit["censored"]:
                curves.plot(
                    hit["crossing"], 100 * comparison["target"]["accuracy"], "|", color=line.get_color(), ms=12, mew=2
                )
    target = comparison["target"]
    if target is not None:
        label = (
            "target"
            if target["fraction"] is None
            else f"target ({target['fraction']:.0%} of {target['baseline']}'s gain)"
        )
        curves.axhline(100 * target["accuracy"], color="gray", linestyle="--", linewidth=1, label=label)
    curves.set_xlabel("training time (s, evaluation excluded)" if hits == "time_to_target" else "optimizer steps")
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
