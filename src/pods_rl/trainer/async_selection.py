"""PODS's selection where an asynchronous trainer scores its rollouts: one group of n at a time (docs/async.md).

TRL 1.16's asynchronous GRPO (`trl.experimental.async_grpo`) scores each group of n completions in its rollout
worker (`_AsyncRolloutLoop._score_group`) and queues one `RolloutSample` per training row. `GroupSelection` is what
PODS does there, on plain tensors: the selection stages of `pods_rl.trainer.stages` run on a batch of one group
(`layout = arange(n).view(1, n)`), so the rows kept and their advantages are exactly the synchronous trainer's for the
same rewards. `take_rows` applies its choice to TRL's samples: the m selected completions' rows, with PODS's
advantages, and nothing from a group that dynamic sampling drops.

What differs from the synchronous trainer, and why:
- What needs several groups together or pools of other sizes cannot apply: `selection_budget="batch"`,
  `rollout_allocation`, `scale_rewards="batch"`, `multi_objective_aggregation="normalize_then_sum"`
  (`pods_rl.config_rules.check_async_fields` refuses each in one line).
- Dynamic sampling has no rounds in a stream. Its bound is per policy version: at most `(max_generation_rounds - 1)
  x prompts_per_step` groups are dropped while one version generates; after that a group that does not vary is kept
  (advantage 0, it trains nothing), as the synchronous trainer fills a step after its last round.
- Rows whose loss TRL would mask are not known when a group is scored: every scorable completion is selectable.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pods_rl.config_rules import check_async_fields
from pods_rl.trainer import stages


@dataclass(frozen=True)
class GroupChoice:
    """What the selection made of one group: the completions kept (indices, ascending), their advantages, and the
    group's `pods/` metrics; `dropped`: dynamic sampling dropped the group (nothing kept)."""

    kept: list[int]
    advantages: list[float]
    metrics: dict[str, float]
    dropped: bool = False


@dataclass
class GroupSelection:
    """PODS's selection of m of n completions per group, with the synchronous trainer's stages and settings.

    `settings`: the stages' settings (budget per prompt); `weights`: the reward functions' weights; `dynamic_sampling`
    drops groups whose selection scores do not vary, at most `drop_limit` per policy version; `generator`: the random
    rule's draws, one per group in the order groups are scored.
    """

    settings: stages.SelectionSettings
    weights: torch.Tensor
    dynamic_sampling: bool = False
    drop_limit: int = 0
    generator: torch.Generator | None = None
    dropped_by_version: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_async_fields(
            {
                "selection_budget": self.settings.budget,
                "scale_rewards": self.settings.scale,
                "multi_objective_aggregation": self.settings.aggregation,
            }
        )
        self.weights = self.weights.double()

    def choose(self, rewards_per_func: torch.Tensor, model_tokens: Sequence[int], version: int = 0) -> GroupChoice:
        """The choice for one group: `rewards_per_func` (n, reward functions), NaN where a function did not score;
        `model_tokens` the completion tokens of each; `version` the policy version that generated the group."""
        n = rewards_per_func.shape[0]
        settings = self.settings
        if self.dynamic_sampling:
            varies = bool(stages.informative(rewards_per_func, self.weights, n, settings.aggregation)[0])
            dropped = self.dropped_by_version.get(version, 0)
            if not varies and dropped < self.drop_limit:
                self.dropped_by_version[version] = dropped + 1
                return GroupChoice([], [], {"pods/groups_dropped": 1.0}, dropped=True)
        layout = torch.arange(n).view(1, n)
        tokens = torch.as_tensor(list(model_tokens), dtype=torch.int64)
        pools = stages.lay_out(rewards_per_func, layout, tokens, torch.zeros(n, dtype=torch.bool), self.weights,
                               settings.aggregation)  # fmt: skip
        selected = stages.select(pools, settings, self.generator)
        advantages = stages.advantages(pools, selected, self.weights, settings)
        kept = selected[0].nonzero().squeeze(1).tolist()
        metrics = stages.selection_metrics(pools, selected, settings, 0)
        metrics["pods/groups_dropped"] = 0.0
        return GroupChoice(kept, [float(advantages[i]) for i in kept], metrics)


def first_rows(rows_per_completion: Sequence[int]) -> list[int]:
    """The index of each completion's first training row, its rows being consecutive."""
    return [0, *itertools.accumulate(rows_per_completion)][:-1]


def rewards_of(samples: Sequence[Any], rows_per_completion: Sequence[int], names: Sequence[str]) -> torch.Tensor:
    """(completions, functions) rewards read back from TRL's samples (`metrics["rewards/<name>"]`, NaN where a
    function returned None), one completion's rows being consecutive."""
    firsts = first_rows(rows_per_completion)
    if sum(rows_per_completion) != len(samples):
        total = sum(rows_per_completion)
        raise ValueError(f"{len(samples)} samples for {total} rows of {len(rows_per_completion)} completions")
    values = [[samples[first].metrics[f"rewards/{name}"] for name in names] for first in firsts]
    return torch.tensor(values, dtype=torch.float64).view(len(firsts), len(names))


def take_rows(choice: GroupChoice, samples: list[Any], rows_per_completion: Sequence[int]) -> list[Any]:
    """Every row of each completion `choice` kept, its advantage replaced by PODS's and the group's `pods/` metrics
    added to its metrics."""
    kept = []
    starts = first_rows(rows_per_completion)
    for completion, advantage in zip(choice.kept, choice.advantages, strict=True):
        for sample in samples[starts[completion] : starts[completion] + rows_per_completion[completion]]:
            sample.advantage = advantage
            sample.metrics.update(choice.metrics)
            kept.append(sample)
    return kept
