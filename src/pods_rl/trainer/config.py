"""PODSConfig: GRPOConfig plus the down-sampling settings (pool size n, trained size m, rule) and rollout allocation."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from pods_rl.config_rules import (
    PODS_DEFAULTS,
    check_batch,
    check_refill_steps,
    check_selection_fields,
    check_vllm,
    refill_reason,
)


@dataclass
class PODSConfig(GRPOConfig):
    r"""Configuration for [`PODSTrainer`]: every `GRPOConfig` field keeps its meaning, plus eighteen.

    How the batch sizes count. `num_generations` is the pool size n: rollouts generated per prompt. `num_selected`
    is m: rollouts per prompt that reach the policy update. TRL's batch fields count rows *of the update*, exactly as
    in GRPO: `per_device_train_batch_size` rows per forward/backward pass, `steps_per_generation` micro-batches per
    generation, `generation_batch_size = per_device_train_batch_size * num_processes * steps_per_generation` trained
    rows per generation. So each generation draws `generation_batch_size / m` prompts and generates
    `generation_batch_size * n / m` rollouts; each process generates its `n / m` share of that and trains on its
    `per_device_train_batch_size * steps_per_generation` rows.

    Worked example: 2 GPUs, `per_device_train_batch_size=8`, `gradient_accumulation_steps=2` (so
    `steps_per_generation=2`), `num_generations=32`, `num_selected=8`. Trained rows per generation: 8 * 2 * 2 = 32, i.e.
    32 / 8 = 4 prompts. Generated rollouts: 4 * 32 = 128, 64 per GPU. After selection each GPU trains on 16 rows in
    two micro-batches of 8. Memory of the update is that of GRPO with n = 8; generation is that of n = 32.

    Where the rollouts are. Each process generates a contiguous block of `local_pool_size` rows, prompt by prompt,
    and trains on a contiguous share of the selected rows. When `per_device_train_batch_size * steps_per_generation`
    is a multiple of m (as above: 16 = 2 * 8), every pool lies on one process and is trained there: only rewards
    move between processes. Otherwise some pools span two processes, and the selected rows of those pools that the
    other process trains move to it (logged as `pods/rows_moved`).

    GRPO options keep their meaning, applied to the selected rows: `scale_rewards="batch"` divides by the std of
    every selected reward of the generation batch; `multi_objective_aggregation="normalize_then_sum"` normalises
    each reward function within the selected subset, and selection ranks rollouts on the same aggregate computed
    over the pool (see `pods_rl.trainer.pools`). Rollouts no reward function scores get advantage 0 and count in no
    statistic; a prompt with fewer than m scorable rollouts keeps them all, filled up to m with unscorable ones.
    Evaluation generates `num_generations_eval` (default n) rollouts per prompt and selects nothing, as in GRPO.

    Args:
        num_selected (`int` or `None`, defaults to `None`):
            m, the rollouts per prompt kept for the update, 2 <= m <= num_generations. `None` keeps all n (plain
            GRPO through the same code path).
        selection_rule (`str`, defaults to `"max_variance"`):
            `"max_variance"` (the paper's rule), `"max_reward"` or `"random"`; see `pods_rl.select_rollouts`.
        advantage_stats (`str`, defaults to `"selected"`):
            Where the advantage's mean and std come from: the `"selected"` subset (the paper's choice) or the whole
            `"pool"` of n (the paper's ablation).
        selection_budget (`str`, defaults to `"per_prompt"`):
            `"per_prompt"`: m rows of every prompt (the paper). `"batch"`: the same number of rows per generation
            batch, spread over the prompts by `pods_rl.select_batch` (max_variance only): prompts whose rewards are
            all equal get none, the others 0 or 2..n rows, to capture the most squared deviation. Each process
            spreads its own `per_device_train_batch_size * steps_per_generation` rows over its own prompts, so it
            needs whole pools per process: that product must be a multiple of m. A process whose scorable rollouts
            cannot make up its rows that way takes m per prompt for that step (see `pods_rl.trainer.pools`).
        selection_tie_break (`str`, defaults to `"index"`):
            Among subsets of maximal variance, `"index"` takes the documented index order and `"shortest"` the
            fewest completion tokens the loss sees (the model's; max_variance only); see `pods_rl.select_rollouts`.
        dynamic_sampling (`bool`, defaults to `False`):
            DAPO's dynamic sampling: after a generation batch is scored, drop the prompt groups whose selection
            scores are all equal (within `pods_rl.core.dynamic_sampling.TOLERANCE`) and generate the next prompts of
            the training data, until every process holds its `per_device_train_batch_size * steps_per_generation / m`
            informative groups or `max_generation_rounds` rounds have run; a process still short then fills up
            with the last round's dropped groups (advantage 0). Selection (m of n) follows on the kept groups. Every
            pool must lie on one process: that product must be a multiple of m; and the run needs `max_steps`. See
            `pods_rl.trainer.refill` for what it does to steps and epochs.
        max_generation_rounds (`int`, defaults to `3`):
            K: generation rounds per step at most with `dynamic_sampling`, the first one included (1 drops nothing,
            it only fills). Also the rounds of candidates per step with `rollout_allocation` (screens, or skip
            draws from the history).

        Rollout allocation (`pods_rl.core.allocation` decides, `pods_rl.trainer.allocated` generates; see
        docs/allocation.md): how many rollouts each prompt gets, instead of n for every prompt. Off by default. With
        `dynamic_sampling`, each allocated step is one round of dynamic sampling (pools that do not vary are dropped
        and further allocated steps run). Not with tools, environments or images (refused in one line).

        rollout_allocation (`str`, defaults to `"none"`):
            `"screen"` (SPEED-RL, arXiv 2506.09016): screen candidate prompts with `screen_size` rollouts each, extend
            to n only those whose screening scores vary (or whose pass rate lies in `screen_pass_rate_band`), and fill
            the step with them; the screening rollouts stay in the pool. `"history"` (GRESO, arXiv 2506.02177, and
            Knapsack RL, arXiv 2509.25849): keep a Beta posterior of each prompt's pass rate across epochs, skip
            prompts predicted to give all-equal rewards (with probability at least `history_exploration` of being
            generated anyway), and give each trained prompt m..`max_rollouts_per_prompt` rollouts by an exact
            knapsack over `generation_budget`. Both need whole pools per process.
        screen_size (`int` or `None`, defaults to `None`):
            k: rollouts per candidate prompt in the screen, 2 <= k < num_generations (required by `"screen"`).
        screen_pass_rate_band (`list[float]` or `None`, defaults to `None`):
            `[low, high]`: extend the candidates whose screened pass rate lies in it; `None`: those whose screening
            scores vary.
        success_threshold (`float` or `None`, defaults to `0.5`):
            A rollout whose weighted reward (the reward functions' sum with `reward_weights`, whatever
            `multi_objective_aggregation`) is at least this is a success (pass rates, the band, the history); `None`
            reads weighted rewards in [0, 1] as fractional successes.
        generation_budget (`int` or `None`, defaults to `None`):
            With `"history"`: rollouts per generation batch over all processes (each process spreads its equal share
            over its own prompts); `None`: n per trained prompt, as without allocation. At least the trained rows.
        max_rollouts_per_prompt (`int` or `None`, defaults to `None`):
            With `"history"`: the most rollouts a prompt may get (>= m); `None`: n. Raise it to let hard prompts get
            more than n, paid for by the prompts that need fewer.
        allocation_objective (`str`, defaults to `"auto"`):
            What the knapsack maximises: `"variance"`, the expected squared deviation of the trained rewards;
            `"informative"`, the expected number of groups whose trained rewards vary; `"knapsack_rl"`, Knapsack RL's
            value (that number weighted by p (1 - p)^2, which favours hard prompts); `"auto"`: `"informative"` when
            each group's advantages are divided by its own std (`scale_rewards="group"`, or `normalize_then_sum`),
            else `"variance"`. See `pods_rl.core.allocation`.
        history_exploration (`float`, defaults to `0.1`):
            The least probability with which a prompt predicted to teach nothing is generated anyway.
        history_prior_successes, history_prior_failures (`float`, default to `1.0`):
            The Beta prior of a prompt's pass rate (uniform by default).
        history_decay (`float`, defaults to `1.0`):
            The weight each new observation of a prompt leaves on its older ones (1: every epoch counts alike).
    """

    num_selected: int | None = field(
        default=PODS_DEFAULTS["num_selected"],
        metadata={"help": "m: rollouts per prompt kept for the update (2..num_generations); None keeps all n."},
    )
    selection_rule: str = field(
        default=PODS_DEFAULTS["selection_rule"],
        metadata={"help": "Down-sampling rule: 'max_variance', 'max_reward' or 'random'."},
    )
    advantage_stats: str = field(
        default=PODS_DEFAULTS["advantage_stats"],
        metadata={"help": "Advantage normalisation over the 'selected' subset or the whole 'pool'."},
    )

    selection_budget: str = field(
        default=PODS_DEFAULTS["selection_budget"],
        metadata={"help": "Rows per prompt: 'per_prompt' (m each) or 'batch' (the same total, spread by gain)."},
    )
    selection_tie_break: str = field(
        default=PODS_DEFAULTS["selection_tie_break"],
        metadata={"help": "Among maximal-variance subsets: 'index' order or the 'shortest' completions."},
    )

    dynamic_sampling: bool = field(
        default=PODS_DEFAULTS["dynamic_sampling"],
        metadata={"help": "Drop prompt groups whose rewards are all equal and generate more prompts (DAPO)."},
    )
    max_generation_rounds: int = field(
        default=PODS_DEFAULTS["max_generation_rounds"],
        metadata={"help": "With dynamic_sampling: generation rounds per step at most, the first one included."},
    )

    rollout_allocation: str = field(
        default=PODS_DEFAULTS["rollout_allocation"],
        metadata={"help": "Rollouts per prompt: 'none' (n each), 'screen' (screen then extend) or 'history'."},
    )
    screen_size: int | None = field(
        default=PODS_DEFAULTS["screen_size"],
        metadata={"help": "With rollout_allocation='screen': rollouts per candidate in the screen (2..n-1)."},
    )
    screen_pass_rate_band: list[float] | None = field(
        default=PODS_DEFAULTS["screen_pass_rate_band"],
        metadata={"help": "With 'screen': extend candidates whose pass rate is in [low, high] (None: scores vary)."},
    )
    success_threshold: float | None = field(
        default=PODS_DEFAULTS["success_threshold"],
        metadata={"help": "A weighted reward at least this is a success (None: one in [0, 1] is a fraction)."},
    )
    generation_budget: int | None = field(
        default=PODS_DEFAULTS["generation_budget"],
        metadata={"help": "With 'history': rollouts per generation batch, all processes (None: n per prompt)."},
    )
    max_rollouts_per_prompt: int | None = field(
        default=PODS_DEFAULTS["max_rollouts_per_prompt"],
        metadata={"help": "With 'history': the most rollouts one prompt may get (None: num_generations)."},
    )
    allocation_objective: str = field(
        default=PODS_DEFAULTS["allocation_objective"],
        metadata={"help": "With 'history': what the knapsack maximises: auto, variance, informative, knapsack_rl."},
    )
    history_exploration: float = field(
        default=PODS_DEFAULTS["history_exploration"],
        metadata={"help": "With 'history': the least probability of generating a prompt predicted to teach nothing."},
    )
    history_prior_successes: float = field(
        default=PODS_DEFAULTS["history_prior_successes"],
        metadata={"help": "With 'history': the Beta prior's successes."},
    )
    history_prior_failures: float = field(
        default=PODS_DEFAULTS["history_prior_failures"],
        metadata={"help": "With 'history': the Beta prior's failures."},
    )
    history_decay: float = field(
        default=PODS_DEFAULTS["history_decay"],
        metadata={"help": "With 'history': weight left on older observations at each new one (1: all alike)."},
    )

    def __post_init__(self) -> None:
        pool_size = self.num_generations
        check_selection_fields({name: getattr(self, name) for name in ("num_generations", *PODS_DEFAULTS)})
        check_vllm(self.use_vllm)
        if self.num_selected is None:
            self.num_selected = pool_size
        # TRL's checks require whole prompt groups in the batch of *trained* rows: those groups have m rows. Evaluation
        # still generates num_generations_eval (default: n) per prompt, so its batch is checked against that.
        eval_generations = self.num_generations_eval
        self.num_generations, self.num_generations_eval = self.num_selected, eval_generations or pool_size
        try:
            super().__post_init__()
        finally:
            self.num_generations, self.num_generations_eval = pool_size, eval_generations
        check_batch(
            self.per_device_train_batch_size * self.steps_per_generation,
            self.world_size,
            pool_size,
            self.num_selected,
            self.selection_budget,
            dynamic_sampling=self.dynamic_sampling,
            allocation=self.rollout_allocation,
            generation_budget=self.generation_budget,
            max_rollouts=self.max_rollouts_per_prompt,
        )
        why = refill_reason(self.dynamic_sampling, self.rollout_allocation)
        if why is not None:
            check_refill_steps(
                self.steps_per_generation,
                self.num_iterations,
                self.gradient_accumulation_steps,
                self.max_steps,
                why=why,
            )

    @property
    def local_pool_size(self) -> int:
        """Rollouts each process generates per generation batch (without allocation)."""
        return self.per_device_train_batch_size * self.steps_per_generation * self.num_generations // self.num_selected

    @property
    def largest_generation_call(self) -> int:
        """The most rows one process generates in one call: its pool, or with `rollout_allocation="history"` its
        share of `generation_budget` when that is larger (a screen's calls are smaller than the pool)."""
        if self.rollout_allocation == "history" and self.generation_budget is not None:
            return max(self.local_pool_size, self.generation_budget // self.world_size)
        return self.local_pool_size
