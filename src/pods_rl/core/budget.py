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
    this order: the largest objective, then the fewest rows in groups whose valid rewards are all equal (they get
    rows only when every other group is full), then the smallest sum of s_g^2 (the most even spread, so with
    balanced groups every group keeps budget / G rows, as in per-prompt PODS), then the lexicographically
    smallest (s_0, s_1, ...). Within a group the subset follows `select_rollouts`' tie rule at its size,
    including the fewest-tokens rule when `lengths` (G, n) is given.

    Two objective values are equal when they differ by less than a relative 1e-12 of the f_g(s) terms in which
    they differ (so that summation order, which differs between CPU and GPU, cannot matter): never relative to a
    fixed scale, so one group with a huge reward range does not turn the other groups' real differences into
    ties. For that the programme runs twice. First over the groups by increasing reward range, so that each
    comparison holds only groups of at most the range of the one being decided: a reference optimum. Then in
    index order (for the lexicographic rule), on each f_g(s) minus f_g at the reference size: a group at its
    reference size adds exactly 0 to both values compared and nothing to their tolerance, however large its
    range (in one sum, a term of 1e14 would swamp a difference of 1.5).

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
    # Largest range first (stable): the programme adds the groups from the last to the first.
    order = torch.sort(ranking.half_range.flatten(), descending=True, stable=True).indices
    reference = _allocate(gain[order], tie_cost[order], budget, torch.zeros_like(order))
    if reference is None:
        count = ranking.count.flatten().tolist()
        raise ValueError(
            f"cannot spread a budget of {budget} rows over groups with {count} valid rollouts: each group takes "
            "0 rows or 2 up to its valid rollouts"
        )
    reference = torch.empty_like(reference).scatter_(0, order, reference)
    allocation = _allocate(gain, tie_cost, budget, reference)
    return _best_subsets(ranking, allocation.unsqueeze(1))


def _allocate(gain: torch.Tensor, tie_cost: torch.Tensor, budget: int, reference: torch.Tensor) -> torch.Tensor | None:
    """Rows per group (G,) maximising sum gain[g, s_g] with sum s_g = budget, by the tie rules; None if none.

    Dynamic programme from the last group to the first: `value[b]` and `cost[b]` are the best objective and tie
    cost of the groups after g using exactly b rows, the objective counted from `reference` (G,) sizes (the
    terms gain[g, s] - gain[g, reference[g]]), and `scale[b]` the sum of gain[g, s] + gain[g, reference[g]] over
    its groups off their reference size: a candidate is tied with the best when they differ by less than
    `_TIE_RTOL` times their two scales. Each step is vectorised over b and s. Choosing, at each state, the
    smallest s among the best makes the forward read-out lexicographically smallest.
    """
    num_groups, sizes = gain.shape
    device = gain.device
    fits = torch.arange(budget + 1, device=device).unsqueeze(1) >= torch.arange(sizes, device=device)  # (B + 1, S)
    at_reference = gain.gather(1, reference.unsqueeze(1))
    off_reference = torch.arange(sizes, device=device) != reference.unsqueeze(1)
    term_scale = torch.where(off_reference & torch.isfinite(gain), gain + at_reference, 0.0)
    gain = gain - at_reference
    value = torch.full((budget + 1,), float("-inf"), dtype=torch.float64, device=device)
    value[0] = 0.0
    scale = torch.zeros(budget + 1, dtype=torch.float64, device=device)
    cost = torch.zeros(budget + 1, dtype=torch.int64, device=device)
    never = torch.iinfo(torch.int64).max
    choices = torch.zeros(num_groups, budget + 1, dtype=torch.int64, device=device)
    for group in reversed(range(num_groups)):
        # Row b, column s reads the later groups' state at b - s: a sliding window over the padded state (a view).
        later_value = _windows(value, sizes, float("-inf"))
        candidate = torch.where(fits, later_value + gain[group], float("-inf"))
        candidate_scale = _windows(scale, sizes, 0.0) + term_scale[group]
        best = candidate.argmax(dim=1, keepdim=True)
        margin = _TIE_RTOL * (candidate_scale + candidate_scale.gather(1, best))
        eligible = torch.isfinite(candidate) & (candidate >= candidate.gather(1, best) - margin)
        candidate_cost = torch.where(eligible, _windows(cost, sizes, 0) + tie_cost[group], never)
        chosen = (candidate_cost == candidate_cost.amin(dim=1, keepdim=True)) & eligible
        choice = chosen.int().argmax(dim=1, keepdim=True)  # the smallest tied size
        choices[group] = choice.squeeze(1)
        value = candidate.gather(1, choice).squeeze(1)
        scale = candidate_scale.gather(1, choice).squeeze(1)
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
