"""Dynamic sampling (DAPO): which prompt groups a generation batch keeps, whether to generate more, the fill rule.

A group whose scorable rewards are all equal has advantage 0 for every rollout in every subset: it costs its
rows in the update and teaches nothing. DAPO drops such groups and generates more prompts until the batch is full
of informative ones. Here the batch is made of P processes' local blocks of G groups each, and every process
fills its own block from its own rollouts (pools never move between processes). The decisions below depend only
on the (P, G) informative masks of the rounds so far, which every process computes from the same gathered rewards:
every process decides the same, so all join the same number of generation rounds.

The rules:

- A group is *informative* when at least two of its rollouts are scorable and their scores spread by more than
  `tolerance` (absolute): `informative_groups`.
- Another round runs while some process has fewer than G informative groups and fewer than `max_rounds` rounds
  (the first generation included) have run: `another_round_needed`.
- Each process then keeps its first G informative groups in generation order (round by round, group by group).
  A process still short after the last round fills its block with that last round's dropped groups, in order:
  the last round dropped at least the shortfall (it kept fewer than G), and the fill groups carry advantage 0,
  exactly as GRPO trains an all-equal group. So every process keeps exactly G groups: `plan_groups`.
"""

from __future__ import annotations

import torch

TOLERANCE = 1e-6  # scores closer than this (max - min within a group) count as all equal


def informative_groups(scores: torch.Tensor, tolerance: float = TOLERANCE) -> torch.Tensor:
    """(G,) bool: whether each group of (G, n) `scores` (NaN where unscorable) spreads by more than `tolerance`."""
    scorable = ~torch.isnan(scores)
    high = torch.where(scorable, scores, -torch.inf).amax(dim=1)
    low = torch.where(scorable, scores, torch.inf).amin(dim=1)
    return (scorable.sum(dim=1) >= 2) & (high - low > tolerance)


def another_round_needed(informative_rounds: list[torch.Tensor], max_rounds: int) -> bool:
    """Whether to generate one more round, from the (P, G) informative masks of the rounds run so far."""
    if len(informative_rounds) >= max_rounds:
        return False
    groups = informative_rounds[0].shape[1]
    kept = torch.stack(informative_rounds).sum(dim=(0, 2))
    return bool((kept < groups).any())


def plan_groups(informative_rounds: list[torch.Tensor]) -> torch.Tensor:
    """(P, G, 2) long: for each process and slot of its block, the (round, group) it trains, from the (P, G)
    informative masks of every round run: the first G informative groups in generation order, then, when short,
    the dropped groups of the last round in order."""
    stacked = torch.stack(informative_rounds)  # (rounds, P, G)
    rounds, processes, groups = stacked.shape
    last = rounds - 1
    plan = torch.empty((processes, groups, 2), dtype=torch.long)
    for process in range(processes):
        kept = stacked[:, process].nonzero()[:groups]  # (round, group) pairs in generation order
        fill = (~stacked[last, process]).nonzero().squeeze(1)[: groups - len(kept)]
        fill = torch.stack([torch.full_like(fill, last), fill], dim=1)
        plan[process] = torch.cat([kept, fill])
    return plan
