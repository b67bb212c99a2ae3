"""What each method's step would generate, train and learn from, forecast from the pass counts of a few base-model
rollouts per prompt. Pure: counts and step costs in, numbers out; no model (`pods_rl.run.advise` samples them).

The model. Prompt i passes each rollout independently with its pass rate p_i (a rollout passes when its weighted
reward reaches `success_threshold`), and a step's candidate prompts are independent draws from the sampled prompts.
Every figure is in units of that pass/fail reward, 0 or 1.

Per prompt, exactly and without bias. Every per-prompt quantity below is an expectation over the count of successes
of a fresh group of k rollouts, so a linear function of the Binomial(k, p) pmf. From s successes in K sampled rollouts
(k <= K), the hypergeometric pmf C(s, j) C(K - s, k - j) / C(K, k) (`hypergeometric_pmf`) is an unbiased estimate of
that pmf (its mean over the K rollouts is the binomial's), so each per-prompt figure is an unbiased estimate too.
Plugging in s / K (p^k by (s / K)^k) would be biased for small K: with s = 1 of K = 4, a group of 2 varies with
probability 1/2, not 1 - (1/4)^2 - (3/4)^2 = 3/8. The history's second epoch needs a pool seen in the first epoch and
a fresh one, 2n rollouts: exact where K >= 2n, else the product of the two pools' unbiased estimates (`exact` says).

The methods (the arms of `pods compare`), each step training G prompts (`Setup.prompts_per_step`):

- `grpo` (m/m), `grpo-pool` (n/n: the whole pool) and `pods` (n -> m by maximal variance: of a pool with s successes
  it keeps `captured_deviation(n, m)[s]` of squared deviation, the most balanced m).
- `grpo-ds`, `pods-ds`: DAPO's dynamic sampling. Rounds of G candidates until G groups vary or
  `max_generation_rounds` rounds ran; the first G varied groups train, a step still short fills up with all-equal
  groups (`pods_rl.core.dynamic_sampling`). With T_r ~ Binomial(r G, q) the varied groups after r rounds, q the share
  of groups that vary: expected rounds 1 + sum_{r=1}^{R-1} P(T_r < G), varied groups trained E[min(T_R, G)], and each
  trained varied group is distributed as a group conditioned on varying. The epoch's end (which stops rounds early)
  is not modelled.
- `pods-screen` (SPEED-RL, `pods_rl.core.allocation.plan_screening`): rounds of G candidates screened with k
  rollouts until G pass (their screen varies, or its pass rate lies in the band) or R rounds ran; the passing ones
  are extended to n and keep m; fills keep m of their k screening rollouts (all extended when k < m). A screen and its
  extension are the first k and the rest of one pool of n, so whether a pool passed and what it keeps come from one
  Binomial(n) count. With a band, fills are taken as random non-passing candidates (the trainer takes those whose
  screen varied first).
- `pods-history` (GRESO's skips, `pods_rl.core.allocation.PassRateHistory`), in its second epoch: each prompt's
  history holds one pool of n (in the first epoch nothing is skipped: that epoch is `pods`). A candidate is skipped
  with probability (1 - exploration) x the Beta-binomial chance that a pool of n is all-equal under its posterior;
  rounds of G candidates until G are kept or R rounds ran, then fills from the skipped ones (taken as random skipped
  candidates; the trainer takes the least likely all-equal first). Skips cost no generation: a step generates its
  budget. Every trained pool is taken as n rollouts: the knapsack's spread of pool sizes (a `generation_budget` or
  `max_rollouts_per_prompt` other than n per prompt) is not modelled.

What is forecast per step: rollouts generated (divided by `iterations`, TRL's num_iterations: each generation trains
that many steps), rows trained, rounds of candidates, the share of trained prompts whose group has a non-zero
advantage, and the learning signal: the expected total squared deviation sum (r - mean)^2 of the trained rows'
rewards within their groups, i.e. rows trained x the expected within-group variance per row (`variance_per_row`).
It is the expected squared norm of the advantages when no group is divided by its own std (Dr. GRPO's
scale_rewards="none"; the "variance" objective of rollout allocation), and it counts rows because each arm's learning
rate is tuned (as `pods compare` tunes it): below the critical batch size a step's progress grows about linearly with
its rows (the linear scaling rule). At one fixed learning rate, with a loss averaged over rows, the variance per row is
the reading instead; the two rank alike every method but GRPO n/n, which trains n/m times the rows. Under TRL's default
per-group std scaling each varied group's squared advantages sum to its rows - 1 whatever its balance:
`informative_groups` x (rows per prompt - 1) is that signal. Learning per step is taken as proportional to the
signal: the forecast's assumption, which `pods compare` tests.

With step costs (a `StepCost`: seconds = per_step + per_generated x generated + per_trained x trained, rescaled to its
trained_per_step at GRPO's rows) each method's seconds per step and signal per second follow, and against GRPO the
break-even share of `when_pods_pays`: a method whose step costs x times GRPO's saves time only if it needs fewer than
1/x of GRPO's steps. `bootstrap` resamples the prompts for intervals on the ratios to GRPO.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from pods_rl.compare.cost_model import StepCost
from pods_rl.core.allocation import beta_binomial_pmf, binomial_pmf, captured_deviation

METHODS = {
    "grpo": "GRPO m/m",
    "grpo-pool": "GRPO n/n",
    "pods": "PODS n -> m",
    "grpo-ds": "GRPO m/m, dynamic sampling",
    "pods-ds": "PODS n -> m, dynamic sampling",
    "pods-screen": "PODS n -> m, screening",
    "pods-history": "PODS n -> m, history (2nd epoch)",
}
BASELINE = "grpo"


@dataclass(frozen=True)
class Setup:
    """A step of the run being forecast: n, m and G prompts per step, and the trainer's settings of dynamic sampling
    (`max_generation_rounds`), screening (`screen_size`, default m within [2, n - 1], as the shipped allocation
    comparisons screen 4 of 16 at m = 4; `screen_pass_rate_band`) and the history (`history_exploration`, the Beta
    prior, `generation_budget` per step: default n per prompt). `iterations`: TRL's num_iterations."""

    n: int
    m: int
    prompts_per_step: int
    max_generation_rounds: int = 3
    screen_size: int | None = None
    screen_pass_rate_band: tuple[float, float] | None = None
    history_exploration: float = 0.1
    history_prior: tuple[float, float] = (1.0, 1.0)
    generation_budget: int | None = None
    iterations: int = 1

    def __post_init__(self) -> None:
        counts = ("n", "m", "prompts_per_step", "max_generation_rounds", "iterations")
        for name in counts:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not 2 <= self.m < self.n:
            raise ValueError(f"the forecast compares m of n rollouts: 2 <= m < n, got n={self.n}, m={self.m}")
        if not 2 <= self.screen < self.n:
            raise ValueError(f"screen_size must satisfy 2 <= screen_size < n ({self.n}), got {self.screen}")
        band = self.screen_pass_rate_band
        if band is not None and not (len(band) == 2 and 0 <= band[0] <= band[1] <= 1):
            raise ValueError(f"screen_pass_rate_band must be [low, high] within [0, 1], got {band}")
        if not 0 <= self.history_exploration <= 1:
            raise ValueError(f"history_exploration must lie in [0, 1], got {self.history_exploration}")
        if not all(math.isfinite(value) and value > 0 for value in self.history_prior):
            raise ValueError(f"the history's prior counts must be > 0, got {self.history_prior}")
        if self.generation_budget is not None and self.generation_budget < self.prompts_per_step * self.m:
            raise ValueError(f"generation_budget ({self.generation_budget}) is below the rows trained per step")

    @property
    def screen(self) -> int:
        """k: the screening rollouts per candidate."""
        return self.screen_size if self.screen_size is not None else min(max(self.m, 2), self.n - 1)

    @property
    def budget(self) -> int:
        """The history's rollouts generated per step."""
        return self.generation_budget or self.prompts_per_step * self.n


@dataclass(frozen=True)
class MethodForecast:
    """One method's expected step; seconds and signal per second only with step costs (None: not projectable)."""

    name: str
    label: str
    generated: float  # rollouts generated per step
    trained: float  # rows trained per step
    rounds: float  # rounds of candidates per step (1 without dynamic sampling or allocation)
    informative_share: float  # share of trained prompts whose group has a non-zero advantage
    informative_groups: float  # expected trained prompts whose group has a non-zero advantage
    variance_per_row: float  # expected within-group variance of the trained pass rewards, per row
    signal: float  # expected total squared deviation of the trained rows: trained x variance_per_row
    exact: bool = True  # False: the history's product estimate (fewer than 2n rollouts of some prompt)
    seconds: float | None = None
    signal_per_second: float | None = None


# ---------------------------------------------------------------------------------------------------------- per prompt


def hypergeometric_pmf(samples: int, successes: int, k: int) -> torch.Tensor:
    """(k + 1,) float64: P(j successes among k of `samples` rollouts drawn without replacement, `successes` of which
    passed), C(s, j) C(K - s, k - j) / C(K, k), each term a ratio of exact integers. Averaged over the sampled
    rollouts it is the Binomial(k, p) pmf, so it estimates P(j successes of k fresh rollouts) without bias."""
    if not 0 <= successes <= samples or not 0 <= k <= samples:
        raise ValueError(f"need 0 <= successes <= samples and 0 <= k <= samples, got {successes}, {samples}, {k}")
    total = math.comb(samples, k)
    ways = [math.comb(successes, j) * math.comb(samples - successes, k - j) for j in range(k + 1)]
    return torch.tensor([way / total for way in ways], dtype=torch.float64)


def varies(k: int) -> torch.Tensor:
    """(k + 1,) float64: 1 where a group of k with s = 0..k successes varies (0 < s < k)."""
    s = torch.arange(k + 1)
    return ((s > 0) & (s < k)).double()


def screen_passes(setup: Setup) -> torch.Tensor:
    """(k + 1,) float64: 1 where a screen of k with j successes passes: it varies, or j / k lies in the band."""
    k, band = setup.screen, setup.screen_pass_rate_band
    if band is None:
        return varies(k)
    rate = torch.arange(k + 1, dtype=torch.float64) / k
    return ((rate >= band[0]) & (rate <= band[1])).double()


def screen_given_pool(setup: Setup) -> torch.Tensor:
    """(n + 1,) float64: P(the screen passes | its pool of n holds t successes): the screen is k of the pool's n."""
    n, k = setup.n, setup.screen
    return torch.stack([hypergeometric_pmf(n, t, k) @ screen_passes(setup) for t in range(n + 1)])


def skip_given_history(setup: Setup) -> torch.Tensor:
    """(n + 1,) float64: P(a candidate is skipped | its history holds one pool of n with a successes): (1 -
    exploration) x the Beta-binomial P(a pool of n is all-equal) under the posterior Beta(prior + a, prior + n - a), as
    `PassRateHistory.skip_probability` at skip_at = n."""
    n = setup.n
    a = torch.arange(n + 1, dtype=torch.float64)
    alpha, beta = setup.history_prior[0] + a, setup.history_prior[1] + n - a
    pmf = beta_binomial_pmf(n, alpha, beta)
    return (1 - setup.history_exploration) * (pmf[:, 0] + pmf[:, -1])


def prompt_terms(successes: Sequence[int], samples: Sequence[int], setup: Setup) -> dict[str, torch.Tensor]:
    """Per prompt (P,) float64, unbiased estimates from each prompt's s of K passes (the hypergeometric pmf in place
    of the binomial): what `rate_terms` gives at the prompts' true pass rates. `exact_history` is 0 where K < 2n,
    where the history's terms are the product of two unbiased estimates (see the module)."""
    if len(successes) != len(samples) or not len(successes):
        raise ValueError(f"need one count per prompt, got {len(successes)} successes and {len(samples)} samples")
    for s, total in zip(successes, samples, strict=True):
        if total < setup.n or not 0 <= s <= total:
            raise ValueError(f"a prompt has {s} successes of {total} rollouts: need 0 <= s <= K and K >= n = {setup.n}")

    def pmf(k: int) -> torch.Tensor:
        rows = [hypergeometric_pmf(total, s, k) if k <= total else torch.full((k + 1,), math.nan) for s, total in pairs]
        return torch.stack(rows).double()

    pairs = list(zip(successes, samples, strict=True))
    exact = torch.tensor([total >= 2 * setup.n for total in samples])
    return _terms(pmf, setup, exact)


def rate_terms(pass_rates: Sequence[float], setup: Setup) -> dict[str, torch.Tensor]:
    """Per prompt (P,) float64, the terms at known pass rates (the Binomial pmf): what `prompt_terms` estimates."""
    rates = torch.as_tensor(list(pass_rates), dtype=torch.float64)
    return _terms(lambda k: binomial_pmf(k, rates), setup, torch.ones(len(rates), dtype=torch.bool))


def _terms(pmf, setup: Setup, exact: torch.Tensor) -> dict[str, torch.Tensor]:
    """The per-prompt terms from `pmf(k)`, each prompt's (P, k + 1) pmf of the successes in a group of k: the chance
    that a group varies and the squared deviation each method keeps, for GRPO m/m and n/n and PODS; the screen's pass,
    what a passing or a filling prompt keeps and whether it varies; the history's skip, and what a skipped prompt's
    fresh pool keeps and whether it varies (from `pmf(2n)` where `exact`, else a product of `pmf(n)` terms)."""
    n, m, k = setup.n, setup.m, setup.screen
    kept_mm, kept_nn, kept_nm, kept_km = (captured_deviation(*sizes) for sizes in ((m, m), (n, n), (n, m), (k, m)))
    varied_n = varies(n)
    passes, passes_given_pool = screen_passes(setup), screen_given_pool(setup)
    h_m, h_n, h_k = pmf(m), pmf(n), pmf(k)
    terms = {
        "vary_m": h_m @ varies(m),
        "signal_m": h_m @ kept_mm,
        "vary_n": h_n @ varied_n,
        "signal_pool": h_n @ kept_nn,
        "signal_pods": h_n @ kept_nm,
        "screen_pass": h_n @ passes_given_pool,
        "screen_pass_signal": h_n @ (kept_nm * passes_given_pool),
        "screen_pass_vary": h_n @ (varied_n * passes_given_pool),
    }
    if k >= m:  # a fill keeps m of its k screening rollouts
        terms["screen_fill_signal"] = h_k @ (kept_km * (1 - passes))
        terms["screen_fill_vary"] = h_k @ (varies(k) * (1 - passes))
    else:  # every trained prompt is extended to n
        terms["screen_fill_signal"] = h_n @ (kept_nm * (1 - passes_given_pool))
        terms["screen_fill_vary"] = h_n @ (varied_n * (1 - passes_given_pool))
    # The history: its pool (a successes of n) and the fresh pool (t of n) are independent given p, so their joint
    # pmf is that of a + t among 2n, split as C(n, a) C(n, t) / C(2n, a + t).
    skips = skip_given_history(setup)
    skip = h_n @ skips
    terms.update(skip=skip, skip_signal=skip * (h_n @ kept_nm), skip_vary=skip * (h_n @ varied_n))
    if exact.any():
        ways = torch.tensor([math.comb(n, i) for i in range(n + 1)], dtype=torch.float64)
        both = torch.tensor(
            [[math.comb(2 * n, a + t) for t in range(n + 1)] for a in range(n + 1)], dtype=torch.float64
        )
        index = torch.arange(n + 1)[:, None] + torch.arange(n + 1)[None, :]
        joint = ways[:, None] * ways[None, :] / both * pmf(2 * n)[:, index]  # (P, a, t)
        on_skips = torch.einsum("a,pat->pt", skips, joint)
        for key, value in (("skip", on_skips.sum(dim=1)), ("skip_signal", on_skips @ kept_nm)):
            terms[key] = torch.where(exact, value, terms[key])
        terms["skip_vary"] = torch.where(exact, on_skips @ varied_n, terms["skip_vary"])
    terms["exact_history"] = exact.double()
    return terms


# ---------------------------------------------------------------------------------------------------------- per step


def rounds_until_full(share: torch.Tensor, groups: int, max_rounds: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected rounds and expected qualifying candidates trained (at most `groups`), for rounds of `groups`
    independent candidates that each qualify with probability `share` (B,), run until `groups` qualified or
    `max_rounds` ran: 1 + sum_{r=1}^{R-1} P(T_r < G) and E[min(T_R, G)] with T_r ~ Binomial(r G, share). (A step that
    stopped early has T_R >= T_r >= G too, so min(T_R, G) counts it right.)"""
    share = share.clamp(0, 1)
    rounds = torch.ones_like(share)
    for r in range(1, max_rounds):
        rounds = rounds + binomial_pmf(r * groups, share)[:, :groups].sum(dim=1)
    pmf = binomial_pmf(max_rounds * groups, share)
    qualified = pmf @ torch.arange(max_rounds * groups + 1, dtype=torch.float64).clamp(max=groups)
    return rounds, qualified


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where the denominator is 0 (a conditional expectation on an impossible event)."""
    safe = torch.where(denominator > 0, denominator, torch.ones_like(denominator))
    return torch.where(denominator > 0, numerator / safe, torch.zeros_like(numerator))


def step_figures(means: dict[str, torch.Tensor], setup: Setup) -> dict[str, dict[str, torch.Tensor]]:
    """Each method's expected step from the (B,) means over prompts of `prompt_terms`: generated, trained, rounds,
    informative (trained groups with a non-zero advantage) and signal, each (B,)."""
    n, m, G, R, k = setup.n, setup.m, setup.prompts_per_step, setup.max_generation_rounds, setup.screen
    one = torch.ones_like(means["vary_m"])
    figures = {
        "grpo": {"generated": G * m * one, "trained": G * m * one, "rounds": one},
        "grpo-pool": {"generated": G * n * one, "trained": G * n * one, "rounds": one},
        "pods": {"generated": G * n * one, "trained": G * m * one, "rounds": one},
    }
    figures["grpo"].update(informative=G * means["vary_m"], signal=G * means["signal_m"])
    figures["grpo-pool"].update(informative=G * means["vary_n"], signal=G * means["signal_pool"])
    figures["pods"].update(informative=G * means["vary_n"], signal=G * means["signal_pods"])
    for name, size, vary, signal in (("grpo-ds", m, "vary_m", "signal_m"), ("pods-ds", n, "vary_n", "signal_pods")):
        rounds, kept = rounds_until_full(means[vary], G, R)
        figures[name] = {
            "generated": rounds * G * size,
            "trained": G * m * one,
            "rounds": rounds,
            "informative": kept,
            "signal": kept * _ratio(means[signal], means[vary]),  # fills are all-equal: 0
        }
    share = means["screen_pass"]
    rounds, passed = rounds_until_full(share, G, R)
    extended = passed if k >= m else G * one
    filled = G - passed
    figures["pods-screen"] = {
        "generated": rounds * G * k + extended * (n - k),
        "trained": G * m * one,
        "rounds": rounds,
        "informative": passed * _ratio(means["screen_pass_vary"], share)
        + filled * _ratio(means["screen_fill_vary"], 1 - share),
        "signal": passed * _ratio(means["screen_pass_signal"], share)
        + filled * _ratio(means["screen_fill_signal"], 1 - share),
    }
    skip = means["skip"]
    rounds, kept = rounds_until_full(1 - skip, G, R)
    filled = G - kept
    figures["pods-history"] = {
        "generated": setup.budget * one,
        "trained": G * m * one,
        "rounds": rounds,
        "informative": kept * _ratio(means["vary_n"] - means["skip_vary"], 1 - skip)
        + filled * _ratio(means["skip_vary"], skip),
        "signal": kept * _ratio(means["signal_pods"] - means["skip_signal"], 1 - skip)
        + filled * _ratio(means["skip_signal"], skip),
    }
    for figure in figures.values():
        figure["generated"] = figure["generated"] / setup.iterations
    return figures


def _means(terms: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """(B,) weighted means over prompts of each (P,) term; `weights` (B, P), default one uniform row."""
    count = next(iter(terms.values())).shape[0]
    weights = torch.ones(1, count, dtype=torch.float64) if weights is None else weights.double()
    weights = weights / weights.sum(dim=1, keepdim=True)
    return {key: weights @ value for key, value in terms.items()}


def forecast(
    successes: Sequence[int], samples: Sequence[int], setup: Setup, cost: StepCost | None = None
) -> list[MethodForecast]:
    """Every method's expected step (`METHODS` order) from each prompt's s of K passes; with `cost`, its seconds and
    signal per second (None where the cost cannot project it: a StepCost without an update cost, for a method that
    trains other rows than GRPO)."""
    terms = prompt_terms(successes, samples, setup)
    figures = step_figures(_means(terms), setup)
    exact_history = bool(terms["exact_history"].all())
    baseline_trained = float(figures[BASELINE]["trained"][0])
    results = []
    for name, label in METHODS.items():
        figure = {key: float(value[0]) for key, value in figures[name].items()}
        seconds = None if cost is None else cost.step_seconds(figure["generated"], figure["trained"], baseline_trained)
        signal = figure["signal"]
        results.append(
            MethodForecast(
                name=name,
                label=label,
                generated=figure["generated"],
                trained=figure["trained"],
                rounds=figure["rounds"],
                informative_share=figure["informative"] / setup.prompts_per_step,
                informative_groups=figure["informative"],
                variance_per_row=signal / figure["trained"],
                signal=signal,
                exact=exact_history or name != "pods-history",
                seconds=seconds,
                signal_per_second=None if not seconds else signal / seconds,
            )
        )
    return results


def bootstrap(
    successes: Sequence[int],
    samples: Sequence[int],
    setup: Setup,
    cost: StepCost | None = None,
    *,
    resamples: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> dict[str, tuple[float, float]]:
    """Percentile intervals of each method's signal per second over GRPO's (per step without `cost`), resampling the
    prompts with replacement (`resamples` draws from a generator seeded with `seed`): how much the ranking rests on
    which prompts were sampled. Methods the cost cannot project are left out."""
    terms = prompt_terms(successes, samples, setup)
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(len(successes), (resamples, len(successes)), generator=generator)
    weights = torch.zeros(resamples, len(successes), dtype=torch.float64).scatter_add_(
        1, draws, torch.ones_like(draws, dtype=torch.float64)
    )
    figures = step_figures(_means(terms, weights), setup)
    rates = {}
    baseline_trained = float(figures[BASELINE]["trained"][0])
    for name, figure in figures.items():
        if cost is None:
            rates[name] = figure["signal"]
            continue
        seconds = [cost.step_seconds(float(g), float(t), baseline_trained) for g, t in zip(*_pair(figure), strict=True)]
        if any(second is None or second <= 0 for second in seconds):
            continue
        rates[name] = figure["signal"] / torch.tensor(seconds, dtype=torch.float64)
    baseline = rates[BASELINE]
    tail = (1 - level) / 2
    intervals = {}
    for name, rate in rates.items():
        ratio = _ratio(rate, baseline)[baseline > 0]
        if len(ratio):
            low, high = torch.quantile(ratio, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
            intervals[name] = (low, high)
    return intervals


def _pair(figure: dict[str, torch.Tensor]) -> tuple[list[float], list[float]]:
    return figure["generated"].tolist(), figure["trained"].tolist()


# ---------------------------------------------------------------------------------------------------------- graded


def all_equal_probability(value_counts: Sequence[int], k: int) -> float:
    """Unbiased estimate of P(a fresh group of k has all-equal rewards) from how many of the K sampled rollouts
    scored each distinct value: sum_v C(c_v, k) / C(K, k) (the hypergeometric chance that k drawn share one value)."""
    total = sum(value_counts)
    if not 1 <= k <= total:
        raise ValueError(f"need 1 <= k <= {total} sampled rollouts, got k={k}")
    return sum(math.comb(count, k) for count in value_counts) / math.comb(total, k)


def graded_share(
    value_counts: Sequence[Sequence[int]], successes: Sequence[int], samples: Sequence[int], k: int
) -> float:
    """The share of groups of k whose weighted rewards vary while their pass/fail does not (format rewards on answers
    all right or all wrong), averaged over prompts: the trainer's advantages and dynamic sampling's filter read the
    rewards, this forecast reads pass/fail. `value_counts[i]`: the multiplicities of prompt i's distinct rewards."""
    shares = []
    for counts, s, total in zip(value_counts, successes, samples, strict=True):
        pass_equal = float(hypergeometric_pmf(total, s, k)[[0, k]].sum())
        shares.append(pass_equal - all_equal_probability(counts, k))
    return sum(shares) / len(shares)
