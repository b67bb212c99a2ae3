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

    @classmethod
    def from_dict(cls, phases: dict[str, dict[str, float | str]]) -> CostModel:
        """The model `to_dict` wrote (comparison.json's cost_model.phases)."""
        return cls(
            {phase: LinearCost(float(fit["per_rollout"]), float(fit["constant"])) for phase, fit in phases.items()}
        )

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


# ---------------------------------------------------------------- step costs of other machines


@dataclass(frozen=True)
class StepCost:
    """A step's seconds on some machine: `per_step + per_generated x generated + per_trained x trained` rollouts,
    measured at a step that trains `trained_per_step` rollouts in the baseline. An arm's rollouts per step are
    rescaled so that the baseline's trained rollouts per step equal `trained_per_step` (the comparison's step shape
    at that machine's batch). `per_trained` None: the source gives no update cost apart from the fixed one, which
    then holds the baseline's update, so only arms that train as many rollouts as the baseline are projected."""

    name: str
    source: str
    per_step: float
    per_generated: float
    per_trained: float | None
    trained_per_step: float

    FIELDS = ("name", "source", "per_step", "per_generated", "per_trained", "trained_per_step")

    @classmethod
    def check_all(cls, entries: object, where: str) -> list[StepCost]:
        """`cost_models` of a comparison's settings, as StepCosts; raises ValueError on a malformed entry."""
        example = (
            "e.g. {name: my-gpu, source: gpu_check.py, per_step: 7.8, per_generated: 0.0049, per_trained: 0.0078, "
            "trained_per_step: 64}"
        )
        if not isinstance(entries, list):
            raise ValueError(f"{where}: cost_models must be a list of step costs, {example}.")
        costs = []
        for entry in entries:
            numbers = ("per_step", "per_generated", "trained_per_step")
            if (
                not isinstance(entry, dict)
                or set(entry) - set(cls.FIELDS)
                or not isinstance(entry.get("name"), str)
                or not all(isinstance(entry.get(k), (int, float)) and entry[k] >= 0 for k in numbers)
                or not entry["trained_per_step"] > 0
                or not (entry.get("per_trained") is None or isinstance(entry["per_trained"], (int, float)))
            ):
                raise ValueError(f"{where}: cost_models entry {entry!r} is not a step cost, {example}.")
            costs.append(
                cls(
                    entry["name"],
                    str(entry.get("source", "given in the settings")),
                    float(entry["per_step"]),
                    float(entry["per_generated"]),
                    None if entry.get("per_trained") is None else float(entry["per_trained"]),
                    float(entry["trained_per_step"]),
                )
            )
        return costs

    def step_seconds(self, generated: float, trained: float, baseline_trained: float) -> float | None:
        """Seconds of a step with these rollouts per step (None: not projectable, see the class)."""
        scale = self.trained_per_step / baseline_trained
        if self.per_trained is None:
            if abs(trained - baseline_trained) > 1e-9 * baseline_trained:
                return None
            return self.per_step + self.per_generated * scale * generated
        return self.per_step + self.per_generated * scale * generated + self.per_trained * scale * trained


def _paper_step_cost() -> StepCost:
    """The PODS paper's single-GPU step times (one L40S, Qwen2.5-3B-Instruct with LoRA, GSM8K, one prompt per step,
    m = 16): GRPO 16/16 7.5 s, PODS n = 32, 64, 128, 256 -> 16: 7.9, 10.1, 13.6, 21.2 s. A line through them prices
    a generated rollout; the update of the 16 trained rows is not given apart from the fixed cost."""
    line = fit_linear([16, 32, 64, 128, 256], [7.5, 7.9, 10.1, 13.6, 21.2])
    return StepCost(
        "paper (L40S)",
        "PODS paper, Qwen2.5-3B LoRA on one L40S, n at m = 16",
        line.constant,
        line.per_rollout,
        None,
        16,
    )


# Built in: what `pods compare` projects every steps-to-target result onto, besides the comparison's own fit.
REFERENCE_COSTS = (
    # benchmarks/gpu_check.py on one H200 (docs/benchmarks/gpu.md): a 494M Llama, 256-token prompts,
    # 512-token completions, HF generate, 8 prompts per step; GRPO 8/8 (64 generated, 64 trained) and PODS 32 -> 8 (256,
    # 64): generate + score + select 8.147 and 9.081 s, so 4.865 ms a generated rollout and 7.836 s fixed; update
    # 0.497 and 0.505 s for 64 rows: 7.83 ms a trained rollout (taken as proportional to the rows).
    StepCost(
        "H200 (0.5B)", "benchmarks/gpu_check.py on one H200, 494M model, HF generate", 7.836, 0.004865, 0.00783, 64
    ),
    _paper_step_cost(),
)
