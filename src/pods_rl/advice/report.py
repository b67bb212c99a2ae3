"""What `pods advise` says: the ranking of the methods, each against GRPO, a paragraph of plain words, the console
table and advice.json's record. Pure: it reads `pods_rl.advice.forecast`'s figures and the step cost, no model.

The ranking is by learning signal per second where the step cost prices every method, else by signal per step. Each
method against GRPO m/m (`versus_baseline`): its signal per step, seconds per step and signal per second as ratios; the
break-even share of `when_pods_pays` (GRPO's seconds per step over the method's: it saves time only if it needs fewer
than that share of GRPO's steps); and the share the forecast gives (GRPO's signal per step over the method's, learning
per step taken as proportional to the signal). When the ranking would flip: the break-even share, and the factor by
which a generated rollout's cost would have to change for the runner-up to catch the first (`generation_flip`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from rich.table import Table

from pods_rl.advice.forecast import BASELINE, MethodForecast
from pods_rl.compare.cost_model import StepCost

SIGNAL_DEFINITION = (
    "rows trained x the expected within-group variance of their pass rewards (0/1): the expected squared norm of the "
    "advantages without per-group std scaling, counting rows as each arm's tuned learning rate does (see "
    "pods_rl/advice/forecast.py); variance_per_row is the reading at one fixed learning rate"
)


def ranking(forecasts: list[MethodForecast]) -> list[MethodForecast]:
    """The methods, best first: by signal per second where the step cost prices them (those it cannot price after),
    by signal per step without step costs."""
    return sorted(forecasts, key=lambda f: (f.signal_per_second is None, -(f.signal_per_second or f.signal)))


def versus_baseline(forecasts: list[MethodForecast]) -> dict[str, dict[str, float | None]]:
    """Per method, against GRPO m/m: signal per step, seconds per step and signal per second as ratios, the break-even
    share (GRPO's seconds per step over its own) and the forecast share of GRPO's steps (GRPO's signal over its own)."""
    base = next(f for f in forecasts if f.name == BASELINE)
    table = {}
    for f in forecasts:
        seconds = _ratio(f.seconds, base.seconds)
        table[f.name] = {
            "signal_per_step": _ratio(f.signal, base.signal),
            "seconds_per_step": seconds,
            "signal_per_second": _ratio(f.signal_per_second, base.signal_per_second),
            "break_even_share": None if not seconds else 1 / seconds,
            "forecast_step_share": _ratio(base.signal, f.signal),
        }
    return table


def generation_flip(
    first: MethodForecast, second: MethodForecast, cost: StepCost, baseline_trained: float
) -> float | None:
    """The factor x on the cost of a generated rollout at which `second`'s signal per second equals `first`'s (None
    where none positive exists, or the cost cannot price both): solves S1 / (c + x a g1 + b t1) = S2 / (c + x a g2 +
    b t2), with the cost's per-step c, per-generated a and per-trained b rescaled as `StepCost.step_seconds` rescales
    them (to GRPO's `baseline_trained` rows per step)."""
    if cost.per_trained is None or first.seconds is None or second.seconds is None:
        return None
    scale = cost.trained_per_step / baseline_trained
    a, b, c = cost.per_generated * scale, cost.per_trained * scale, cost.per_step
    denominator = a * (first.signal * second.generated - second.signal * first.generated)
    if denominator == 0:
        return None
    factor = (second.signal * (c + b * first.trained) - first.signal * (c + b * second.trained)) / denominator
    return factor if factor > 0 else None


def paragraph(
    forecasts: list[MethodForecast],
    cost: StepCost | None,
    intervals: dict[str, tuple[float, float]],
    where: str,
) -> str:
    """The forecast in plain words: which method ranks first and by how much, and when the ranking would flip. `where`
    opens it: "On this machine", "With the step cost of ...", "Per step"."""
    order = ranking(forecasts)
    versus = versus_baseline(forecasts)
    first, second = order[0], order[1]
    base = next(f for f in forecasts if f.name == BASELINE)
    if first.signal <= 0:
        return (
            f"{where}, no method gets a learning signal from the sampled prompts: no group of their rollouts is "
            "forecast to vary in pass/fail (each prompt passed all or none of its rollouts). Sample more prompts, or "
            "choose a task or setting the model solves sometimes."
        )
    per = "per second" if first.signal_per_second is not None else "per step"
    key = "signal_per_second" if per == "per second" else "signal_per_step"
    if first.name == BASELINE:
        lead = _ratio(first.signal_per_second, second.signal_per_second) if per == "per second" else None
        lead = lead or _ratio(first.signal, second.signal)
        sentences = [
            f"{where}, the forecast ranks {first.label} first: {_times(lead)} the learning signal {per} of the "
            f"runner-up, {second.label}."
        ]
        challenger = second
    elif base.signal <= 0:
        sentences = [
            f"{where}, the forecast ranks {first.label} first; {base.label} is forecast no learning signal (its "
            "groups of m never vary in pass/fail)."
        ]
        challenger = first
    else:
        interval = intervals.get(first.name)
        spread = f" (95% interval over the sampled prompts {interval[0]:.2f}-{interval[1]:.2f}x)" if interval else ""
        detail = ""
        if per == "per second":
            detail = (
                f", from {_times(versus[first.name]['signal_per_step'])} its signal per step at "
                f"{_times(versus[first.name]['seconds_per_step'])} its seconds per step"
            )
        sentences = [
            f"{where}, the forecast ranks {first.label} first: {_times(versus[first.name][key])} the learning "
            f"signal {per} of {base.label}{spread}{detail}."
        ]
        challenger = first
    share, needed = versus[challenger.name]["break_even_share"], versus[challenger.name]["forecast_step_share"]
    says = "the forecast says " + (f"{needed:.0%}" if needed is not None else "it learns nothing")
    if share is not None:
        sentences.append(
            f"{challenger.label} pays here if it needs fewer than {share:.0%} of {base.label}'s steps to reach a "
            f"target; {says} (learning per step taken as proportional to the signal)."
        )
    elif needed is not None:
        sentences.append(
            f"{challenger.label} would need {needed:.0%} of {base.label}'s steps (learning per step taken as "
            "proportional to the signal); the step cost does not say whether its steps cost more."
        )
    if cost is not None and per == "per second":
        flip = generation_flip(first, second, cost, base.trained)
        if flip is not None:
            side = "less" if flip > 1 else "more"
            sentences.append(
                f"It stays ahead of {second.label} while a generated rollout costs {side} than {flip:.2g}x what it "
                "costs here."
            )
    return " ".join(sentences)


def pass_sentence(threshold: float, names: list[str], weights: list[float], graded: dict[str, float]) -> str:
    """What a pass is, in words, with what the pass/fail reading leaves out where rewards are graded."""
    terms = " + ".join(f"{weight:g} x {name}" for name, weight in zip(names, weights, strict=True))
    sentence = (
        f"A rollout passes when its weighted reward ({terms}, as rollout allocation reads it) is at least "
        f"success_threshold = {threshold:g}; the forecast reads each rollout as pass (1) or fail (0)."
    )
    shares = {size: share for size, share in graded.items() if share > 0}
    if shares:
        parts = ", ".join(f"{share:.0%} of groups of {size}" for size, share in shares.items())
        sentence += (
            f" The rewards are graded: {parts} vary in reward while all pass or all fail. The trainer's advantages "
            "and dynamic sampling's filter see that variation; this forecast does not."
        )
    return sentence


def console_table(forecasts: list[MethodForecast], intervals: dict[str, tuple[float, float]]) -> Table:
    """One row per method, best first: what a step generates, trains and learns, its cost and its ratio to GRPO."""
    versus = versus_baseline(forecasts)
    priced = any(f.seconds is not None for f in forecasts)
    table = Table(title="forecast per step (pass/fail rewards)")
    for column in ("#", "method", "generated", "trained", "rounds", "non-zero adv.", "var./row", "signal"):
        table.add_column(column, justify="left" if column == "method" else "right")
    if priced:
        for column in ("s/step", "signal/s", "vs GRPO /s (95%)", "break-even"):
            table.add_column(column, justify="right")
    else:
        table.add_column("vs GRPO /step (95%)", justify="right")
    for rank, f in enumerate(ranking(forecasts), start=1):
        row = [
            str(rank),
            f.label + ("" if f.exact else " *"),
            f"{f.generated:.1f}",
            f"{f.trained:.0f}",
            f"{f.rounds:.2f}",
            f"{f.informative_share:.0%}",
            f"{f.variance_per_row:.3f}",
            f"{f.signal:.2f}",
        ]
        ratio = versus[f.name]["signal_per_second" if priced else "signal_per_step"]
        interval = intervals.get(f.name)
        shown = (
            "-" if ratio is None else f"{ratio:.2f}x" + (f" ({interval[0]:.2f}-{interval[1]:.2f})" if interval else "")
        )
        if priced:
            share = versus[f.name]["break_even_share"]
            row += [
                "-" if f.seconds is None else f"{f.seconds:.2f}",
                "-" if f.signal_per_second is None else f"{f.signal_per_second:.3f}",
                shown,
                "-" if share is None or f.name == BASELINE else f"{share:.0%}",
            ]
        else:
            row.append(shown)
        table.add_row(*row)
    return table


def method_records(forecasts: list[MethodForecast], intervals: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """advice.json's `methods`: each forecast's fields, its rank, and its ratios to GRPO with their interval."""
    versus = versus_baseline(forecasts)
    ranks = {f.name: rank for rank, f in enumerate(ranking(forecasts), start=1)}
    records = []
    for f in forecasts:
        record = asdict(f)
        record["seconds_per_step"] = record.pop("seconds")
        interval = intervals.get(f.name)
        record.update(
            rank=ranks[f.name],
            versus_grpo={**versus[f.name], "interval_95": None if interval is None else list(interval)},
        )
        records.append(record)
    return records


def cost_record(cost: StepCost | None) -> dict[str, Any] | None:
    return None if cost is None else {field: getattr(cost, field) for field in StepCost.FIELDS}


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator
