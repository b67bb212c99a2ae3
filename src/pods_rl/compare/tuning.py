"""Each arm's learning rate, chosen on tuning seeds the report never shows (`lr_grid`, `tuning_seeds`): the rule,
the choice, and what keeps the tuning from being alike for every arm."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pods_rl.compare.statistics import CLOCK_AXES, mean_accuracy
from pods_rl.machine import machine_label

if TYPE_CHECKING:
    from pods_rl.compare.settings import CompareSettings

LR_RULE = (
    "per arm, the rate of lr_grid with the highest mean accuracy over the window (each tuning run's curve from its "
    "start to its end, against the comparison's clock: seconds of training or steps), averaged over the tuning "
    "seeds; a tie goes to the lower rate"
)


def choose_learning_rates(settings: CompareSettings, tuning: dict[str, dict[float, list[dict]]]) -> dict[str, Any]:
    """Each arm's learning rate by `LR_RULE`, from its tuning runs ({arm: {rate: per-seed records}}), with the
    steps each rate reached in the window (mean over the tuning seeds) and the machines its runs ran on."""
    arms = {}
    for name, by_rate in tuning.items():
        scores = {
            rate: float(np.mean([window_accuracy(run["eval"], settings.metric, settings.clock) for run in runs]))
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
    return {
        "rule": LR_RULE,
        "clock": settings.clock,
        "grid": settings.lr_grid,
        "tuning_seeds": settings.tuning_seeds,
        "arms": arms,
    }


def tuning_warnings(learning_rates: dict[str, Any] | None) -> list[str]:
    """What keeps the tuning from being alike for every arm: an arm whose chosen rate is the grid's highest or
    lowest (the best rate may lie outside it; the remedy widens the grid for every arm, keeping the finished runs),
    and tuning runs on different machines when the window is seconds of training (a faster CPU fits more steps into
    it and can move the best rate; a comparison clocked by steps gives every run the same steps)."""
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
    machines = {label for arm in learning_rates["arms"].values() for label in arm["machines"]}
    if len(machines) > 1 and learning_rates.get("clock", "seconds") == "seconds":
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


def window_accuracy(evaluations: list[dict], metric: str, clock: str = "seconds") -> float:
    """The tuning rule's score of one run: its mean accuracy from its first evaluation to its last (the end), against
    training seconds or steps (`clock`)."""
    times = [e[CLOCK_AXES[clock]] for e in evaluations]
    return mean_accuracy(times, [e[metric] for e in evaluations], times[-1])
