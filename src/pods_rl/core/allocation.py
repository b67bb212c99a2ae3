"""Rollouts per prompt chosen adaptively: generation spent on the prompts that teach, pure PyTorch.

PODS chooses which of a prompt's rollouts the update trains on; every prompt still gets the same number generated,
even one the model always or never solves (its rewards are all equal, its advantages 0). This module decides how
many rollouts each prompt gets. It reads top to bottom in five parts:

1. What a group of k rollouts is worth (`captured_deviation`, `value_table`), for rewards that are successes or
   failures, with PODS keeping m of the k by maximal variance: the expected reward variance the update captures,
   the chance that it varies, or Knapsack RL's value. Exactly, from the count of successes.
2. An exact knapsack (`allocate`): given each prompt's value at each allowed size and a budget of rollouts, the sizes
   that maximise the total value (Knapsack RL, arXiv 2509.25849), by dynamic programming over the budget.
3. A per-prompt pass-rate history (`PassRateHistory`): a Beta posterior per prompt, the predicted chance that a
   group of k is all-equal, and skipping with an exploration probability (GRESO, arXiv 2506.02177). Saved and
   restored bit-exactly.
4. Screen then extend (`screen_passes`, `plan_screening`): k screening rollouts for more prompts than the step
   trains, then the rest of the pool for those whose screen varies or whose pass rate lies in a band (SPEED-RL,
   arXiv 2506.09016). Planning from the history (`plan_from_history`) is the same step without screening.
5. Pools of different sizes (`pad_pools`): the selection functions (`select_rollouts`, `select_batch`) already take
   a `valid` mask, so variable pools are NaN-padded rows with a mask; nothing in selection changes.

Every decision here is a deterministic function of its inputs (and of a seeded generator for the exploration draws),
so processes that see the same gathered rewards decide the same without communicating.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from pods_rl.config_rules import ALLOCATION_OBJECTIVES as OBJECTIVES
from pods_rl.config_rules import PODS_DEFAULTS
from pods_rl.core.dynamic_sampling import TOLERANCE, informative_groups

SUCCESS_THRESHOLD = PODS_DEFAULTS["success_threshold"]  # a rollout whose score is at least this is a success
_TIE_RTOL = 1e-12  # knapsack totals this close (relative to their terms) are ties; as in selection and budget


# ----------------------------------------------------------------------------------------------------------------
# 1. What a group of k rollouts is worth
#
# Model: each rollout of a prompt succeeds (reward 1) or fails (reward 0) independently with the prompt's pass rate
# p, so the number of successes s of k rollouts is Binomial(k, p). When p itself is uncertain, with a Beta(alpha,
# beta) posterior (part 3), s is Beta-binomial: the prediction integrates over p.
#
# What PODS keeps of a pool with s successes and f = k - s failures: the max-variance rule keeps m rollouts, a of
# them successes, with a as close to m / 2 as the pool allows, a in [max(0, m - f), min(s, m)]: the squared
# deviation a (m - a) / m of m binary rewards is concave in a and largest at a = m / 2 (`select_rollouts` finds
# exactly this optimum; a test checks the two agree). A pool smaller than m is kept whole.
#
# The objectives the knapsack can maximise (`allocation_objective`), each a function of k, m and p:
# - "variance": the expected total squared deviation of the kept rewards, E[sum_i (r_i - mean)^2] over the rows the
#   update trains. It is the expected squared norm of the advantages when no group is divided by its own std
#   (`scale_rewards="none"`, Dr. GRPO; or "batch", where one std divides the whole step): for binary rewards it grows
#   with p (1 - p) (the quantity VIP, arXiv 2602.01601, relates to the gradient's variance under Dr. GRPO and RLOO).
#   It is also what the training side maximises (`select_batch` spreads a step's rows to capture the most squared
#   deviation), and it is 0 exactly for a group whose kept rewards are all equal.
# - "informative": the probability that the kept rewards vary, 1 - p^k - (1 - p)^k when min(m, k) >= 2: the
#   expected number of groups with a non-zero gradient. It is the expected squared norm of the advantages, over
#   m - 1, when each group is divided by its own std (`scale_rewards="group"`, TRL's default, with the advantage
#   statistics of the selected rows; and `normalize_then_sum`, which normalises each reward function within its
#   group): the squared advantages of every varied group of m then sum to m - 1 (up to TRL's 1e-4 in the divisor),
#   whatever its p. It favours hard and easy prompts more than "variance" does.
# - "knapsack_rl": Knapsack RL's value (Li et al., arXiv 2509.25849), ProbNonZeroGradient(k, p) x InfoGain(p) =
#   (1 - p^k - (1 - p)^k) x p (1 - p)^2, 0 when min(m, k) < 2. InfoGain approximates the rise in the prompt's success
#   rate that one update on it brings; it peaks at p = 1/3, so this value moves rollouts from easy prompts to hard
#   ones, where the other two are symmetric in p and 1 - p. The paper's text could not be read here, so its equation
#   number is not cited: the formula is the one in the authors' code (github.com/liziniu/KnapsackRL,
#   verl/trainer/ppo/exploration_utils.py, the DP's value). Its N is the pool PODS generates: max-variance selection
#   keeps both outcomes whenever the pool has both, so the kept m vary exactly when the pool does.
# The default, "auto", is the objective that the advantage scaling in use makes the expected squared norm of the
# advantages: "informative" under group std scaling or normalize_then_sum, "variance" otherwise
# (`pods_rl.config_rules.allocation_objective`). "knapsack_rl" is asked for by name: it values a gain in success
# rate, not the size of the update.
#
# With m = 2 or 3 (pools of m or more) "variance" and "informative" are proportional: every varied pool keeps a
# squared deviation of 1/2 (m = 2: one success, one failure) or 2/3 (m = 3: one of one kind, two of the other), so
# both allocate alike. They differ from m = 4 on, where an unbalanced pool keeps less than a balanced one.
#
# Under a Beta(alpha, beta) posterior each value is its expectation over p: "variance" and "informative" through the
# Beta-binomial count of successes, as for a point estimate through the binomial; "knapsack_rl" as E[p (1 - p)^2] =
# alpha beta (beta + 1) / ((alpha + beta) (alpha + beta + 1) (alpha + beta + 2)) times the probability of variation
# under Beta(alpha + 1, beta + 2), the posterior that the weight p (1 - p)^2 tilts Beta(alpha, beta) into (so that
# E[p (1 - p)^2 1{varies}] is exact, not a product of two expectations).
# ----------------------------------------------------------------------------------------------------------------


def captured_deviation(k: int, m: int) -> torch.Tensor:
    """(k + 1,) float64: the squared deviation sum_i (r_i - mean)^2 that max-variance selection keeps of a pool of k
    binary rewards with s = 0..k successes, keeping min(m, k) of them, as balanced as the pool allows."""
    k, m = _count("k", k), _count("m", m)
    kept = min(m, k)
    successes = torch.arange(k + 1, dtype=torch.float64)
    if kept == 0:
        return torch.zeros(k + 1, dtype=torch.float64)
    low = (kept - (k - successes)).clamp(min=0)  # at least this many successes, when failures run out
    high = successes.clamp(max=kept)
    taken = torch.clamp(torch.full_like(successes, kept // 2), low, high)
    return taken * (kept - taken) / kept


def binomial_pmf(k: int, pass_rate: torch.Tensor) -> torch.Tensor:
    """(G, k + 1) float64: P(s successes of k) for each of the (G,) pass rates in [0, 1]."""
    k = _count("k", k)
    p = _probabilities("pass_rate", pass_rate)
    s = torch.arange(k + 1, dtype=torch.float64)
    ways = torch.tensor([math.comb(k, i) for i in range(k + 1)], dtype=torch.float64)
    return ways * p.unsqueeze(1).pow(s) * (1 - p).unsqueeze(1).pow(k - s)  # 0^0 = 1 in torch


def beta_binomial_pmf(k: int, alpha: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    """(G, k + 1) float64: P(s successes of k) when the pass rate is Beta(alpha, beta) distributed (alpha, beta > 0):
    C(k, s) B(s + alpha, k - s + beta) / B(alpha, beta), through log-gamma (relative error ~1e-13)."""
    k = _count("k", k)
    alpha, beta = _positive("alpha", alpha), _positive("beta", beta)
    if alpha.shape != beta.shape:
        raise ValueError(f"alpha and beta must have one shape, got {tuple(alpha.shape)} and {tuple(beta.shape)}")
    s = torch.arange(k + 1, dtype=torch.float64)
    a, b = alpha.unsqueeze(1), beta.unsqueeze(1)
    log_ways = torch.lgamma(torch.tensor(k + 1.0, dtype=torch.float64)) - torch.lgamma(s + 1) - torch.lgamma(k - s + 1)
    log_pmf = log_ways + _log_beta(s + a, k - s + b) - _log_beta(a, b)
    return log_pmf.exp()


def zero_variance_probability(pmf: torch.Tensor) -> torch.Tensor:
    """(G,) the probability that a group is all-equal (all successes or all failures), from its (G, k + 1) pmf."""
    return pmf[:, 0] + pmf[:, -1] if pmf.shape[1] > 1 else torch.ones(pmf.shape[0], dtype=torch.float64)


def value_table(
    sizes: Sequence[int],
    m: int,
    *,
    pass_rate: torch.Tensor | None = None,
    alpha: torch.Tensor | None = None,
    beta: torch.Tensor | None = None,
    objective: str = "variance",
) -> torch.Tensor:
    """(G, S) float64: what a group of each allowed size (S,) is worth to each of G prompts, under `objective`.

    Give either `pass_rate` (G,) point estimates or a Beta posterior `alpha`, `beta` (G,); the value is the
    expectation over p (part 1's comment). "variance": expected squared deviation kept by max-variance selection of m
    (`captured_deviation`), in units of the squared reward range (1 for 0/1 rewards). "informative": probability that
    the kept rewards vary. "knapsack_rl": Knapsack RL's (1 - p^k - (1 - p)^k) x p (1 - p)^2. A size below 2 (or an m
    below 2) is worth 0 under each.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; expected one of {', '.join(OBJECTIVES)}")
    if (pass_rate is None) == (alpha is None and beta is None) or (alpha is None) != (beta is None):
        raise ValueError("give either pass_rate or both alpha and beta")
    sizes = _sizes(sizes)
    m = _count("m", m)
    gain = None  # knapsack_rl's E[p (1 - p)^2]; the count of successes is then taken under the tilted posterior
    if objective == "knapsack_rl" and pass_rate is not None:
        p = _probabilities("pass_rate", pass_rate)
        gain = p * (1 - p).square()
    elif objective == "knapsack_rl":
        a, b = _positive("alpha", alpha), _positive("beta", beta)
        gain = a * b * (b + 1) / ((a + b) * (a + b + 1) * (a + b + 2))
        alpha, beta = a + 1, b + 2
    columns = []
    for k in sizes:
        pmf = binomial_pmf(k, pass_rate) if pass_rate is not None else beta_binomial_pmf(k, alpha, beta)
        if objective == "variance":
            columns.append(pmf @ captured_deviation(k, m))
            continue
        varies = 1 - zero_variance_probability(pmf)
        varies = varies if min(m, k) >= 2 else torch.zeros_like(varies)
        columns.append(varies if gain is None else gain * varies)
    return torch.stack(columns, dim=1)


# ----------------------------------------------------------------------------------------------------------------
# 2. The knapsack: rollouts per prompt under a budget, exactly
#
# Knapsack RL (arXiv 2509.25849) casts a step's rollouts as a knapsack: each prompt is an item whose value depends on
# the rollouts it gets, the budget is the step's generation. Values are not concave in k (part 1's tables rise in
# steps), so greedy marginal allocation can be wrong; a dynamic programme over (prompts so far, rollouts used) is
# exact. VIP (arXiv 2602.01601) solves a continuous relaxation of the same allocation; here sizes are integers.
# ----------------------------------------------------------------------------------------------------------------


def allocate(
    values: torch.Tensor, sizes: Sequence[int], budget: int, *, count: int | None = None, exact: bool = False
) -> torch.Tensor:
    """(G,) int64: the size each of G prompts gets, from the allowed `sizes` (S,), maximising the total value.

    `values` (G, S) holds each prompt's value at each size (-inf: that size is not allowed for that prompt).
    Constraints: the sizes sum to at most `budget` (exactly `budget` with `exact`: then every process of a step that
    spends the same budget generates the same number of rows); with `count`, exactly `count` prompts get a size
    above 0 (so a step can choose which of its candidates to generate for and still train a fixed number of prompts).

    Ties, in this order: the largest total value; then the fewest rollouts (value that costs nothing extra is not
    bought); then the smallest sum of squared sizes (the most even spread: identical prompts get sizes that differ by
    at most one step); then the lexicographically smallest (k_0, k_1, ...). Totals closer than a relative 1e-12 of
    the values they sum are tied, so the order in which floating-point sums are formed cannot decide.

    Exact method: from the last prompt to the first, the best total of the prompts after g for every (rollouts
    used, prompts given a size above 0) state, over every size of prompt g; O(G * budget * (count + 1) * S).
    Raises ValueError when no choice satisfies the constraints, and for bad shapes or values.
    """
    sizes = _sizes(sizes)
    budget = _count("budget", budget)
    if not isinstance(values, torch.Tensor) or values.dim() != 2 or values.shape[1] != len(sizes):
        got = tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__
        raise ValueError(f"values must be a (prompts, {len(sizes)} sizes) tensor, got {got}")
    values = values.detach().to("cpu", torch.float64)
    if torch.isnan(values).any() or (values == float("inf")).any():
        raise ValueError("values must be finite or -inf (a size not allowed), got NaN or +inf")
    num_prompts = values.shape[0]
    if count is not None:
        count = _count("count", count)
        if count > num_prompts:
            raise ValueError(f"count ({count}) exceeds the {num_prompts} prompts")
    counted = count if count is not None else 0  # without a count the second state coordinate stays 0
    steps = [1 if count is not None and size > 0 else 0 for size in sizes]

    shape = (budget + 1, counted + 1)
    best = torch.full(shape, float("-inf"), dtype=torch.float64)
    best[0, 0] = 0.0
    scale = torch.zeros(shape, dtype=torch.float64)  # sum of |value| of the chosen terms: the tie tolerance's scale
    squares = torch.zeros(shape, dtype=torch.int64)
    choices = torch.zeros((num_prompts, *shape), dtype=torch.int16)  # index into sizes
    never = torch.iinfo(torch.int64).max
    size_squares = torch.tensor([size * size for size in sizes]).view(-1, 1, 1)
    for prompt in reversed(range(num_prompts)):
        # [j, b, c]: size j for this prompt, the later prompts' best with b - sizes[j] rollouts and c - steps[j]
        value = values[prompt].view(-1, 1, 1)
        candidate = _shifted(best, sizes, steps, float("-inf")) + value
        candidate_scale = _shifted(scale, sizes, steps, 0.0) + value.abs().nan_to_num(posinf=0.0)
        candidate_squares = _shifted(squares, sizes, steps, 0) + size_squares
        top = candidate.amax(dim=0, keepdim=True)
        top_scale = candidate_scale.gather(0, candidate.argmax(dim=0, keepdim=True))
        tied = torch.isfinite(candidate) & (candidate >= top - _TIE_RTOL * (candidate_scale + top_scale))
        cost = torch.where(tied, candidate_squares, never)
        chosen = tied & (cost == cost.amin(dim=0, keepdim=True))
        choice = chosen.int().argmax(dim=0, keepdim=True)  # the smallest size among the tied
        choices[prompt] = choice.squeeze(0).to(torch.int16)
        best = candidate.gather(0, choice).squeeze(0)
        scale = candidate_scale.gather(0, choice).squeeze(0)
        squares = candidate_squares.gather(0, choice).squeeze(0)

    final = best[:, counted]  # every rollout count the budget allows, with the required prompts
    if exact:
        final = torch.where(torch.arange(budget + 1) == budget, final, float("-inf"))
    if not torch.isfinite(final).any():
        wanted = f" with exactly {count} prompts above size 0" if count is not None else ""
        fits = "adds up to" if exact else "fits"
        raise ValueError(
            f"no choice of sizes {list(sizes)} for {num_prompts} prompts {fits} a budget of {budget} rollouts{wanted}"
        )
    top = final.max()
    top_scale = scale[final.argmax(), counted]
    used = int((torch.isfinite(final) & (final >= top - _TIE_RTOL * (scale[:, counted] + top_scale))).int().argmax())
    allocation, step_count = [], counted
    for prompt in range(num_prompts):
        j = int(choices[prompt, used, step_count])
        allocation.append(sizes[j])
        used -= sizes[j]
        step_count -= steps[j]
    return torch.tensor(allocation, dtype=torch.int64)


def _shifted(state: torch.Tensor, sizes: list[int], steps: list[int], fill: float) -> torch.Tensor:
    """(S, B + 1, C + 1): for each size j, `state` moved down by sizes[j] and right by steps[j], so that [j, b, c] holds
    state[b - sizes[j], c - steps[j]] (`fill` where that is outside)."""
    rows, columns = state.shape
    shifted = []
    for size, step in zip(sizes, steps, strict=True):
        padded = torch.nn.functional.pad(state, (step, 0, size, 0), value=fill)
        shifted.append(padded[:rows, :columns])
    return torch.stack(shifted)


# ----------------------------------------------------------------------------------------------------------------
# 3. Each prompt's pass rate across epochs
#
# GRESO (arXiv 2506.02177) observes that a prompt whose rollouts all got the same reward in one epoch is likely to do
# so again in the next, and skips such prompts before generating, with a probability that grows with how many
# times in a row it happened (1 - p_e^z after z times), keeping an exploration probability so that a prompt the
# model has started to solve (or to fail) can come back. Here the history is a Beta posterior of each prompt's pass
# rate instead of a streak count, which gives both the skip probability and the knapsack's values (part 2):
#
# - prior Beta(prior_successes, prior_failures); each observed group adds its successes and failures to the
#   evidence, after multiplying the old evidence by `decay` (1: every epoch counts alike; below 1, older epochs
#   count less, for a policy that changes);
# - a success is a score >= `success_threshold`; with no threshold, scores are fractional successes in [0, 1]
#   (score r adds r successes and 1 - r failures);
# - the predicted probability that a group of k is all-equal is the Beta-binomial P(s = 0) + P(s = k);
# - a prompt seen at least once is skipped with probability (1 - exploration) times that prediction: skipped as
#   often as its group is predicted to teach nothing, but generated with probability at least `exploration`. A
#   prompt never seen is never skipped (the prior alone says nothing about it).
# ----------------------------------------------------------------------------------------------------------------


def prompt_id(prompt: Any) -> str:
    """A stable id for a prompt (text or chat messages): the SHA-256 of its canonical JSON, the same on every
    process and in every run."""
    return hashlib.sha256(json.dumps(prompt, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def count_outcomes(scores: torch.Tensor, success_threshold: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(G,) successes and (G,) failures in each group of (G, k) scores; NaN entries count in neither.

    A success is a score >= `success_threshold`; with None, scores must lie in [0, 1] and score r counts as r
    successes and 1 - r failures (fractional rewards)."""
    scores = scores.detach().to("cpu", torch.float64)
    scored = ~torch.isnan(scores)
    if success_threshold is None:
        bad = scored & ((scores < 0) | (scores > 1))
        if bad.any():
            group, rollout = bad.nonzero()[0].tolist()
            raise ValueError(
                f"score {scores[group, rollout].item()} of group {group}, rollout {rollout} is outside [0, 1]: "
                "without a success threshold scores are fractional successes"
            )
        successes = torch.where(scored, scores, 0.0)
    else:
        successes = (scored & (scores >= success_threshold)).double()
    return successes.sum(dim=1), scored.sum(dim=1) - successes.sum(dim=1)


class PassRateHistory:
    """Beta posteriors of the pass rates of prompts seen so far, and the exploration draws for skipping them."""

    def __init__(
        self,
        *,
        prior_successes: float = 1.0,
        prior_failures: float = 1.0,
        success_threshold: float | None = SUCCESS_THRESHOLD,
        decay: float = 1.0,
        exploration: float = 0.1,
        seed: int = 0,
    ):
        for name, value in (("prior_successes", prior_successes), ("prior_failures", prior_failures)):
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if success_threshold is not None and not math.isfinite(success_threshold):
            raise ValueError(f"success_threshold must be finite or None, got {success_threshold!r}")
        if not 0 < decay <= 1:
            raise ValueError(f"decay must be in (0, 1], got {decay!r}")
        if not 0 <= exploration <= 1:
            raise ValueError(f"exploration must be in [0, 1], got {exploration!r}")
        self.prior = (float(prior_successes), float(prior_failures))
        self.success_threshold = success_threshold
        self.decay = float(decay)
        self.exploration = float(exploration)
        self.generator = torch.Generator().manual_seed(seed)
        self._evidence: dict[str, tuple[float, float]] = {}  # id -> (successes, failures), insertion ordered

    def __len__(self) -> int:
        return len(self._evidence)

    def observe(self, prompt_ids: Sequence[str], scores: torch.Tensor) -> None:
        """Add each prompt's group of (G, k) `scores` (NaN: not scored or not generated) to its evidence, in order."""
        ids = _ids(prompt_ids)
        if not isinstance(scores, torch.Tensor) or scores.dim() != 2 or scores.shape[0] != len(ids):
            got = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            raise ValueError(f"scores must be a ({len(ids)} prompts, rollouts) tensor, got {got}")
        successes, failures = count_outcomes(scores, self.success_threshold)
        for key, success, failure in zip(ids, successes.tolist(), failures.tolist(), strict=True):
            old_success, old_failure = self._evidence.get(key, (0.0, 0.0))
            self._evidence[key] = (self.decay * old_success + success, self.decay * old_failure + failure)

    def seen(self, prompt_ids: Sequence[str]) -> torch.Tensor:
        """(G,) bool: whether each prompt has been observed."""
        return torch.tensor([key in self._evidence for key in _ids(prompt_ids)], dtype=torch.bool)

    def posterior(self, prompt_ids: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(G,) alpha and (G,) beta of each prompt's Beta posterior (the prior for a prompt never seen)."""
        evidence = [self._evidence.get(key, (0.0, 0.0)) for key in _ids(prompt_ids)]
        successes = torch.tensor([e[0] for e in evidence], dtype=torch.float64)
        failures = torch.tensor([e[1] for e in evidence], dtype=torch.float64)
        return self.prior[0] + successes, self.prior[1] + failures

    def pass_rate(self, prompt_ids: Sequence[str]) -> torch.Tensor:
        """(G,) posterior mean pass rates."""
        alpha, beta = self.posterior(prompt_ids)
        return alpha / (alpha + beta)

    def zero_variance_probability(self, prompt_ids: Sequence[str], k: int) -> torch.Tensor:
        """(G,) predicted probability that a group of k rollouts of each prompt is all-equal."""
        return zero_variance_probability(beta_binomial_pmf(k, *self.posterior(prompt_ids)))

    def skip_probability(self, prompt_ids: Sequence[str], k: int) -> torch.Tensor:
        """(G,) (1 - exploration) x the all-equal prediction at k for prompts seen before, 0 for the others."""
        predicted = self.zero_variance_probability(prompt_ids, k)
        return torch.where(self.seen(prompt_ids), (1 - self.exploration) * predicted, 0.0)

    def draw_skips(self, prompt_ids: Sequence[str], k: int) -> torch.Tensor:
        """(G,) bool: which prompts to skip, one uniform draw per prompt (in order) from the history's generator."""
        probability = self.skip_probability(prompt_ids, k)
        draws = torch.rand(len(probability), generator=self.generator, dtype=torch.float64)
        return draws < probability

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit-exactly: settings, evidence (float64, in insertion order), generator."""
        evidence = torch.tensor(list(self._evidence.values()), dtype=torch.float64).view(-1, 2)
        return {
            "settings": {
                "prior_successes": self.prior[0],
                "prior_failures": self.prior[1],
                "success_threshold": self.success_threshold,
                "decay": self.decay,
                "exploration": self.exploration,
            },
            "ids": list(self._evidence),
            "evidence": evidence,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`; raises ValueError when its settings differ from this history's (a resumed run
        must keep the settings it started with)."""
        saved = state["settings"]
        current = self.state_dict()["settings"]
        if saved != current:
            changed = ", ".join(
                f"{key} {saved.get(key)!r} -> {current[key]!r}" for key in current if saved.get(key) != current[key]
            )
            raise ValueError(f"the saved pass-rate history has other settings: {changed}")
        ids, evidence = list(state["ids"]), state["evidence"]
        if evidence.shape != (len(ids), 2):
            raise ValueError(f"the saved evidence has shape {tuple(evidence.shape)}, expected ({len(ids)}, 2)")
        self._evidence = dict(zip(_ids(ids), map(tuple, evidence.to(torch.float64).tolist()), strict=True))
        self.generator.set_state(state["generator"])


# ----------------------------------------------------------------------------------------------------------------
# 4. Planning a step: screen then extend, or from the history
#
# SPEED-RL (arXiv 2506.09016) screens each candidate prompt with a few rollouts and spends the rest of the
# generation only on those of intermediate difficulty: in a binary task, those whose screening rollouts were not all
# correct and not all wrong. Here the screening rollouts stay in the prompt's pool (extended from k to n), and a step
# trains a fixed number G of prompts per process, so that every process keeps its rows. Candidates come in rounds
# (the trainer draws further prompts as dynamic sampling does: `dynamic_sampling.another_round_needed` on the pass
# masks tells whether another round is needed); the plan reads every round's screens in generation order.
# ----------------------------------------------------------------------------------------------------------------


def screen_passes(
    scores: torch.Tensor,
    *,
    band: tuple[float, float] | None = None,
    success_threshold: float | None = SUCCESS_THRESHOLD,
    tolerance: float = TOLERANCE,
) -> torch.Tensor:
    """(P,) bool: which of P candidates' (P, k) screening scores (NaN where unscorable) earn the extension.

    Without `band`: the scores vary (spread by more than `tolerance`, as dynamic sampling's informative groups).
    With `band` (low, high): the estimated pass rate, successes over scored rollouts (successes as in
    `count_outcomes`), lies in [low, high]; a candidate with no scored rollout never passes.
    """
    if band is None:
        return informative_groups(scores, tolerance)
    low, high = _band(band)
    successes, failures = count_outcomes(scores, success_threshold)
    scored = successes + failures
    rate = successes / scored.clamp(min=1e-300)
    return (scored > 0) & (rate >= low) & (rate <= high)


class StepPlan(NamedTuple):
    """Which candidates a process trains this step and how many rollouts each one's pool holds."""

    chosen: torch.Tensor  # (G,) int64 candidate indices, in training order
    sizes: torch.Tensor  # (G,) int64 rollouts in each chosen candidate's pool (its screening rollouts included)
    qualified: torch.Tensor  # (G,) bool: chosen on merit (passed the screen, or not skipped), not as a fill


def plan_screening(
    scores: torch.Tensor,
    groups: int,
    pool_size: int,
    min_size: int,
    *,
    passes: torch.Tensor | None = None,
    extend: int | None = None,
) -> StepPlan:
    """Plan one process's step from the (P, k) screening scores of its P candidates (every round, in order).

    Chosen: the first `groups` candidates that pass (`passes`, default: `screen_passes(scores)`); when fewer pass,
    the step is filled with the others, first those whose screening scores vary (they already teach something),
    then the rest, each kind in candidate order. Extended to `pool_size` rollouts: the first `extend` chosen (default:
    those that passed; at least those). The others keep their k screening rollouts: the screen predicts that more of
    them teach little. `extend` lets every process extend the same number of prompts (the most that passed on any
    process), so that all generate and gather the same number of rows. A screen smaller than `min_size` (the rows
    selection keeps per prompt) cannot be trained unextended: then every chosen candidate is extended by default, and
    a smaller `extend` is an error. Raises ValueError for fewer than `groups` candidates.
    """
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise ValueError(f"scores must be a 2-D (candidates, screening rollouts) tensor, got {_describe(scores)}")
    candidates, screen = scores.shape
    groups, pool_size, min_size = _count("groups", groups), _count("pool_size", pool_size), _count("min_size", min_size)
    if screen >= pool_size:
        raise ValueError(f"the screen ({screen} rollouts) must be smaller than the pool ({pool_size})")
    if candidates < groups:
        raise ValueError(f"{candidates} candidates cannot fill a step of {groups} prompts")
    passes = screen_passes(scores) if passes is None else passes.to("cpu", torch.bool)
    if passes.shape != (candidates,):
        raise ValueError(f"passes must be a ({candidates},) bool tensor, got {_describe(passes)}")
    varied = informative_groups(scores.detach().cpu())
    # Rank: passing candidates, then varied ones, then the rest; candidate order within each (a stable sort).
    rank = torch.where(passes, 0, torch.where(varied, 1, 2))
    chosen = torch.sort(rank, stable=True).indices[:groups]
    qualified = passes[chosen]
    passed = int(qualified.sum())
    if extend is None:
        extend = passed if screen >= min_size else groups
    extend = _count("extend", extend)
    if not passed <= extend <= groups:
        raise ValueError(f"extend must lie between the {passed} chosen that passed and all {groups}, got {extend}")
    if screen < min_size and extend < groups:
        raise ValueError(
            f"a screen of {screen} rollouts is smaller than the {min_size} selection keeps: every chosen candidate "
            f"must be extended (extend={groups}), got extend={extend}"
        )
    sizes = torch.where(torch.arange(groups) < extend, pool_size, screen).to(torch.int64)
    return StepPlan(chosen, sizes, qualified)


def plan_from_history(
    history: PassRateHistory,
    prompt_ids: Sequence[str],
    groups: int,
    sizes: Sequence[int],
    budget: int,
    m: int,
    *,
    skip_at: int,
    objective: str = "variance",
    skipped: torch.Tensor | None = None,
) -> tuple[StepPlan, torch.Tensor]:
    """Plan one process's step from the history of its P candidates (in order); returns the plan and the (P,) skips.

    GRESO's step: each candidate is skipped with `history.skip_probability` at `skip_at` rollouts (one draw each,
    in order). The first `groups` candidates not skipped are trained; when fewer remain, the step is filled with
    skipped ones, the least likely to be all-equal first (then in candidate order): they are generated anyway, as
    exploration. Knapsack RL's step: the trained candidates' sizes come from `allocate` over `sizes` (all >= m, so
    that selection keeps m of each), adding up to exactly `budget` rollouts (so that every process, spending the same
    budget, generates and gathers the same number of rows), on their Beta-posterior value tables. `skipped` (P,) bool:
    the skips already drawn (a trainer draws them round by round, for every process's candidates), instead of drawing.
    """
    ids = _ids(prompt_ids)
    groups = _count("groups", groups)
    if len(ids) < groups:
        raise ValueError(f"{len(ids)} candidates cannot fill a step of {groups} prompts")
    sizes = _sizes(sizes)
    if sizes[0] < m:
        raise ValueError(f"every size must hold the m = {m} rollouts selection keeps, got {list(sizes)}")
    if skipped is None:
        skipped = history.draw_skips(ids, skip_at)
    elif skipped.shape != (len(ids),):
        raise ValueError(f"skipped must be a ({len(ids)},) bool tensor, got {_describe(skipped)}")
    skipped = skipped.to("cpu", torch.bool)
    probability = history.zero_variance_probability(ids, skip_at)
    # Rank: kept candidates in order (key 0), then skipped ones by predicted all-equal probability (keys in (1, 2]).
    key = torch.where(skipped, 1 + probability, 0.0)
    chosen = torch.sort(key, stable=True).indices[:groups]
    alpha, beta = history.posterior([ids[i] for i in chosen.tolist()])
    values = value_table(sizes, m, alpha=alpha, beta=beta, objective=objective)
    allocation = allocate(values, sizes, budget, exact=True)
    return StepPlan(chosen, allocation, ~skipped[chosen]), skipped


# ----------------------------------------------------------------------------------------------------------------
# 5. Pools of different sizes
# ----------------------------------------------------------------------------------------------------------------


def pad_pools(pools: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, K) rewards NaN-padded to the largest pool and the (G, K) mask of real rollouts, from G 1-D pools.

    `select_rollouts(rewards, m, valid=mask)` keeps m of each pool (each must hold at least m) and
    `select_batch(rewards, budget, valid=mask)` spreads a row budget over them: both take the mask already.
    """
    if not all(isinstance(pool, torch.Tensor) and pool.dim() == 1 for pool in pools):
        raise ValueError("pools must be 1-D tensors of rewards")
    longest = max((len(pool) for pool in pools), default=0)
    dtype = torch.float64 if not pools else torch.promote_types(pools[0].dtype, torch.float32)
    rewards = torch.full((len(pools), longest), float("nan"), dtype=dtype)
    valid = torch.zeros((len(pools), longest), dtype=torch.bool)
    for row, pool in enumerate(pools):
        rewards[row, : len(pool)] = pool.to(dtype)
        valid[row, : len(pool)] = True
    return rewards, valid


def size_histogram(sizes: torch.Tensor, largest: int) -> torch.Tensor:
    """(largest + 1,) int64: how many prompts got 0, 1, ..., `largest` rollouts (for the step's metrics)."""
    return torch.bincount(sizes.to(torch.int64).flatten(), minlength=largest + 1)[: largest + 1]


# ----------------------------------------------------------------------------------------------------------------
# Checks
# ----------------------------------------------------------------------------------------------------------------


def _log_beta(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(a) + torch.lgamma(b) - torch.lgamma(a + b)


def _count(name: str, value: Any) -> int:
    """A non-negative int (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


def _sizes(sizes: Sequence[int]) -> list[int]:
    sizes = [_count("each size", size) for size in sizes]
    if not sizes or any(later <= earlier for earlier, later in itertools.pairwise(sizes)):
        raise ValueError(f"sizes must be a non-empty, strictly increasing list of integers >= 0, got {sizes}")
    return sizes


def _probabilities(name: str, values: torch.Tensor) -> torch.Tensor:
    values = _vector(name, values)
    return _require(name, values, (values >= 0) & (values <= 1), "lie in [0, 1]")


def _positive(name: str, values: torch.Tensor) -> torch.Tensor:
    values = _vector(name, values)
    return _require(name, values, torch.isfinite(values) & (values > 0), "be finite and > 0")


def _vector(name: str, values: torch.Tensor) -> torch.Tensor:
    """A 1-D tensor as float64 on the CPU."""
    if not isinstance(values, torch.Tensor) or values.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor, got {_describe(values)}")
    return values.detach().to("cpu", torch.float64)


def _require(name: str, values: torch.Tensor, good: torch.Tensor, what: str) -> torch.Tensor:
    if not good.all():
        raise ValueError(f"{name} must {what}, got {values[~good][0].item()}")
    return values


def _band(band: Sequence[float]) -> tuple[float, float]:
    if len(band) != 2 or not 0 <= band[0] <= band[1] <= 1:
        raise ValueError(f"band must be [low, high] with 0 <= low <= high <= 1, got {list(band)}")
    return float(band[0]), float(band[1])


def _ids(prompt_ids: Sequence[str]) -> list[str]:
    ids = list(prompt_ids)
    for key in ids:
        if not isinstance(key, str):
            raise TypeError(f"prompt ids must be str (see prompt_id), got {type(key).__name__} {key!r}")
    return ids


def _describe(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__
