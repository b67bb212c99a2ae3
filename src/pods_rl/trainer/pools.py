"""The pools of n rollouts per prompt: what selection ranks, which rollouts it keeps, and their advantages.

Everything here follows TRL's GRPO semantics, applied to the selected subset of each pool:

- A rollout that no reward function scores (all return None) is *unscorable*: it is left out of every mean and
  std and gets advantage 0, as in TRL.
- `scale_rewards`: "group" divides by each group's std, "batch" by the std over the whole batch (of selected,
  scorable rollouts), "none" not at all.
- `multi_objective_aggregation="normalize_then_sum"` normalises each reward function within its group, sums with
  the weights, then normalises over the batch. Selection ranks rollouts on that same aggregate, computed over each
  pool: it is the signal the update learns from, and it weighs every objective by its spread rather than its raw
  scale (on raw sums a 0.1-point format reward would never move the selection against a 1-point accuracy reward).

With m == n every rollout is selected and the advantages are GRPOTrainer's.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import nanstd

from pods_rl.core import select_batch, select_rollouts

EPS = 1e-4  # TRL's: added to the std before dividing


def selection_scores(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, n: int, aggregation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, n) float64 scores that selection ranks (NaN where unscorable) and the (G, n) mask of scorable rollouts."""
    values = rewards_per_func.double().cpu().view(-1, n, rewards_per_func.shape[1])
    weights = weights.double().cpu()
    scorable = ~torch.isnan(values).all(dim=2)
    if aggregation == "normalize_then_sum":
        scores = _normalized_sum(values, weights, scorable)
    else:
        scores = (values * weights).nansum(dim=2).masked_fill(~scorable, torch.nan)
    return scores, scorable


def select_per_group(
    scores: torch.Tensor,
    scorable: torch.Tensor,
    m: int,
    rule: str,
    generator: torch.Generator | None = None,
    lengths: torch.Tensor | None = None,
) -> torch.Tensor:
    """(G, n) bool mask with exactly m rollouts per group.

    A group with at least m scorable rollouts gets `select_rollouts`' choice among them (the fewest tokens among
    maximal-variance subsets when (G, n) completion `lengths` are given). A group with fewer keeps all its scorable
    rollouts and is filled up to m with unscorable ones (lowest index first), which carry advantage 0: every group
    then has m rows, so each process still trains on its fixed share of rows and m == n trains exactly the rows
    GRPO trains. (The trainer passes as `scorable` the rows selection may choose: it also leaves out rows whose
    loss TRL masks, which then fill like unscorable ones and train nothing.)
    """
    chosen = torch.zeros_like(scorable)
    full = scorable.sum(dim=1) >= m
    if full.any():
        keep = select_rollouts(
            scores[full],
            m,
            rule,
            valid=scorable[full],
            lengths=None if lengths is None else lengths[full],
            generator=generator,
        )
        chosen[full] = torch.zeros_like(scorable[full]).scatter(1, keep, True)
    if not full.all():
        short = ~full
        # A stable sort puts scorable rollouts first, each kind in index order.
        order = torch.sort((~scorable[short]).int(), dim=1, stable=True).indices[:, :m]
        chosen[short] = torch.zeros_like(scorable[short]).scatter(1, order, True)
    return chosen


def select_per_block(
    scores: torch.Tensor, scorable: torch.Tensor, m: int, block: int, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """(G, n) bool mask: each block of `block` consecutive groups (one process's pools) gets `block * m` rows in all,
    spread over its groups by `select_batch` (0 or 2.. scorable rollouts each, the most squared deviation).

    A block whose scorable rollouts cannot make up its rows that way (0 or at least 2 per group) gets m rows per
    group from `select_per_group` instead, so groups short of scorable rollouts are filled as there.
    """
    blocks = []
    for first in range(0, len(scores), block):
        rows = slice(first, first + block)
        part_lengths = None if lengths is None else lengths[rows]
        if _can_spread(scorable[rows].sum(dim=1), block * m):
            blocks.append(select_batch(scores[rows], block * m, valid=scorable[rows], lengths=part_lengths))
        else:
            blocks.append(select_per_group(scores[rows], scorable[rows], m, "max_variance", lengths=part_lengths))
    return torch.cat(blocks) if blocks else torch.zeros_like(scorable)


def _can_spread(counts: torch.Tensor, budget: int) -> bool:
    """Whether `budget` rows can be taken as 0 or 2..counts[g] rows of each group g.

    Sums of such sizes reach every total from 2 up to the sum of the usable counts (those >= 2), except odd totals
    when every usable count is 2.
    """
    usable = counts[counts >= 2]
    odd_ok = bool((usable >= 3).any())
    return budget == 0 or (2 <= budget <= int(usable.sum()) and (budget % 2 == 0 or odd_ok))


def advantages(
    rewards_per_func: torch.Tensor,
    weights: torch.Tensor,
    n: int,
    selected: torch.Tensor,
    *,
    aggregation: str,
    scale: str,
    stats: str,
) -> torch.Tensor:
    """(G, n) float64 advantages of the selected rollouts (0 elsewhere and where unscorable).

    `stats="selected"` takes every mean and std over the selected, scorable rollouts (the paper); `"pool"` over all
    scorable rollouts of the pool (the paper's ablation).
    """
    values = rewards_per_func.double().cpu().view(-1, n, rewards_per_func.shape[1])
    weights = weights.double().cpu()
    scorable = ~torch.isnan(values).all(dim=2)
    counted = scorable & selected if stats == "selected" else scorable
    if aggregation == "normalize_then_sum":
        summed = _normalized_sum(values, weights, counted)
        mean, std = _stats(summed, counted, dim=None)
        result = (summed - mean) / (std + EPS)
    else:
        summed = (values * weights).nansum(dim=2)
        mean, std = _stats(summed, counted, dim=1)
        if scale == "batch":
            std = _stats(summed, counted, dim=None)[1]
        result = summed - mean
        if scale != "none":
            result = result / (std + EPS)
    return result.masked_fill(~(selected & scorable), 0.0)


def grpo_metrics(
    rewards_per_func: torch.Tensor, weights: torch.Tensor, names: list[str], n: int, aggregation: str, scale: str
) -> dict[str, float]:
    """What GRPOTrainer logs about rewards (`reward`, `reward_std`, `rewards/<f>/mean|std`, `frac_reward_zero_std`),
    computed on the whole pool, as a GRPO run with these n rollouts per prompt would log them."""
    metrics = {}
    for i, name in enumerate(names):
        metrics[f"rewards/{name}/mean"] = torch.nanmean(rewards_per_func[:, i]).item()
        metrics[f"rewards/{name}/std"] = nanstd(rewards_per_func[:, i]).item()
    unscorable = torch.isnan(rewards_per_func).all(dim=1)
    rewards = (rewards_per_func * weights.unsqueeze(0)).nansum(dim=1).masked_fill(unscorable, torch.nan)
    metrics["reward"] = torch.nanmean(rewards).item()
    metrics["reward_std"] = nanstd(rewards).item()
    if aggregation == "sum_then_normalize" and scale in ("group", "none"):
        std = nanstd(rewards.view(-1, n), dim=1)
    else:
        aggregate = rewards
        if aggregation == "normalize_then_sum":
            values = rewards_per_func.double().cpu().view(-1, n, rewards_per_func.shape[1])
            aggregate = _normalized_sum(values, weights.double().cpu(), ~unscorable.cpu().view(-1, n)).flatten()
        std = nanstd(aggregate).view(1)
    metrics["frac_reward_zero_std"] = torch.isclose(std, torch.zeros_like(std)).float().mean().item()
    return metrics


def _normalized_sum(values: torch.Tensor, weights: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """TRL's normalize_then_sum before its batch step: each function normalised within its group over the `counted`
    rollouts it scored, then the weighted sum; (G, n), NaN where unscorable."""
    scored = ~torch.isnan(values)
    mean, std = _stats(values, counted.unsqueeze(2) & scored, dim=1)
    normalized = (values - mean) / (std + EPS)
    scorable = scored.any(dim=2)
    return (normalized * weights).nansum(dim=2).masked_fill(~scorable, torch.nan)


def _stats(values: torch.Tensor, mask: torch.Tensor, dim: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std of `values` over `mask` (per `dim`, kept, or over everything); std 0 below 2 values."""
    dims = dim if dim is not None else tuple(range(values.dim()))
    count = mask.sum(dim=dims, keepdim=True)
    zeros = torch.zeros_like(values)
    mean = torch.where(mask, values, zeros).sum(dim=dims, keepdim=True) / count.clamp(min=1)
    squares = torch.where(mask, (values - mean).square(), zeros).sum(dim=dims, keepdim=True)
    std = (squares / (count - 1).clamp(min=1)).sqrt()
    return mean, torch.where(count > 1, std, 0.0)
