"""PODSConfig: GRPOConfig plus the down-sampling settings (pool size n, trained size m, rule)."""

from __future__ import annotations

from dataclasses import dataclass, field

from trl import GRPOConfig

from pods_rl.config_rules import PODS_DEFAULTS, check_batch, check_refill_steps, check_selection_fields, check_vllm


@dataclass
class PODSConfig(GRPOConfig):
    r"""Configuration for [`PODSTrainer`]: every `GRPOConfig` field keeps its meaning, plus seven.

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
            it only fills).
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
        )
        if self.dynamic_sampling:
            check_refill_steps(
                self.steps_per_generation, self.num_iterations, self.gradient_accumulation_steps, self.max_steps
            )

    @property
    def local_pool_size(self) -> int:
        """Rollouts each process generates per generation batch."""
        return self.per_device_train_batch_size * self.steps_per_generation * self.num_generations // self.num_selected
