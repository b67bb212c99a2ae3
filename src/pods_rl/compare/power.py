"""The power of a comparison's design before any run: how often its primary verdict resolves a true 1.5x and 2x, and
how many seeds 80% would take (`pods compare --dry-run`).

A comparison's settings give the evaluation grid and the horizon (seconds or steps), the held-out questions, the
seeds (or the looks of a sequential design), the arms and the primary question. What they cannot give before the
runs is the learning curve: its start, its plateau, how much seeds differ and its pace. The settings' `power_curve`
(`{base, plateau, spread, reaches}`) states them, else `DEFAULT_CURVE`, and every line printed names what was assumed.
The simulation (`pods_rl.compare.simulation.verdict_power`) draws exponential curves whose median baseline run makes
`reaches` of its gain by the horizon (90% unless said), one arm at the true speedup and the others equal to the
baseline, and draws the verdicts as the report does (Holm over the arms' primary tests, at every look). A report
measures the pace too: a baseline whose median run crosses the target early in the horizon leaves few evaluations
before the crossing, and the power at the runs' pace says what that grid resolves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pods_rl.compare.simulation import Design, Truth, verdict_power

if TYPE_CHECKING:
    from pods_rl.compare.settings import CompareSettings

DEFAULT_CURVE = {"base": 0.4, "plateau": 0.8, "spread": 0.35, "reaches": 0.9}
DEFAULT_QUESTIONS = 200  # when neither eval.num_examples nor task_options.num_test says
STEP_DELAY = 0.1  # a step's length as a share of the evaluation spacing, in a comparison by seconds
TRUTHS = (1.5, 2.0)
WANTED = 0.8  # the power the seeds are sized for
COMPARISONS = 200  # simulated comparisons per point (a share's standard error: 3 points at most)
REPORT_COMPARISONS = COMPARISONS  # per point of a report's power (tests that do not read it lower this)
MOST_SEEDS = 40


@dataclass(frozen=True)
class DesignPower:
    """The simulated power of one design, and the seeds per arm that reach WANTED at each truth (None: more than
    MOST_SEEDS)."""

    design: Design
    arms: int
    primary: str
    looks: list[int] | None
    power: dict[float, float]
    false: float
    seeds_for: dict[float, int | None]
    assumed: list[str]


def design_of(settings: CompareSettings) -> tuple[Design, list[str]]:
    """The simulation's design for `settings`, and what it assumed."""
    base = settings.base
    evaluation = base.get("eval") or {}
    curve = {**DEFAULT_CURVE, **(settings.power_curve or {})}
    assumed = []
    if not settings.power_curve:
        assumed.append(
            f"learning curves from {curve['base']:.0%} to {curve['plateau']:.0%} (power_curve: {{base, plateau}} "
            "sets yours)"
        )
    questions = evaluation.get("num_examples") or (base.get("task_options") or {}).get("num_test")
    if not questions:
        questions = DEFAULT_QUESTIONS
        assumed.append(f"{questions} held-out questions (eval.num_examples sets them)")
    samples = evaluation.get("sampled_k") or 0
    if settings.metric == "accuracy_sampled" and samples > 1:
        assumed.append(
            f"sampled pass@1 over {samples} samples a question: counted as {questions * samples} questions (draws) "
            "an evaluation"
        )
        questions *= samples
    if settings.clock == "steps":
        every, horizon, step = evaluation["every_steps"], base["trainer"]["max_steps"], 0.0
    else:
        every, horizon, step = evaluation["every_seconds"], base["time_budget"], STEP_DELAY
    design = Design(
        "this comparison",
        every=float(every),
        horizon=float(horizon),
        base=float(curve["base"]),
        plateau=float(curve["plateau"]),
        step=step,
        questions=int(questions),
        seeds=len(settings.seeds),
        spread=float(curve["spread"]),
        reaches=float(curve["reaches"]),
    )
    return design, assumed


def _planned(settings: CompareSettings) -> tuple[Design, list[str], int, str, list[int] | None]:
    """The design as planned, what it assumed, the arms tested against the baseline, the simulation's primary
    ("speedup" or "mean_accuracy") and the looks of a sequential design (None: one look)."""
    design, assumed = design_of(settings)
    arms = max(1, sum(name != settings.baseline for name in settings.arms))
    primary = "mean_accuracy" if settings.primary_measure == "mean_accuracy" else "speedup"
    looks = settings.planned_looks() if settings.sequential else None
    if looks:
        design = replace(design, seeds=looks[-1])
    return design, assumed, arms, primary, looks


def design_power(settings: CompareSettings, comparisons: int = COMPARISONS, seed: int = 0) -> DesignPower:
    """The power of `settings`' primary verdict at TRUTHS, and the seeds per arm that reach WANTED."""
    design, assumed, arms, primary, looks = _planned(settings)

    def power(truth: float, seeds: int | None = None, looks: list[int] | None = looks) -> float:
        case = design if seeds is None else replace(design, seeds=seeds)
        return verdict_power(
            case, Truth(truth), comparisons, arms=arms, primary=primary, seed=seed, looks=looks
        ).resolved

    powers = {truth: power(truth) for truth in TRUTHS}
    false = verdict_power(design, Truth(1.0), comparisons, arms=arms, primary=primary, seed=seed, looks=looks).false
    seeds_for = {truth: _seeds_for(lambda seeds, truth=truth: power(truth, seeds, None)) for truth in TRUTHS}
    return DesignPower(design, arms, settings.primary_measure, looks, powers, false, seeds_for, assumed)


def _seeds_for(power_at) -> int | None:
    """The fewest seeds per arm whose simulated power reaches WANTED: scanned at 4, 6, 8, 10, then every 4 up to
    MOST_SEEDS, and refined by one between the last count short of it and the first that reaches it; None beyond."""
    previous = 3
    for count in [*range(4, 12, 2), *range(12, MOST_SEEDS + 1, 4)]:
        if power_at(count) >= WANTED:
            return next((fewer for fewer in range(previous + 1, count) if power_at(fewer) >= WANTED), count)
        previous = count
    return None


def power_lines(result: DesignPower) -> list[str]:
    """The plan's lines on power."""
    design = result.design
    unit = "steps" if design.step == 0 else "s"
    primary = result.primary.replace("_", " ")
    seeds = (
        f"looks at {', '.join(map(str, result.looks))} seeds per arm"
        if result.looks
        else f"{design.seeds} seeds per arm"
    )
    truths = ", ".join(f"{result.power[truth]:.0%} at a true {truth:g}x" for truth in TRUTHS)
    needed = "; ".join(
        f"{WANTED:.0%} at {truth:g}x takes "
        + (f"{count} seeds per arm" if count is not None else f"more than {MOST_SEEDS} seeds per arm")
        for truth, count in result.seeds_for.items()
    )
    lines = [
        f"power of the primary verdict ({primary}, {result.arms} arm(s) against the baseline, Holm): {truths}, with "
        f"{seeds}, evaluations every {design.every:g} {unit} to {design.horizon:g} {unit}, {design.questions} "
        f"questions; false verdicts at a true 1x: {result.false:.0%} (simulated, {COMPARISONS} comparisons a case)",
        f"seeds: {needed} (one look)",
    ]
    if result.assumed:
        lines.append("assumed: " + "; ".join(result.assumed))
    return lines


def power_record(result: DesignPower) -> dict[str, Any]:
    """What comparison.json keeps of the design's power."""
    return {
        "primary": result.primary,
        "arms": result.arms,
        "looks": result.looks,
        "power": {f"{truth:g}x": value for truth, value in result.power.items()},
        "false_at_1x": result.false,
        "seeds_for_80_percent": {f"{truth:g}x": value for truth, value in result.seeds_for.items()},
        "assumed": result.assumed,
        "design": {
            "every": result.design.every,
            "horizon": result.design.horizon,
            "questions": result.design.questions,
            "base": result.design.base,
            "plateau": result.design.plateau,
            "spread": result.design.spread,
        },
    }


def crossing_spread(crossings: list[dict[str, Any]] | None) -> tuple[float | None, int]:
    """The standard deviation over seeds of the log crossing of the target (the simulation's `spread`, which draws
    log time constants), over the seeds that reached it after the start; and how many did. None from fewer than
    two."""
    logs = [math.log(c["crossing"]) for c in crossings or [] if not c["censored"] and c["crossing"] > 0]
    return (float(np.std(logs, ddof=1)) if len(logs) > 1 else None), len(logs)


def measured_reaches(
    crossings: list[dict[str, Any]] | None, fraction: float, horizon: float
) -> tuple[float, float] | None:
    """The pace the baseline's runs show: its median crossing of the target (`fraction` of its gain; a censored run
    counts as never) and the share of its gain an exponential curve crossing there makes by the horizon,
    1 - (1 - fraction)^(horizon / crossing) (kept below 1 - 1e-9). None when the median run did not cross or crossed
    at the start."""
    times = [math.inf if c["censored"] else c["crossing"] for c in crossings or []]
    if not times or not 0 < fraction < 1:
        return None
    median = float(np.median(times))  # inf when half the runs or more never crossed
    if not 0 < median < math.inf:
        return None
    return median, min(1 - (1 - fraction) ** (horizon / median), 1 - 1e-9)


def report_power(
    settings: CompareSettings, comparison: dict[str, Any], comparisons: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """The power of the comparison's design, as planned (its `power_curve`) and at what its runs show: the
    baseline's start and plateau (the target's), and for each arm the spread of log crossings pooled with the
    baseline's, sqrt((s_baseline^2 + s_arm^2) / 2), at the pace of the baseline's median run (`measured_reaches`;
    the planned pace where its median run did not cross). The design is the planned one (all of `settings.seeds`, or
    the looks of a sequential design), whatever seeds have run."""
    planned, assumed, arms, primary, looks = _planned(settings)
    comparisons = comparisons or REPORT_COMPARISONS

    def powers(design: Design) -> dict[str, float]:
        return {
            f"{truth:g}x": verdict_power(
                design, Truth(truth), comparisons, arms=arms, primary=primary, seed=seed, looks=looks
            ).resolved
            for truth in TRUTHS
        }

    record: dict[str, Any] = {
        "primary": settings.primary_measure,
        "arms": arms,
        "seeds": looks or planned.seeds,
        "comparisons": comparisons,
        "planned": {
            "base": planned.base,
            "plateau": planned.plateau,
            "spread": planned.spread,
            "reaches": planned.reaches,
            "assumed": assumed,
            "power": powers(planned),
        },
        "measured": None,
    }
    target = comparison["target"]
    if target is None or target["base"] is None or target["plateau"] is None or target["plateau"] <= target["base"]:
        return record
    key = "steps_to_target" if comparison.get("clock", "seconds") == "steps" else "time_to_target"
    baseline_crossings = comparison["arms"][settings.baseline][key]
    baseline_spread, baseline_reached = crossing_spread(baseline_crossings)
    fraction = target.get("fraction")  # None with target_accuracy: its share of the baseline's gain
    if fraction is None:
        fraction = (target["accuracy"] - target["base"]) / (target["plateau"] - target["base"])
    pace = measured_reaches(baseline_crossings, fraction, planned.horizon)
    measured: dict[str, Any] = {
        "base": target["base"],
        "plateau": target["plateau"],
        "median_crossing": None if pace is None else pace[0],
        "horizon": planned.horizon,
        "reaches": planned.reaches if pace is None else pace[1],
        "arms": {},
    }
    for name, arm in comparison["arms"].items():
        if name == settings.baseline:
            continue
        arm_spread, arm_reached = crossing_spread(arm[key])
        entry: dict[str, Any] = {
            "spread": {settings.baseline: baseline_spread, name: arm_spread},
            "reached": {settings.baseline: baseline_reached, name: arm_reached},
            "pooled": None,
            "power": None,
        }
        if baseline_spread is not None and arm_spread is not None:
            pooled = math.sqrt((baseline_spread**2 + arm_spread**2) / 2)
            entry["pooled"] = pooled
            runs = {"base": target["base"], "plateau": target["plateau"], "reaches": measured["reaches"]}
            entry["power"] = powers(replace(planned, **runs, spread=max(pooled, 1e-3)))
        measured["arms"][name] = entry
    record["measured"] = measured
    return record


def report_power_lines(record: dict[str, Any] | None) -> list[str]:
    """The report's lines on power: as planned, then per arm at the spread its runs show."""
    if not record:
        return []
    seeds = record["seeds"]
    seeds_text = f"looks at {', '.join(map(str, seeds))} seeds" if isinstance(seeds, list) else f"{seeds} seeds"

    def truths(power: dict[str, float]) -> str:
        return ", ".join(f"{value:.0%} at a true {truth}" for truth, value in power.items())

    planned = record["planned"]
    lines = [
        f"Power of the primary verdict ({record['primary'].replace('_', ' ')}, Holm over {record['arms']} arm(s), "
        f"{seeds_text} per arm; {record['comparisons']} simulated comparisons a case). As planned (curves from "
        f"{planned['base']:.0%} to {planned['plateau']:.0%}, seeds' log time constants spread by "
        f"{planned['spread']:.2f}, the median baseline run making {planned.get('reaches', 0.9):.0%} of its gain by the "
        f"end): {truths(planned['power'])}."
    ]
    measured = record["measured"]
    if measured is None:
        lines.append("At what the runs show: no target, so no spread of crossings to measure.")
        return lines
    if "median_crossing" not in measured:  # a report written before the pace was measured
        pass
    elif measured["median_crossing"] is None:
        lines.append(
            "Pace: the baseline's median run did not cross the target; the powers below keep the planned pace."
        )
    else:
        lines.append(
            f"Pace: the baseline's median run crossed the target at {measured['median_crossing']:.3g} of "
            f"{measured['horizon']:g} (an exponential curve through it makes {measured['reaches']:.2%} of its gain by "
            "the end); the powers below use it."
        )
    for name, entry in measured["arms"].items():
        spreads = ", ".join(
            f"{arm} {'-' if value is None else f'{value:.2f}'} ({entry['reached'][arm]} reached)"
            for arm, value in entry["spread"].items()
        )
        if entry["power"] is None:
            lines.append(f"{name}: spread of log crossings {spreads}; too few crossings to measure the power.")
            continue
        lines.append(
            f"{name}: at the runs' curve ({measured['base']:.0%} to {measured['plateau']:.0%}) and spread of log "
            f"crossings ({spreads}; pooled {entry['pooled']:.2f}): {truths(entry['power'])}."
        )
    return lines
