"""PODS's selection as named stages on plain data: what a trainer that selects rollouts runs on its pools.

`PODSTrainer._down_sample` runs them on a generation batch's pools, gathered from every process. A trainer that
scores one group of n at a time (TRL's asynchronous GRPO scores each group in its rollout worker's `_score_group`)
can run the same stages on a batch of one group, `layout = torch.arange(n).view(1, n)`. In order:

1. `lay_out`: the generated rows' rewards, completion tokens and masked flags as pools (`Pools`): one row per
   prompt, its rollouts in the columns, padding where a pool is smaller than the largest; its scores are
   `pods_rl.trainer.pools.selection_scores`. Dynamic sampling keeps the groups that are `informative`.
2. `select`: which rollouts the update sees, by the configured rule and budget (`SelectionSettings`).
3. `advantages`: the selected rollouts' advantages, their statistics as `advantage_stats` says.
4. `row_plan`: the selected rows in generation order, each process's equal, contiguous share of them.
5. `selection_metrics`: what the selection kept, as the `pods/` metrics.

The stages take and return tensors and small dataclasses; none touches a trainer, a process group or a device other
than its inputs'. The random rule draws from the generator passed to `select`, one draw per group in group order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from pods_rl.core.dynamic_sampling import informative_groups
from pods_rl.trainer.pools import advantages as pool_advantages
from pods_rl.trainer.pools import select_per_block, select_per_group, selection_scores


@dataclass(frozen=True, kw_only=True)
class SelectionSettings:
    """What the stages read from a trainer's configuration (PODSConfig's fields, TRL's aggregation and scaling)."""

    num_selected: int  # m
    rule: str  # selection_rule
    budget: str  # selection_budget
    tie_break: str  # selection_tie_break
    rows_per_process: int  # rows one process trains per generation; the batch budget spreads them over its pools
    aggregation: str  # multi_objective_aggregation
    scale: str  # scale_rewards
    advantage_stats: str


@dataclass(frozen=True)
class Pools:
    """G pools of up to K rollouts as selection sees them; every field but `rewards` is (G, K)."""

    rewards: torch.Tensor  # (G * K, reward functions), NaN at the padding (unscorable)
    scores: torch.Tensor  # float64 selection scores, NaN where unscorable
    scorable: torch.Tensor  # some reward function scored the rollout
    selectable: torch.Tensor  # scorable, and TRL keeps its loss: the rollouts selection chooses among
    model_tokens: torch.Tensor  # completion tokens the model generated (0 at the padding)
    loss_tokens: torch.Tensor  # of those, the tokens the loss sees (0 where TRL masks the row's loss)

    @property
    def size(self) -> int:
        """K, the slots of each pool."""
        return self.scores.shape[1]


def lay_out(
    rewards_per_func: torch.Tensor,
    layout: torch.Tensor,
    model_tokens: torch.Tensor,
    loss_masked: torch.Tensor,
    weights: torch.Tensor,
    aggregation: str,
) -> Pools:
    """The pools of `layout`, (G, K) rows of the generated batch in each prompt's pool (-1: padding), from the
    generated rows' (rows, reward functions) rewards and, per row, its model tokens and whether TRL masks its loss."""
    size = layout.shape[1]
    padding, rows = layout < 0, layout.clamp(min=0).flatten()
    rewards = rewards_per_func[rows.to(rewards_per_func.device)]
    rewards[padding.flatten().to(rewards.device)] = torch.nan  # unscorable: never chosen before a row
    scores, scorable = selection_scores(rewards, weights.to(rewards_per_func.device), size, aggregation)
    tokens = model_tokens[rows].view(-1, size).masked_fill(padding, 0)
    masked = loss_masked[rows].view(-1, size).bool() & ~padding
    return Pools(rewards, scores, scorable, scorable & ~masked, tokens, tokens.masked_fill(masked, 0))


def informative(rewards_per_func: torch.Tensor, weights: torch.Tensor, size: int, aggregation: str) -> torch.Tensor:
    """(G,) bool: which groups of `size` consecutive rows vary as the update sees them (on the selection scores):
    the groups dynamic sampling keeps (`pods_rl.core.dynamic_sampling`)."""
    return informative_groups(selection_scores(rewards_per_func, weights, size, aggregation)[0])


def select(pools: Pools, settings: SelectionSettings, generator: torch.Generator | None = None) -> torch.Tensor:
    """(G, K) bool mask of the rollouts the update sees, chosen among the selectable ones (a group short of them is
    filled up with other rows, which train nothing).

    `budget="per_prompt"`: m per prompt by the rule (the random rule draws from `generator`), ties broken by index or
    by the fewest tokens the loss sees. `"batch"`: each process's `rows_per_process` rows spread over its own pools,
    consecutive blocks of `rows_per_process / m` pools (`pods_rl.trainer.pools.select_per_block`).
    """
    m = settings.num_selected
    lengths = pools.loss_tokens if settings.tie_break == "shortest" else None
    if settings.budget == "batch":
        block = settings.rows_per_process // m  # pools per process
        return select_per_block(pools.scores, pools.selectable, m, block, lengths=lengths)
    return select_per_group(pools.scores, pools.selectable, m, settings.rule, generator=generator, lengths=lengths)


def advantages(
    pools: Pools, selected: torch.Tensor, weights: torch.Tensor, settings: SelectionSettings
) -> torch.Tensor:
    """(G * K,) float64 advantages of the `selected` rollouts, 0 elsewhere (`pods_rl.trainer.pools.advantages`)."""
    return pool_advantages(
        pools.rewards,
        weights,
        pools.size,
        selected,
        aggregation=settings.aggregation,
        scale=settings.scale,
        stats=settings.advantage_stats,
    ).flatten()


def row_plan(
    selected: torch.Tensor, layout: torch.Tensor, processes: int, rows_per_process: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The selected rollouts' positions in the flattened (G, K) layout, in order, and the (processes,
    rows_per_process) generated rows each process trains: the selected rows in global order, in equal, contiguous
    shares. Raises RuntimeError when the selection did not keep `processes * rows_per_process` rows."""
    positions = selected.flatten().nonzero().squeeze(1)
    rows = layout.flatten()[positions]  # in the generated rows, process-major
    if len(rows) != processes * rows_per_process:
        raise RuntimeError(
            f"The selection kept {len(rows)} rollouts; training needs {processes * rows_per_process} "
            f"({processes} processes x {rows_per_process} rows)."
        )
    return positions, rows.view(processes, rows_per_process)


def selection_metrics(
    pools: Pools, selected: torch.Tensor, settings: SelectionSettings, rows_moved: int
) -> dict[str, float]:
    """What the selection kept, under `pods/`, so runs can be audited and costed. Rewards here are the selection
    scores: the weighted sums (or, with normalize_then_sum, the normalised aggregates). Tokens are the model's (not
    tool or environment output): all generated, and those the loss sees in trained rows."""
    scores, scorable = pools.scores, pools.scorable
    kept = selected & scorable
    pool_values, kept_values = scores[scorable], scores[kept]
    metrics = {
        "pods/pool_reward_mean": _mean(pool_values),
        "pods/pool_reward_std": _std(pool_values),
        "pods/selected_reward_mean": _mean(kept_values),
        "pods/selected_reward_std": _std(kept_values),
    }
    # Squared deviation (rows x variance): what the batch budget maximises; with m rows in every group it is m
    # times the variance, so its fraction of per-prompt max-variance's is the variance fraction there.
    captured = _squared_deviation(scores, kept)
    if settings.rule == "max_variance" and settings.budget == "per_prompt":
        best = captured
    else:
        best_mask = select_per_group(scores, pools.selectable, settings.num_selected, "max_variance")
        best = _squared_deviation(scores, best_mask & scorable)
    pool_var = _squared_deviation(scores, scorable) / scorable.sum(dim=1).clamp(min=1)
    selected_var = captured / kept.sum(dim=1).clamp(min=1)
    metrics["pods/selected_var_frac_of_best"] = _ratio(captured.sum(), best.sum())
    metrics["pods/selected_var_frac_of_pool"] = _ratio(selected_var.sum(), pool_var.sum())
    metrics["pods/zero_variance_groups_frac"] = (pool_var == 0).double().mean().item()
    rows = selected.sum(dim=1)
    metrics["pods/rows_per_group_min"] = float(rows.min())
    metrics["pods/rows_per_group_mean"] = rows.double().mean().item()
    metrics["pods/rows_per_group_max"] = float(rows.max())
    metrics["pods/groups_without_rows_frac"] = (rows == 0).double().mean().item()
    metrics["pods/rollouts_generated"] = float(scores.numel())
    metrics["pods/rollouts_trained"] = float(rows.sum())
    metrics["pods/rows_moved"] = float(rows_moved)
    metrics["pods/tokens_generated"] = float(pools.model_tokens.sum())
    metrics["pods/tokens_trained"] = float(pools.loss_tokens[selected].sum())
    return metrics


def _squared_deviation(scores: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """Per group, the total squared deviation of the member scores from their mean (0 for no members)."""
    count = members.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(members, scores, 0.0).sum(dim=1, keepdim=True) / count
    return torch.where(members, scores - mean, 0.0).square().sum(dim=1)


def _mean(values: torch.Tensor) -> float:
    return values.mean().item() if values.numel() else math.nan


def _std(values: torch.Tensor) -> float:
    return values.std().item() if values.numel() > 1 else 0.0


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> float:
    """A variance fraction; 1.0 when there was no variance to capture."""
    return 1.0 if denominator.item() == 0 else (numerator / denominator).item()
