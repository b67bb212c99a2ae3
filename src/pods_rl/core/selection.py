"""PODS down-sampling: choose which m of the n rollouts of each prompt group the policy update sees."""

from __future__ import annotations

import operator
from typing import Any, NamedTuple

import torch

from pods_rl.config_rules import SELECTION_RULES as RULES

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
    lengths: torch.Tensor | None = None,
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

    `lengths`, an optional (G, n) tensor of completion lengths (tokens), makes "max_variance" cheapest among
    its optima: of all subsets of maximal variance (to the tolerance above) it returns one with the fewest
    tokens. For m >= 2 every subset of maximal variance has the rewards of some split k (swapping an inner
    reward for an outer one on either side strictly raises the variance), so the tie set is: every tied k,
    and for each, any choice among equal rewards at the two boundaries of the split. Within each reward
    value the shortest rollouts are taken (then the lower index); among tied k the smallest total length
    wins (then the smallest k). Still one sort per key and O(n) prefix sums per group. For m = 1 every
    rollout has variance 0: the shortest valid one is returned. Other rules ignore `lengths`.

    `valid` is an optional (G, n) bool mask: only valid rollouts can be chosen and invalid entries are
    ignored (they may hold NaN), for pools of unequal size or failed rollouts.

    Raises ValueError for a non-finite valid reward or a group with fewer than m valid rollouts (naming
    the group and rollout), m outside 1..n, an unknown rule, negative or non-finite valid lengths, or a
    wrong shape or dtype.
    """
    rewards, valid = _check(rewards, valid)
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; expected one of {', '.join(RULES)}")
    m = _check_size(m, rewards, valid)
    lengths = _check_lengths(lengths, rewards, valid)
    num_groups, n = rewards.shape
    if m == n or num_groups == 0:
        return torch.arange(m, device=rewards.device).repeat(num_groups, 1)
    if rule == "random":
        return _random(rewards, m, valid, generator)
    if rule == "max_reward":
        ranking = _rank(rewards, valid, None)
        return ranking.order[:, :m].sort(dim=1).values
    if lengths is not None and m == 1:  # every singleton has variance 0: the shortest wins
        keys = lengths if valid is None else lengths.masked_fill(~valid, float("inf"))
        return keys.argmin(dim=1, keepdim=True)  # the first (lowest index) of equal minima
    size = torch.full((num_groups, 1), m, device=rewards.device)
    if lengths is not None:
        chosen = _best_subsets(_rank(rewards, valid, lengths), size)
        return chosen.nonzero()[:, 1].view(num_groups, m)  # row-major: ascending within each group
    # Every split of size m lies within the m highest and m lowest valid rewards: rank only those 2m ends.
    ends = _rank(rewards, valid, None, ends=m)
    slots = torch.arange(m, device=rewards.device)
    positions = torch.where(slots < _best_split(ends, size), slots, slots + m)  # [0, k) and [m + k, 2m)
    return ends.order.gather(1, positions).sort(dim=1).values


class _Ranking(NamedTuple):
    """Valid rollouts of each group sorted by reward (highest first), with prefix sums for O(1) split scores.

    Position p of group g holds rollout `order[g, p]`; positions >= `count[g]` are invalid rollouts. With
    lengths, equal rewards are ordered shortest first, so a prefix of a reward class is its shortest members.
    """

    order: torch.Tensor  # (G, n) rollout index at each position
    count: torch.Tensor  # (G, 1) valid rollouts
    moments: torch.Tensor  # (2, G, n + 1) prefix sums of x and x^2, x centred at the group's midrange
    half_range: torch.Tensor  # (G, 1) half the range of the valid rewards (|x| <= half_range)
    # With lengths only (else None):
    tokens: torch.Tensor | None  # (G, n + 1) prefix sums of lengths
    class_start: torch.Tensor | None  # (G, n) first position of the class of equal rewards holding each position
    class_end: torch.Tensor | None  # (G, n) one past its last position


def _rank(
    rewards: torch.Tensor, valid: torch.Tensor | None, lengths: torch.Tensor | None, ends: int | None = None
) -> _Ranking:
    """The ranking of every valid rollout; with `ends` (no lengths), only of the `ends` highest then the `ends`
    lowest valid ones (they may overlap), which hold every split of size `ends`: split k is positions [0, k) and
    [ends + k, 2 ends) there."""
    num_groups, n = rewards.shape
    keys = rewards if valid is None else rewards.masked_fill(~valid, float("-inf"))  # invalid entries rank last
    count = torch.full((num_groups, 1), n, device=rewards.device) if valid is None else valid.sum(1, keepdim=True)
    if lengths is None:
        ranked, order = torch.sort(keys, dim=1, descending=True, stable=True)
    else:  # stable sorts: by reward, then length, then index
        by_length = torch.sort(lengths, dim=1, stable=True).indices
        ranked, position = torch.sort(keys.gather(1, by_length), dim=1, descending=True, stable=True)
        order = by_length.gather(1, position)
    if ends is not None:
        slots = torch.arange(ends, device=rewards.device)
        kept = torch.cat([slots.expand(num_groups, ends), count - ends + slots], dim=1)
        ranked, order = ranked.gather(1, kept), order.gather(1, kept)
        n = 2 * ends
        count = torch.full((num_groups, 1), n, device=rewards.device)
    positions = torch.arange(n, device=rewards.device)  # broadcast against (G, 1); an expanded copy is slow
    inside = positions < count
    ranked = ranked.double()
    lowest = ranked.gather(1, (count - 1).clamp(min=0))
    centre, half_range = (ranked[:, :1] + lowest) / 2, (ranked[:, :1] - lowest) / 2
    centre, half_range = (torch.where(count > 0, value, 0.0) for value in (centre, half_range))  # empty groups
    x = torch.where(inside, ranked - centre, 0.0)
    moments = torch.nn.functional.pad(torch.stack([x, x.square()]).cumsum(dim=-1), (1, 0))
    if lengths is None:
        return _Ranking(order, count, moments, half_range, None, None, None)
    tokens = torch.nn.functional.pad(lengths.gather(1, order).double().cumsum(dim=1), (1, 0))
    same = ranked[:, 1:] == ranked[:, :-1]
    new_class = torch.nn.functional.pad(~same, (1, 0), value=True)
    class_start = torch.where(new_class, positions, 0).cummax(dim=1).values
    class_ends = torch.nn.functional.pad(~same, (0, 1), value=True)
    class_end = torch.where(class_ends, positions + 1, n).flip(1).cummin(dim=1).values.flip(1)
    return _Ranking(order, count, moments, half_range, tokens, class_start, class_end)


def _split_scores(ranking: _Ranking, size: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores of every split k of every size, (G, S, K + 1) for sizes (G, S) and K = max size; and tolerances.

    Split k of size s takes positions [0, k) and [count - (s - k), count). The score s * sum(x^2) - sum(x)^2 is
    s^2 times the split's variance, or s times its total squared deviation; -inf where k > s or s > count.
    Centring at the midrange bounds |x| by half the range, so the difference cancels at most a factor of
    about 2s: harmless in float64, even for 1e6 + small noise. The tolerance, a relative 1e-12 of the score
    scale (s * half range)^2, declares ties (G, S, 1).
    """
    splits = torch.arange(int(size.max()) + 1 if size.numel() else 1, device=size.device)
    size, count = size.unsqueeze(-1), ranking.count.unsqueeze(-1)
    bottom = size - splits  # (G, S, K + 1)
    feasible = (bottom >= 0) & (size <= count)
    high = splits.expand_as(bottom).clamp(max=ranking.moments.shape[-1] - 1)
    low = (count - bottom).clamp(0, ranking.moments.shape[-1] - 1)

    def prefix(at: torch.Tensor) -> torch.Tensor:
        return ranking.moments.gather(2, at.flatten(1).expand(2, -1, -1)).view(2, *at.shape)

    total, squares = prefix(high) + prefix(count) - prefix(low)
    score = torch.where(feasible, size * squares - total.square(), float("-inf"))
    tolerance = _TIE_RTOL * (size * ranking.half_range.unsqueeze(-1)).square()
    return score, tolerance


def _tied_splits(ranking: _Ranking, size: torch.Tensor) -> torch.Tensor:
    """(G, K + 1) bool: the splits k of `size` (G, 1) whose variance is maximal, to the tolerance."""
    score, tolerance = _split_scores(ranking, size)
    score, tolerance = score[:, 0], tolerance[:, 0]  # (G, K + 1), (G, 1)
    return score >= score.amax(dim=1, keepdim=True) - tolerance


def _best_split(ranking: _Ranking, size: torch.Tensor) -> torch.Tensor:
    """(G, 1) the first (smallest) split k of maximal variance: the tie rule without lengths."""
    return _tied_splits(ranking, size).int().argmax(dim=1, keepdim=True)


def _best_subsets(ranking: _Ranking, size: torch.Tensor) -> torch.Tensor:
    """(G, n) mask of a maximal-variance subset of `size` (G, 1) valid rollouts per group, by the tie rules.

    Without lengths, split k takes positions [0, k) and [count - (size - k), count) and the smallest tied k
    wins. With lengths, the bottom part's boundary class of equal rewards (positions [class_start, class_end))
    takes its shortest members instead: those right after the top part's share of that class when both parts
    meet in one class, else the first ones of the class; the tied k with the fewest tokens wins.
    """
    num_groups, n = ranking.order.shape
    positions = torch.arange(n, device=size.device)
    if ranking.tokens is None:
        k = _best_split(ranking, size)
        chosen = (positions < k) | ((positions >= ranking.count - (size - k)) & (positions < ranking.count))
        return torch.zeros_like(chosen).scatter(1, ranking.order, chosen)
    tied = _tied_splits(ranking, size)
    splits = torch.arange(tied.shape[1], device=size.device).repeat(num_groups, 1)
    bottom = size - splits
    boundary = (ranking.count - bottom).clamp(max=n - 1)  # first position of the bottom part
    has_bottom = bottom > 0
    class_end = torch.where(has_bottom, ranking.class_end.gather(1, boundary), ranking.count)
    start = torch.where(has_bottom, torch.maximum(ranking.class_start.gather(1, boundary), splits), splits)
    taken = torch.where(has_bottom, class_end - (ranking.count - bottom), 0)  # of the boundary class
    tokens = ranking.tokens
    cost = (
        tokens.gather(1, splits.clamp(max=n))
        + tokens.gather(1, (start + taken).clamp(max=n))
        - tokens.gather(1, start.clamp(max=n))
        + tokens.gather(1, ranking.count)
        - tokens.gather(1, class_end)
    )
    k = torch.where(tied, cost, float("inf")).argmin(dim=1, keepdim=True)  # first of equal minima
    start, taken, class_end = (value.gather(1, k) for value in (start, taken, class_end))
    chosen = (positions < k) | ((positions >= start) & (positions < start + taken))
    chosen |= (positions >= class_end) & (positions < ranking.count)
    return torch.zeros_like(chosen).scatter(1, ranking.order, chosen)


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


def _check(rewards: torch.Tensor, valid: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Validate rewards and mask; return the detached rewards and the mask on their device (or None)."""
    if not isinstance(rewards, torch.Tensor) or rewards.dim() != 2:
        raise ValueError(f"rewards must be a 2-D (groups, n) tensor, got {_describe(rewards)}")
    if rewards.dtype not in _DTYPES:
        raise ValueError(f"rewards must be float16, bfloat16, float32 or float64, got {rewards.dtype}")
    rewards = rewards.detach()
    if valid is not None:
        if not isinstance(valid, torch.Tensor) or valid.dtype != torch.bool or valid.shape != rewards.shape:
            raise ValueError(f"valid must be a bool tensor of shape {tuple(rewards.shape)}, got {_describe(valid)}")
        valid = valid.to(rewards.device)
    bad = ~torch.isfinite(rewards)
    if valid is not None:
        bad &= valid
    if bad.any():
        group, rollout = bad.nonzero()[0].tolist()
        raise ValueError(
            f"reward of group {group}, rollout {rollout} is {rewards[group, rollout].item()}; "
            "rewards of valid rollouts must be finite"
        )
    return rewards, valid


def _as_integer(name: str, value: Any) -> int:
    """`value` as an int; bools and floats are refused (True would silently mean 1)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def _check_size(m: int, rewards: torch.Tensor, valid: torch.Tensor | None) -> int:
    """m as an int in 1..n, with at least m valid rollouts in every group."""
    n = rewards.shape[1]
    m = _as_integer("m", m)
    if not 1 <= m <= n:
        raise ValueError(f"m must be in 1..n = 1..{n}, got {m!r}")
    if valid is not None:
        count = valid.sum(dim=1)
        short = (count < m).nonzero()
        if len(short):
            group = short[0, 0].item()
            raise ValueError(f"group {group} has {count[group].item()} valid rollouts, fewer than m = {m}")
    return m


def _check_lengths(
    lengths: torch.Tensor | None, rewards: torch.Tensor, valid: torch.Tensor | None
) -> torch.Tensor | None:
    """Lengths as float64 on the rewards' device; those of valid rollouts must be finite and >= 0."""
    if lengths is None:
        return None
    if not isinstance(lengths, torch.Tensor) or lengths.shape != rewards.shape or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a numeric tensor of shape {tuple(rewards.shape)}, got {_describe(lengths)}")
    lengths = lengths.detach().to(device=rewards.device, dtype=torch.float64)
    bad = ~(torch.isfinite(lengths) & (lengths >= 0))
    if valid is not None:
        bad &= valid
        lengths = lengths.masked_fill(~valid, 0.0)
    if bad.any():
        group, rollout = bad.nonzero()[0].tolist()
        raise ValueError(
            f"length of group {group}, rollout {rollout} is {lengths[group, rollout].item()}; "
            "lengths of valid rollouts must be finite and >= 0"
        )
    return lengths


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
