"""One update budget per generation batch: spread a fixed number of trained rows over the prompt groups.

PODS keeps m rows of every group, even of a group whose n rewards are all equal: such rows have advantage 0 in
every subset and teach nothing. `select_batch` keeps the step's cost (a fixed number of rows) but lets each group's
share vary, so the rows of uninformative groups go to groups that gain more from them.
"""

from __future__ import annotations

import torch

from pods_rl.core.selection import (
    _TIE_RTOL,
    _as_integer,
    _best_subsets,
    _check,
    _check_lengths,
    _rank,
    _split_scores,
)


def select_batch(
    rewards: torch.Tensor,
    budget: int,
    *,
    valid: torch.Tensor | None = None,
    lengths: torch.Tensor | None = None,
) -> torch.BoolTensor:
    """Choose `budget` rollouts in all over the G groups of (G, n) `rewards`; returns a (G, n) bool mask.

    Objective: maximise the total squared deviation captured, sum over groups g of D(S_g) with
    D(S) = sum_{i in S} (r_i - mean_S)^2 = |S| * Var(S) (the squared norm of the unscaled advantages the update
    sees), over subsets S_g of valid rollouts with sum |S_g| = budget and each |S_g| = 0 or 2 <= |S_g| <= (valid
    rollouts of g): no group trains on a single row, whose advantage would be 0.

    Exact method. For fixed sizes the groups are independent, and for size s the best subset is a maximal-
    variance one (maximising s * Var at fixed s), found as in `select_rollouts` among the s + 1 splits of the
    sorted rewards: f_g(s) = max_k score / s for every s at once, from the same prefix sums. What remains is
    max sum_g f_g(s_g) subject to sum_g s_g = budget, a knapsack with unit weights. f_g is not concave (0/1
    rewards with enough of each: f(2), f(3), f(4) = 1/2, 2/3, 1, increments 1/2, 1/6, 1/3), so greedy marginal
    allocation can be wrong; a dynamic programme over (groups so far, rows used) is exact, vectorised over rows
    and sizes: O(G * budget * n) time, after O(G * n^2) for the f_g.

    Ties (many: with 0/1 rewards every even split of rows among balanced groups scores the same) are broken in
    this order: the largest objective (values within a relative 1e-12 of each other are equal, so that
    summation order cannot matter), then the fewest rows in groups whose valid rewards are all equal (they get
    rows only when every other group is full), then the smallest sum of s_g^2 (the most even spread, so with
    balanced groups every group keeps budget / G rows, as in per-prompt PODS), then the lexicographically
    smallest (s_0, s_1, ...). Within a group the subset follows `select_rollouts`' tie rule at its size,
    including the fewest-tokens rule when `lengths` (G, n) is given.

    Per-group advantages of the result: `group_advantages(rewards, mask=selected)`.

    Raises ValueError when no allocation exists (too few valid rollouts for the budget, or only groups of 2 and
    an odd budget), for a negative or non-integer budget, a non-finite valid reward, or bad lengths or shapes.
    """
    rewards, valid = _check(rewards, valid)
    lengths = _check_lengths(lengths, rewards, valid)
    budget = _check_budget(budget)
    num_groups, n = rewards.shape
    ranking = _rank(rewards, valid, lengths)
    sizes = torch.arange(n + 1, device=rewards.device)
    score, _ = _split_scores(ranking, sizes.expand(num_groups, n + 1))
    gain = score.amax(dim=2) / sizes.clamp(min=1)  # f_g(s): the best total squared deviation at size s
    gain[:, 1] = float("-inf")  # never one row: its advantage is always 0
    varied = ranking.half_range > 0  # (G, 1): some reward differs from another
    rows_squared = sizes.square()
    tie_cost = torch.where(varied, rows_squared, rows_squared + sizes * (budget**2 + 1))  # sum s^2 <= budget^2
    tolerance = _TIE_RTOL * budget * ranking.half_range.max().item() ** 2 if num_groups else 0.0
    allocation = _allocate(gain, tie_cost, budget, tolerance)
    if allocation is None:
        count = ranking.count.flatten().tolist()
        raise ValueError(
            f"cannot spread a budget of {budget} rows over groups with {count} valid rollouts: each group takes "
            "0 rows or 2 up to its valid rollouts"
        )
    return _best_subsets(ranking, allocation.unsqueeze(1))


def _allocate(gain: torch.Tensor, tie_cost: torch.Tensor, budget: int, tolerance: float) -> torch.Tensor | None:
    """Rows per group (G,) maximising sum gain[g, s_g] with sum s_g = budget, by the tie rules; None if none.

    Dynamic programme from the last group to the first: `value[b]` and `cost[b]` are the best objective and tie
    cost of the groups after g using exactly b rows. Each step is vectorised over b and s. Choosing, at each
    state, the smallest s among the best makes the forward read-out lexicographically smallest.
    """
    num_groups, sizes = gain.shape
    device = gain.device
    fits = torch.arange(budget + 1, device=device).unsqueeze(1) >= torch.arange(sizes, device=device)  # (B + 1, S)
    value = torch.full((budget + 1,), float("-inf"), dtype=torch.float64, device=device)
    value[0] = 0.0
    cost = torch.zeros(budget + 1, dtype=torch.int64, device=device)
    never = torch.iinfo(torch.int64).max
    choices = torch.zeros(num_groups, budget + 1, dtype=torch.int64, device=device)
    for group in reversed(range(num_groups)):
        # Row b, column s reads the later groups' state at b - s: a sliding window over the padded state (a view).
        later_value = _windows(value, sizes, float("-inf"))
        candidate = torch.where(fits, later_value + gain[group], float("-inf"))
        best = candidate.amax(dim=1, keepdim=True)
        eligible = torch.isfinite(candidate) & (candidate >= best - tolerance)
        candidate_cost = torch.where(eligible, _windows(cost, sizes, 0) + tie_cost[group], never)
        chosen = (candidate_cost == candidate_cost.amin(dim=1, keepdim=True)) & eligible
        choice = chosen.int().argmax(dim=1, keepdim=True)  # the smallest tied size
        choices[group] = choice.squeeze(1)
        value = candidate.gather(1, choice).squeeze(1)
        cost = candidate_cost.gather(1, choice).squeeze(1)
    if not torch.isfinite(value[budget]):
        return None
    allocation, left = [], budget
    for row in choices.tolist():
        allocation.append(row[left])
        left -= row[left]
    return torch.tensor(allocation, dtype=torch.int64, device=device)


def _windows(state: torch.Tensor, sizes: int, fill: float) -> torch.Tensor:
    """(B + 1, S) view with [b, s] = state[b - s], `fill` where b < s."""
    padded = torch.cat([state.new_full((sizes - 1,), fill), state])
    return padded.unfold(0, sizes, 1).flip(1)


def _check_budget(budget: int) -> int:
    budget = _as_integer("budget", budget)
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    return budget
