"""A linear cost model of one training step, fit on measured phase times, to say when PODS pays.

Each phase of a step is modelled as `seconds ≈ per_rollout * rollouts + constant`, where generation, scoring and
selection scale with the rollouts *generated* (n per prompt) and the update with the rollouts *trained* (m per
prompt). The fit is ordinary least squares over every logged step of every run, so arms with different n and m
pin down both the slope and the fixed cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

PHASES = ("generate", "score", "select", "update")
# Which rollout count drives each phase's time.
DRIVERS = {
    "generate": "pods/rollouts_generated",
    "score": "pods/rollouts_generated",
    "select": "pods/rollouts_generated",
    "update": "pods/rollouts_trained",
}


@dataclass(frozen=True)
class LinearCost:
    """seconds = per_rollout * rollouts + constant."""

    per_rollout: float
    constant: float

    def __call__(self, rollouts: float) -> float:
        return self.per_rollout * rollouts + self.constant


def fit_linear(rollouts: Iterable[float], seconds: Iterable[float]) -> LinearCost:
    """Least-squares line; with a single distinct rollout count the fixed cost cannot be told apart, so 0 is used."""
    x = np.asarray(list(rollouts), dtype=float)
    y = np.asarray(list(seconds), dtype=float)
    if len(x) == 0:
        raise ValueError("No steps to fit the cost model on.")
    if len(np.unique(x)) < 2:
        return LinearCost(per_rollout=float(x @ y / (x @ x)) if x.any() else 0.0, constant=0.0)
    (slope, intercept), *_ = np.linalg.lstsq(np.stack([x, np.ones_like(x)], axis=1), y, rcond=None)
    return LinearCost(per_rollout=float(slope), constant=float(intercept))


@dataclass(frozen=True)
class CostModel:
    """Per-phase linear costs; predicts a step's seconds from its rollouts generated and trained."""

    phases: dict[str, LinearCost]

    @classmethod
    def fit(cls, steps: Iterable[dict]) -> CostModel:
        """Fit on step records of metrics.jsonl (each with `pods/time_*` and `pods/rollouts_*`)."""
        steps = list(steps)
        return cls(
            {
                phase: fit_linear((s[DRIVERS[phase]] for s in steps), (s[f"pods/time_{phase}"] for s in steps))
                for phase in PHASES
            }
        )

    def phase_seconds(self, generated: float, trained: float) -> dict[str, float]:
        counts = {"pods/rollouts_generated": generated, "pods/rollouts_trained": trained}
        return {phase: self.phases[phase](counts[DRIVERS[phase]]) for phase in PHASES}

    def step_seconds(self, generated: float, trained: float) -> float:
        return sum(self.phase_seconds(generated, trained).values())

    @property
    def per_generated(self) -> LinearCost:
        """Generate + score + select: everything paid per generated rollout."""
        parts = [self.phases[p] for p in PHASES if DRIVERS[p] == "pods/rollouts_generated"]
        return LinearCost(sum(c.per_rollout for c in parts), sum(c.constant for c in parts))

    def max_pool_size(self, m: int, prompts: int, within: float) -> float | None:
        """Largest n whose step (n generated, m trained per prompt) costs at most (1 + within) x GRPO's (n = m).

        None when generation is free in the fit (any n fits).
        """
        generated = self.per_generated
        if generated.per_rollout <= 0:
            return None
        budget = (1 + within) * self.step_seconds(m * prompts, m * prompts)
        spare = budget - self.phases["update"](m * prompts) - generated.constant
        return max(spare / (generated.per_rollout * prompts), 0.0)

    def to_dict(self) -> dict[str, dict[str, float | str]]:
        return {
            phase: {"per_rollout": cost.per_rollout, "constant": cost.constant, "driver": DRIVERS[phase]}
            for phase, cost in self.phases.items()
        }


def when_pods_pays(model: CostModel, n: int, m: int, prompts: int) -> dict:
    """Predicted step costs of grpo (m gen, m update), pods (n gen, m update) and grpo-pool (n gen, n update).

    PODS's step costs `ratio` x GRPO's, so it wins on training time only if it reaches the target in fewer than
    1 / ratio of GRPO's steps; `max_pool_ratio` gives the n/m that keeps its step within 25/50/100% of GRPO's.
    """
    grpo = model.step_seconds(m * prompts, m * prompts)
    pods = model.step_seconds(n * prompts, m * prompts)
    pool = model.step_seconds(n * prompts, n * prompts)
    ratio = pods / grpo if grpo > 0 else None
    limits = {within: model.max_pool_size(m, prompts, within) for within in (0.25, 0.5, 1.0)}
    generated, update = model.per_generated, model.phases["update"]
    lines = [
        f"Fitted costs: a generated rollout (generate + score + select) costs {1e3 * generated.per_rollout:.2f} ms, "
        f"a trained rollout {1e3 * update.per_rollout:.2f} ms, plus {generated.constant + update.constant:.2f} s "
        "fixed per step.",
        f"Predicted seconds per step with {prompts} prompt(s) per step: grpo (n = m = {m}) {grpo:.2f} s, "
        f"pods (n = {n}, m = {m}) {pods:.2f} s, grpo-pool (n = m = {n}) {pool:.2f} s.",
    ]
    if ratio is not None:
        lines.append(
            f"A PODS step costs {ratio:.2f}x a GRPO step, so PODS saves training time only if it needs fewer than "
            f"{1 / ratio:.0%} of GRPO's steps to reach the target accuracy."
        )
    for within, limit in limits.items():
        bound = "any n" if limit is None else f"n <= {limit:.0f} (n/m <= {limit / m:.1f})"
        lines.append(f"PODS step within {within:.0%} of GRPO's at m = {m}: {bound}.")
    return {
        "seconds_per_step": {"grpo": grpo, "pods": pods, "grpo-pool": pool},
        "pods_over_grpo": ratio,
        "max_pool_size": {str(within): limit for within, limit in limits.items()},
        "note": lines,
    }
