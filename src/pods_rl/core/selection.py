"""PODS down-sampling: choose which m of the n rollouts of each prompt group the policy update sees."""

from __future__ import annotations

import operator

import torch

RULES = ("max_variance", "max_reward", "random")
_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Candidate splits whose scores differ by less than this fraction of the score scale (m * range / 2)^2 are
# ties: far below any real difference in variance, far above the rounding of float64 sums, so CPU and GPU
# (which sum in different orders) pick the same split.
_TIE_RTOL = 1e-12


def select_rollouts(
    rewards: torch.Tensor,
    m: int,
    rule: str = "max_variance",
    *,
    valid: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.LongTensor:
    """Pick m of the n rollouts of each group; returns (G, m) indices into dim 1, ascending in each row.

    Rules:
      - "max_variance" (PODS): the m rollouts whose rewards have the largest (population) variance,
        exactly. Some optimum is the k highest plus the m-k lowest rewards for a k in 0..m, so one sort
        and prefix sums (in float64, on values centred at the midrange) score all m+1 splits at once.
      - "max_reward": the m highest rewards.
      - "random": m uniformly without replacement, drawn from `generator` (reproducible given its seed).

    Ties are broken deterministically, the same on CPU and GPU. Valid rollouts are ranked by reward,
    highest first, with a stable sort: among equal rewards the lower index ranks first. Split k takes the
    first k and the last m-k rollouts of that ranking; among splits of equal variance (equal to within a
    relative 1e-12, far below real differences, so that summation order cannot matter) the smallest k
    wins. So a group of equal rewards yields its m highest valid indices, and "max_reward" prefers lower
    indices among equal rewards.

    `valid` is an optional (G, n) bool mask: only valid rollouts can be chosen and invalid entries are
    ignored (they may hold NaN), for pools of unequal size or failed rollouts.

    Raises ValueError for a non-finite valid reward or a group with fewer than m valid rollouts (naming
    the group and rollout), m outside 1..n, an unknown rule, or a wrong shape or dtype.
    """
    rewards, valid, m = _check(rewards, m, rule, valid)
    num_groups, n = rewards.shape
    if m == n or num_groups == 0:
        return torch.arange(m, device=rewards.device).repeat(num_groups, 1)
    if rule == "random":
        return _random(rewards, m, valid, generator)
    if valid is not None:
        rewards = rewards.masked_fill(~valid, float("-inf"))  # invalid entries rank last
        count = valid.sum(dim=1, keepdim=True)
    else:
        count = n
    ranked, order = torch.sort(rewards, dim=1, descending=True, stable=True)
    if rule == "max_reward":
        return order[:, :m].sort(dim=1).values
    slots = torch.arange(m, device=rewards.device)
    tail = count - m + slots  # rank positions of the m lowest valid rewards
    k = _best_split(ranked[:, :m], ranked.gather(1, tail.expand(num_groups, m)))
    positions = torch.where(slots < k, slots, tail)
    return order.gather(1, positions).sort(dim=1).values


def _best_split(high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """Index k of the best split, shape (G, 1), from the m highest and m lowest rewards (both descending).

    Split k is high[:, :k] plus low[:, k:]; split k + 1 swaps low[:, k] for high[:, k], so the sums of x
    and x^2 over every split are those of split 0 plus prefix sums of the swaps. The score
    m * sum(x^2) - sum(x)^2 is m^2 times the variance. Centring at the midrange bounds |x| by half the
    range, so the difference cancels at most a factor of about 2m: harmless in float64, even for
    1e6 + small noise.
    """
    m = high.shape[1]
    ends = torch.cat([high, low], dim=1).double()
    ends -= (ends[:, :1] + ends[:, -1:]) / 2  # centre at the midrange
    powers = torch.stack([ends, ends.square()])  # x and x^2, (2, G, 2m)
    high, low = powers[..., :m], powers[..., m:]
    swaps = torch.nn.functional.pad(high - low, (1, 0))  # split k adds the first k swaps to split 0
    total, squares = swaps.cumsum(dim=-1) + low.sum(dim=-1, keepdim=True)  # (G, m + 1) each
    score = m * squares - total.square()
    tolerance = _TIE_RTOL * (m * ends[:, :1]).square()  # ends[:, 0] is half the range after centring
    best = score.amax(dim=1, keepdim=True)
    return (score >= best - tolerance).int().argmax(dim=1, keepdim=True)  # first (smallest) tied k


def _random(
    rewards: torch.Tensor, m: int, valid: torch.Tensor | None, generator: torch.Generator | None
) -> torch.Tensor:
    """m uniform draws without replacement: the m smallest of iid uniform keys (invalid keys set above 1)."""
    device = generator.device if generator is not None else rewards.device
    keys = torch.rand(rewards.shape, generator=generator, device=device, dtype=torch.float64)
    keys = keys.to(rewards.device)
    if valid is not None:
        keys = keys.masked_fill(~valid, 2.0)
    return keys.topk(m, dim=1, largest=False).indices.sort(dim=1).values


def _check(
    rewards: torch.Tensor, m: int, rule: str, valid: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """Validate the arguments; return the detached rewards, the mask on their device (or None) and m."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 2:
        raise ValueError(f"rewards must be a 2-D (groups, n) tensor, got {_describe(rewards)}")
    if rewards.dtype not in _DTYPES:
        raise ValueError(f"rewards must be float16, bfloat16, float32 or float64, got {rewards.dtype}")
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")
    n = rewards.shape[1]
    if isinstance(m, bool):
        raise ValueError(f"m must be an integer, got {m!r}")
    try:
        m = operator.index(m)
    except TypeError:
        raise ValueError(f"m must be an integer, got {m!r}") from None
    if not 1 <= m <= n:
        raise ValueError(f"m must be in 1..n = 1..{n}, got {m!r}")
    rewards = rewards.detach()
    if valid is not None:
        if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != rewards.shape:
            raise ValueError(f"valid must be a bool tensor of shape {tuple(rewards.shape)}, got {_describe(valid)}")
        valid = valid.to(rewards.device)
        count = valid.sum(dim=1)
        short = (count < m).nonzero()
        if len(short):
            group = short[0, 0].item()
            raise ValueError(f"group {group} has {count[group].item()} valid rollouts, fewer than m = {m}")
    bad = ~torch.isfinite(rewards)
    if valid is not None:
        bad &= valid
    if bad.any():
        group, rollout = bad.nonzero()[0].tolist()
        raise ValueError(
            f"reward of group {group}, rollout {rollout} is {rewards[group, rollout].item()}; "
            "rewards of valid rollouts must be finite"
        )
    return rewards, valid, m


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
