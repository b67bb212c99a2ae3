"""PODSTrainer: GRPOTrainer whose update sees only the m selected rollouts of each prompt's pool of n.

TRL computes old-policy and reference log-probabilities *before* it scores the rollouts, all inside one long
method. To remove the unselected rollouts before any of that, PODS hooks in at the end of generation:

1. `_generate` (after TRL generated the local pool): score the pool, select m per prompt across all processes,
   hand each process an equal, contiguous share of the selected rows, and shrink the caller's `prompts` and
   `inputs` lists in place to those rows. From here on TRL only ever sees the trained rows.
2. `_calculate_rewards`: TRL scores the (now selected) rows again; we return the rewards already computed.
3. `_generate_and_score_completions`: replace TRL's advantages with `group_advantages` (subset or pool stats).

Checkpoints are written into a staging folder and renamed into place once complete (`_save_checkpoint`), and every
plain reward function is wrapped so that a failure or a NaN/inf reward names the function and the sample.

`tests/trainer/test_trl_contract.py` fails loudly if TRL changes the internals these hooks rely on.
"""

from __future__ import annotations

import functools
import math
import shutil
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import torch
from accelerate.utils import gather_object
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler, is_async_callable

from pods_rl.core import group_advantages, select_rollouts
from pods_rl.trainer.config import PODSConfig
from pods_rl.trainer.vllm import pool_sized_vllm

PHASES = ("generate", "score", "select", "update")
# A checkpoint is written under `<output_dir>/.tmp-checkpoint-N/` and renamed to `<output_dir>/checkpoint-N` when
# complete. The dot keeps staging folders out of every `checkpoint-*` glob (resume, rotation).
STAGING_PREFIX = ".tmp-"
SELECTION_RNG_FILE = "pods_rng_state.safetensors"


class RewardError(RuntimeError):
    """A reward function failed or returned a NaN/inf reward; the message names the function and the sample."""


class PODSTrainer(GRPOTrainer):
    """Drop-in for `trl.GRPOTrainer` (same constructor) that trains on `num_selected` of `num_generations` rollouts."""

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "pods"]
    _name = "PODS"

    def __init__(self, model: Any, reward_funcs: Any = None, args: PODSConfig | None = None, **kwargs: Any):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = PODSConfig(f"{str(name).split('/')[-1]}-PODS")
        if not isinstance(args, PODSConfig):
            raise TypeError(f"PODSTrainer needs a PODSConfig, got {type(args).__name__}.")
        with pool_sized_vllm(args):  # vLLM generates the whole pool in one batch, and runs on a CPU too
            super().__init__(model, reward_funcs, args, **kwargs)
        self.pool_size = args.num_generations
        self.num_selected = args.num_selected
        # Same seed on every process: the random rule must pick the same rollouts everywhere.
        self._selection_generator = torch.Generator().manual_seed(args.seed)
        self._pool_inputs: list[dict] | None = None
        self._selected_rewards_per_func: torch.Tensor | None = None
        self._selected_advantages: torch.Tensor | None = None
        self.phase_seconds: dict[str, float] = defaultdict(float)
        self._staging_dir: Path | None = None
        self.add_callback(_PhaseClock(self))
        self.reward_funcs = [
            func if isinstance(func, nn.Module) or is_async_callable(func) else _guard_reward(func, name)
            for func, name in zip(self.reward_funcs, self.reward_func_names, strict=True)
        ]

    # ------------------------------------------------------------------ checkpoints: atomic, with the selection RNG
    def _save_checkpoint(self, model, trial) -> None:
        """Write the checkpoint into a staging folder, then rename it into place: a kill never leaves half of one.

        The parent writes `<its output dir>/checkpoint-N`; while it runs, `_get_output_dir` answers
        `<output_dir>/.tmp-checkpoint-N`, so the files land in `.tmp-checkpoint-N/checkpoint-N` first.
        """
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)  # left by a save that was killed
        self.accelerator.wait_for_everyone()
        self._staging_dir = staging
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
        self.accelerator.wait_for_everyone()  # every process wrote its part (e.g. its RNG state)
        if self.args.should_save:
            target = run_dir / name
            if target.exists():  # the same step saved again (e.g. after a failure): the new one replaces it
                shutil.rmtree(target)
            (staging / name).rename(target)
            shutil.rmtree(staging)
            # The parent rotated inside the staging folder; rotate the real checkpoints now that this one counts.
            rotate_checkpoints(
                str(run_dir), self.args.save_total_limit, self.state.best_model_checkpoint, use_mtime=True
            )
        self.accelerator.wait_for_everyone()

    def _get_output_dir(self, trial) -> str:
        return str(self._staging_dir) if self._staging_dir is not None else super()._get_output_dir(trial)

    def _save_rng_state(self, output_dir: str) -> None:
        """Also save the selection generator (the random rule's draws), so a resumed run draws what it would have."""
        super()._save_rng_state(output_dir)
        if self.args.should_save:
            save_file({"selection": self._selection_generator.get_state()}, str(Path(output_dir) / SELECTION_RNG_FILE))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        path = Path(checkpoint or "") / SELECTION_RNG_FILE
        if checkpoint is not None and path.is_file():
            self._selection_generator.set_state(load_file(str(path))["selection"])

    # ------------------------------------------------------------------ data: pools of n per prompt
    def get_train_dataloader(self):
        if not hasattr(self.train_dataset, "__len__"):
            raise ValueError("PODSTrainer needs a map-style (sized) train_dataset to draw whole pools per prompt.")
        return self._get_dataloader(
            dataset=self.train_dataset,
            description="Training",
            batch_size=self.args.local_pool_size,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _get_train_sampler(self, dataset=None) -> RepeatSampler:
        return RepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=self.args.num_generations,
            batch_size=self.args.generation_batch_size // self.args.num_selected,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )

    # ------------------------------------------------------------------ generation, scoring, selection
    def _generate_and_score_completions(self, inputs: list[dict]) -> dict[str, Any]:
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        self._pool_inputs = inputs
        try:
            output = super()._generate_and_score_completions(inputs)
        finally:
            self.num_generations = self.pool_size
            self._pool_inputs = None
            self._selected_rewards_per_func = None
        if self._selected_advantages is None:
            raise RuntimeError(
                "PODSTrainer's selection hook did not run: the installed TRL no longer calls `_generate` from "
                "`_generate_and_score_completions`. Pin trl to the version in pyproject.toml."
            )
        output["advantages"] = self._selected_advantages
        self._selected_advantages = None
        return output

    def _generate(self, prompts: list):
        start = time.perf_counter()
        generated = super()._generate(prompts)
        self.phase_seconds["generate"] += time.perf_counter() - start
        if self._pool_inputs is None:  # evaluation, or a TRL path that does not train
            return generated
        return self._down_sample(prompts, generated)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._selected_rewards_per_func is not None:
            rewards, self._selected_rewards_per_func = self._selected_rewards_per_func, None
            return rewards
        start = time.perf_counter()
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.phase_seconds["score"] += time.perf_counter() - start
        return rewards

    def _down_sample(self, prompts: list, generated: tuple) -> tuple:
        """Score the pool, select m rollouts per prompt and keep this process's share of them."""
        (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images) = generated
        inputs = self._pool_inputs
        rewards_per_func = self._calculate_rewards(inputs, prompts, completions, completion_ids)

        start = time.perf_counter()
        n, m = self.pool_size, self.num_selected
        weights = self.reward_weights.to(rewards_per_func.device)
        pool_rewards = (rewards_per_func * weights).nansum(dim=1).view(-1, n).double().cpu()
        scorable = ~torch.isnan(rewards_per_func).all(dim=1).view(-1, n).cpu()
        pool_rewards = pool_rewards.masked_fill(~scorable, 0.0)
        selected = select_rollouts(
            pool_rewards, m, self.args.selection_rule, valid=scorable, generator=self._selection_generator
        )
        selected_rewards = pool_rewards.gather(1, selected)
        advantages = group_advantages(
            selected_rewards,
            scale="none" if self.scale_rewards == "none" else "std",
            pool=pool_rewards if self.args.advantage_stats == "pool" else None,
        )
        global_rows = (selected + torch.arange(len(selected)).unsqueeze(1) * n).flatten()

        # Every process holds every pool row after this gather; each then keeps an equal contiguous share.
        columns = {
            "prompt": prompts,
            "input": inputs,
            "prompt_ids": prompt_ids,
            "completion_ids": completion_ids,
            "completion": completions,
            "tool_mask": tool_mask,
            "logprobs": logprobs,
            "images": images,
            "tool_images": tool_images or None,  # an empty list when no tool ran
            **{f"extra:{key}": value for key, value in extra_fields.items() if isinstance(value, list)},
        }
        local_rows = [
            {key: value[i] for key, value in columns.items() if value is not None} for i in range(len(prompts))
        ]
        all_rows = gather_object(local_rows) if self.accelerator.num_processes > 1 else local_rows
        share = len(global_rows) // self.accelerator.num_processes
        mine = slice(self.accelerator.process_index * share, (self.accelerator.process_index + 1) * share)
        rows = [all_rows[i] for i in global_rows[mine].tolist()]
        self._selected_rewards_per_func = rewards_per_func[global_rows.to(rewards_per_func.device)]
        self._selected_advantages = advantages.flatten()[mine].to(device=self.accelerator.device, dtype=torch.float32)
        tokens = torch.tensor([len(row["completion_ids"]) for row in all_rows], dtype=torch.float64)
        self._log_selection(pool_rewards, scorable, selected, selected_rewards)
        self._metrics["train"]["pods/tokens_generated"].append(tokens.sum().item())
        self._metrics["train"]["pods/tokens_trained"].append(tokens[global_rows].sum().item())

        # TRL's caller keeps using these two lists: shrink them in place to the trained rows.
        prompts[:] = [row["prompt"] for row in rows]
        inputs[:] = [row["input"] for row in rows]
        self.num_generations = m  # TRL now groups the trained rows by m
        self.phase_seconds["select"] += time.perf_counter() - start

        def column(key: str) -> list | None:
            return None if columns[key] is None else [row[key] for row in rows]

        extra = {key: value for key, value in extra_fields.items() if not isinstance(value, list)}
        extra.update({key[6:]: [row[key] for row in rows] for key in columns if key.startswith("extra:")})
        return (
            column("prompt_ids"),
            column("completion_ids"),
            column("tool_mask"),
            column("completion"),
            column("logprobs"),
            extra,
            column("images"),
            column("tool_images") or [],
        )

    def _log_selection(
        self,
        pool_rewards: torch.Tensor,
        scorable: torch.Tensor,
        selected: torch.Tensor,
        selected_rewards: torch.Tensor,
    ) -> None:
        """Log what the selection kept, under `pods/`, so runs can be audited and costed."""
        metrics = self._metrics["train"]
        valid_pool = pool_rewards[scorable]
        metrics["pods/pool_reward_mean"].append(valid_pool.mean().item())
        metrics["pods/pool_reward_std"].append(valid_pool.std().item() if valid_pool.numel() > 1 else 0.0)
        metrics["pods/selected_reward_mean"].append(selected_rewards.mean().item())
        metrics["pods/selected_reward_std"].append(selected_rewards.std().item())
        selected_var = selected_rewards.var(dim=1, unbiased=False)
        if self.args.selection_rule == "max_variance":
            best_var = selected_var
        else:
            best = select_rollouts(pool_rewards, self.num_selected, "max_variance", valid=scorable)
            best_var = pool_rewards.gather(1, best).var(dim=1, unbiased=False)
        counts = scorable.sum(dim=1)
        pool_mean = (pool_rewards * scorable).sum(dim=1, keepdim=True) / counts.unsqueeze(1)
        pool_var = ((pool_rewards - pool_mean).square() * scorable).sum(dim=1) / counts  # over scorable rollouts
        metrics["pods/selected_var_frac_of_best"].append(_ratio(selected_var.sum(), best_var.sum()))
        metrics["pods/selected_var_frac_of_pool"].append(_ratio(selected_var.sum(), pool_var.sum()))
        metrics["pods/zero_variance_groups_frac"].append((pool_var == 0).double().mean().item())
        metrics["pods/rollouts_generated"].append(float(pool_rewards.numel()))
        metrics["pods/rollouts_trained"].append(float(selected.numel()))


def _guard_reward(func: Callable[..., list], name: str) -> Callable[..., list]:
    """`func`, raising RewardError naming `name` and the sample when it raises or returns a NaN/inf reward.

    None stays allowed: in TRL it means "this function does not apply to this sample".
    """

    @functools.wraps(func)
    def guarded(*, prompts: list, completions: list, **kwargs: Any) -> list:
        try:
            rewards = func(prompts=prompts, completions=completions, **kwargs)
        except Exception as error:
            index = _failing_sample(func, prompts, completions, kwargs)
            where = (
                _sample(index, prompts, completions)
                if index is not None
                else "a batch whose samples all pass on their own"
            )
            raise RewardError(f"Reward function {name!r} raised {type(error).__name__}: {error} on {where}.") from error
        for index, reward in enumerate(rewards):
            if reward is not None and not _is_finite_number(reward):
                raise RewardError(
                    f"Reward function {name!r} returned {reward!r} for {_sample(index, prompts, completions)}: "
                    "rewards must be finite numbers (or None where the function does not apply)."
                )
        return rewards

    return guarded


def _failing_sample(func: Callable[..., list], prompts: list, completions: list, kwargs: dict) -> int | None:
    """The first sample on which `func` raises when called on that sample alone, if any."""
    size = len(prompts)
    for index in range(size):
        row = {k: v[index : index + 1] if isinstance(v, list) and len(v) == size else v for k, v in kwargs.items()}
        try:
            func(prompts=prompts[index : index + 1], completions=completions[index : index + 1], **row)
        except Exception:
            return index
    return None


def _is_finite_number(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def _sample(index: int, prompts: list, completions: list) -> str:
    return f"sample {index} (prompt {_preview(prompts[index])}, completion {_preview(completions[index])})"


def _preview(value: Any, limit: int = 200) -> str:
    """A prompt or completion, as text and clipped: a chat shows its last message."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        value = value[-1].get("content", value[-1])
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> float:
    """A variance fraction; 1.0 when there was no variance to capture."""
    return 1.0 if denominator.item() == 0 else (numerator / denominator).item()


class _PhaseClock(TrainerCallback):
    """Splits each optimizer step's wall time into generate, score, select and update, logged as `pods/time_*`."""

    def __init__(self, trainer: PODSTrainer):
        self.trainer = trainer
        self.step_start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self.trainer.phase_seconds.clear()
        self.step_start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        phases = self.trainer.phase_seconds
        phases["update"] = time.perf_counter() - self.step_start - sum(phases[p] for p in PHASES[:3])
        for phase in PHASES:
            self.trainer._metrics["train"][f"pods/time_{phase}"].append(phases[phase])
