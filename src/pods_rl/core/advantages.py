"""Group-relative advantages (GRPO) for the selected rollouts of each prompt group."""

from __future__ import annotations

import torch

SCALES = ("std", "none")


def group_advantages(
    rewards: torch.Tensor, *, scale: str = "std", eps: float = 1e-4, pool: torch.Tensor | None = None
) -> torch.Tensor:
    """Advantages of the selected (G, m) rewards: (r - mean) / (std + eps) within each group.

    `scale="none"` gives r - mean (Dr. GRPO). With `pool`, the full (G, n) rewards, the mean and std come
    from the whole pool instead of the selected subset (the paper's ablation; subset statistics are its
    default). The std is the unbiased one (n - 1 in the denominator), as torch.std and TRL's GRPO use; a
    group of one reward has std 0. A group whose statistics have std 0 gives zeros, even with eps = 0.
    Statistics are computed in at least float32 on values shifted by each group's first reward, so equal
    rewards give exactly zero and large offsets lose no precision. The result has the dtype of `rewards`.
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
    stats = rewards if pool is None else pool
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, stats.dtype), torch.float32)
    shift = stats[:, :1].to(dtype)
    shifted = stats.to(dtype) - shift
    mean = shifted.mean(dim=1, keepdim=True)
    advantages = rewards.to(dtype) - shift - mean
    if scale == "std":
        correction = 1 if shifted.shape[1] > 1 else 0
        std = shifted.std(dim=1, keepdim=True, correction=correction)
        advantages = torch.where(std > 0, advantages / (std + eps), 0.0)  # zeros even when eps == 0
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
