"""Group-relative advantages (GRPO) for the selected rollouts of each prompt group."""

from __future__ import annotations

import torch

SCALES = ("std", "none")


def group_advantages(
    rewards: torch.Tensor,
    *,
    scale: str = "std",
    eps: float = 1e-4,
    pool: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages of the selected (G, m) rewards: (r - mean) / (std + eps) within each group.

    `scale="none"` gives r - mean (Dr. GRPO). With `pool`, the full (G, n) rewards, the mean and std come
    from the whole pool instead of the selected subset (the paper's ablation; subset statistics are its
    default). The std is the unbiased one (n - 1 in the denominator), as torch.std and TRL's GRPO use; a
    group of one reward has std 0. A group whose statistics have std 0 gives zeros, even with eps = 0.
    Statistics are computed in at least float32 on values shifted by each group's first reward, so equal
    rewards give exactly zero and large offsets lose no precision. The result has the dtype of `rewards`.

    `mask`, an optional bool tensor shaped like `rewards`, makes groups of different sizes: only the entries
    it marks belong to their group (the others may hold NaN and get advantage 0). Without `pool`, the
    statistics are over the marked entries; with it, over the whole pool.
    """
    _check(rewards, "rewards")
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {', '.join(SCALES)}")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    if pool is not None:
        _check(pool, "pool")
        if pool.shape[0] != rewards.shape[0]:
            raise ValueError(
                f"pool has {pool.shape[0]} groups but rewards have {rewards.shape[0]} (shapes "
                f"{tuple(pool.shape)} and {tuple(rewards.shape)})"
            )
    if mask is not None and (
        not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != rewards.shape
    ):
        got = f"{mask.dtype} tensor of shape {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else mask
        raise ValueError(f"mask must be a bool tensor of shape {tuple(rewards.shape)}, got {got}")
    stats = rewards if pool is None else pool
    members = torch.ones_like(stats, dtype=torch.bool) if mask is None or pool is not None else mask
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, stats.dtype), torch.float32)
    shift = stats.gather(1, members.int().argmax(dim=1, keepdim=True)).to(dtype)  # each group's first member
    shifted = torch.where(members, stats.to(dtype) - shift, 0.0)
    count = members.sum(dim=1, keepdim=True)
    mean = shifted.sum(dim=1, keepdim=True) / count.clamp(min=1)
    advantages = rewards.to(dtype) - shift - mean
    if scale == "std":
        deviations = torch.where(members, shifted - mean, 0.0)
        std = (deviations.square().sum(dim=1, keepdim=True) / (count - 1).clamp(min=1)).sqrt()
        advantages = torch.where(std > 0, advantages / (std + eps), 0.0)  # zeros even when eps == 0
    if mask is not None:
        advantages = torch.where(mask, advantages, 0.0)
    return advantages.to(rewards.dtype)


def _check(values: object, name: str) -> None:
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or not values.is_floating_point():
        if isinstance(values, torch.Tensor):
            got = f"{values.dtype} tensor of shape {tuple(values.shape)}"
        else:
            got = type(values).__name__
        raise ValueError(f"{name} must be a 2-D (groups, rollouts) floating-point tensor, got {got}")
    if values.shape[1] == 0:
        raise ValueError(f"{name} must hold at least one rollout per group, got shape {tuple(values.shape)}")
