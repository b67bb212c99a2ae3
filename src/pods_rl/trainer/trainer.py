"""PODSTrainer: GRPOTrainer whose update sees only the m selected rollouts of each prompt's pool of n.

TRL computes old-policy and reference log-probabilities *before* it scores the rollouts, all inside one long
method. To remove the unselected rollouts before any of that, PODS hooks in at the end of generation:

1. `_generate` (after TRL generated the local pool): score the pool (TRL gathers the rewards to every process),
   run the selection stages (`pods_rl.trainer.stages`) on the rewards of every pool, give each process an equal,
   contiguous share of the selected rows (`exchange.take_rows`: rows move only when a pool spans processes), and
   shrink the caller's `prompts` and `inputs` lists in place to those rows. From here on TRL only ever sees the
   trained rows. With `dynamic_sampling`, `_sample_dynamically` first drops the groups whose rewards are all equal
   and generates further prompts of the training data in their place (`pods_rl.trainer.refill`); with
   `rollout_allocation`, `pods_rl.trainer.allocated` generates the pools.
2. `_calculate_rewards`: TRL scores the (now selected) rows again; we return the rewards already computed.
3. `_generate_and_score_completions`: replace TRL's advantages with ours (`stages.advantages`), and its logged
   reward metrics and table advantages with the pool's metrics and the advantages used.

Checkpoints are written into a staging folder and renamed into place once complete (`_save_checkpoint`), with what
makes a resumed run the uninterrupted one: the data position and each epoch's order (`pods_rl.trainer.refill`),
TRL's buffer of a generation being trained (`_save_generation_buffer`), the selection generator; after a reward
failure, the state its step began with (`save_checkpoint_of_failed_step`). Every reward function is wrapped so that
a failure, a reward that is not a number finite in float32, or a wrong count names the function and the sample,
raised on every process together (`_raise_reward_failure`), and a reward model's scores are checked once TRL has
them (`_check_reward_models`): one policy for every kind.

`tests/trainer/test_trl_contract.py` fails loudly if TRL changes the internals these hooks rely on.
"""

from __future__ import annotations

import contextlib
import functools
import random
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from accelerate.utils import gather_object, send_to_device
from datasets import Dataset, IterableDataset
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import TrainerCallback
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, has_length, rotate_checkpoints
from trl import GRPOTrainer
from trl.trainer.utils import is_async_callable, repeat_iterable_dataset

from pods_rl.core.dynamic_sampling import another_round_needed, plan_groups
from pods_rl.trainer import stages
from pods_rl.trainer.allocated import Pool, RolloutAllocator
from pods_rl.trainer.config import PODSConfig
from pods_rl.trainer.cpu_fsdp import fsdp_on_cpu_processes
from pods_rl.trainer.exchange import rows_to_move, take_rows
from pods_rl.trainer.pools import grpo_metrics
from pods_rl.trainer.refill import EpochRepeatSampler, GenerationStream
from pods_rl.trainer.vllm import pool_sized_vllm

PHASES = ("generate", "score", "select", "update")
# A checkpoint is written under `<output_dir>/_tmp-checkpoint-N/` and renamed to `<output_dir>/checkpoint-N` when
# complete. The prefix keeps staging folders out of every `checkpoint-*` glob (resume, rotation), and the leading
# underscore out of Trainer's hub uploads of `output_dir` (they ignore `_*`), which may run while a save is staged.
STAGING_PREFIX = "_tmp-"
SELECTION_RNG_FILE = "pods_rng_state.safetensors"
GENERATION_BUFFER_FILE = "pods_generation_buffer_{process}.pt"


class RewardError(RuntimeError):
    """A reward function failed, or a reward function or model gave a NaN/inf reward; the message names the
    function and the sample."""


class PODSTrainer(GRPOTrainer):
    """Drop-in for `trl.GRPOTrainer` (same constructor) that trains on `num_selected` of `num_generations` rollouts."""

    _tag_names: ClassVar[list[str]] = ["trl", "grpo", "pods"]
    _name = "PODS"

    def __init__(  # GRPOTrainer's parameters, in its order, with its defaults
        self,
        model: Any,
        reward_funcs: Any = None,
        args: PODSConfig | None = None,
        train_dataset: Dataset | IterableDataset | None = None,
        eval_dataset: Any = None,
        processing_class: Any = None,
        reward_processing_classes: Any = None,
        callbacks: list[TrainerCallback] | None = None,
        optimizers: tuple[Any, Any] = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        tools: list[Callable] | None = None,
        rollout_func: Callable | None = None,
        environment_factory: Any = None,
    ):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = PODSConfig(f"{str(name).split('/')[-1]}-PODS")
        if not isinstance(args, PODSConfig):
            raise TypeError(f"PODSTrainer needs a PODSConfig, got {type(args).__name__}.")
        if args.dynamic_sampling and (tools or environment_factory is not None):
            raise ValueError("dynamic_sampling supports neither tools nor environment_factory.")
        if args.rollout_allocation != "none" and (tools or environment_factory is not None):
            raise ValueError(
                f"rollout_allocation={args.rollout_allocation!r} supports neither tools nor environment_factory."
            )
        if train_dataset is None:
            train_dataset = _environment_placeholder(args, environment_factory)
        with pool_sized_vllm(args):  # vLLM generates the whole pool in one batch, and runs on a CPU too
            super().__init__(
                model,
                reward_funcs,
                args,
                train_dataset=train_dataset,
                eval_dataset=eval_dataset,
                processing_class=processing_class,
                reward_processing_classes=reward_processing_classes,
                callbacks=callbacks,
                optimizers=optimizers,
                quantization_config=quantization_config,
                peft_config=peft_config,
                tools=tools,
                rollout_func=rollout_func,
                environment_factory=environment_factory,
            )
        self.pool_size = args.num_generations
        self.num_selected = args.num_selected
        # Same seed on every process: the random rule must pick the same rollouts everywhere.
        self._selection_generator = torch.Generator().manual_seed(args.seed)
        self._pool_inputs: list[dict] | None = None
        # Set by `_down_sample` for the rest of the TRL step that called it.
        self._trained_rewards: torch.Tensor | None = None  # rewards of every process's trained rows, global order
        self._trained_advantages: torch.Tensor | None = None  # their advantages, global order
        self._selected_advantages: torch.Tensor | None = None  # this process's
        self._pool_metrics: dict[str, float] = {}
        self.phase_seconds: dict[str, float] = defaultdict(float)
        self._staging_dir: Path | None = None
        # The data position (every run; `pods_rl.trainer.refill`), and with dynamic sampling where further prompts
        # come from and what the last step's rounds generated.
        self._data_stream = GenerationStream(args.steps_per_generation * self.num_iterations)
        self._train_sampler: EpochRepeatSampler | None = None
        # The random generators' states where the last step began (global ones, the selection generator's).
        self._step_start_random: tuple[dict[str, Any], torch.Tensor] | None = None
        self._rounds_generated: dict[str, float] = {}
        # Rollouts per prompt chosen by screening or from the history (`pods_rl.trainer.allocated`), or None.
        self._allocator = RolloutAllocator(self) if args.rollout_allocation != "none" else None
        self.add_callback(_PhaseClock(self))
        self.add_callback(_DataProgress(self))
        # Reward functions record a failure instead of raising, so that every process learns of it together
        # (`_raise_reward_failure`); nothing is left waiting in TRL's gather of the rewards.
        self._reward_failures: list[RewardError] = []
        self.reward_funcs = [
            func if isinstance(func, nn.Module) else _guard_reward(func, name, self._reward_failures)
            for func, name in zip(self.reward_funcs, self.reward_func_names, strict=True)
        ]

    def create_accelerator_and_postprocess(self) -> None:
        # accelerate would run FSDP on CPU processes as DDP, whether the launch or the arguments ask for it
        with fsdp_on_cpu_processes(requested=self.args.fsdp_plugin_args is not None):
            super().create_accelerator_and_postprocess()

    # ------------------------------------------------------------------ checkpoints: atomic, with the selection RNG
    def _save_checkpoint(self, model, trial) -> None:
        """Write the checkpoint into a staging folder, then rename it into place: a kill never leaves half of one.

        The parent writes `<its output dir>/checkpoint-N`; while it runs, `_get_output_dir` answers
        `<output_dir>/_tmp-checkpoint-N`, so the files land in `_tmp-checkpoint-N/checkpoint-N` first. The staging
        path must not leak into the Trainer's state: the best checkpoint is recorded under its final name (before
        `trainer_state.json` is rewritten and the folder renamed), and the hub push starts after the rename.
        """
        run_dir = Path(super()._get_output_dir(trial))
        name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        staging = run_dir / f"{STAGING_PREFIX}{name}"
        if self.args.should_save:
            shutil.rmtree(staging, ignore_errors=True)  # left by a save that was killed
        self.accelerator.wait_for_everyone()
        self._staging_dir = staging
        push_to_hub, self.args.push_to_hub = self.args.push_to_hub, False  # the parent would push the staging folder
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self._staging_dir = None
            self.args.push_to_hub = push_to_hub
        if self.state.best_model_checkpoint == str(staging / name):  # this checkpoint is the best one
            self.state.best_model_checkpoint = str(run_dir / name)
            if self.args.should_save:
                self.state.save_to_json(str(staging / name / TRAINER_STATE_NAME))
        self.accelerator.wait_for_everyone()  # every process wrote its part (e.g. its RNG state)
        target = run_dir / name
        if self.args.should_save:
            if target.exists():  # the same step saved again (e.g. after a failure): the new one replaces it
                shutil.rmtree(target)
            (staging / name).rename(target)
            shutil.rmtree(staging)
        if push_to_hub:
            self._push_from_checkpoint(str(target))
        if self.args.should_save:
            # The parent rotated inside the staging folder; rotate the real checkpoints now that this one counts.
            rotate_checkpoints(
                str(run_dir), self.args.save_total_limit, self.state.best_model_checkpoint, use_mtime=True
            )
        self.accelerator.wait_for_everyone()

    def _get_output_dir(self, trial) -> str:
        return str(self._staging_dir) if self._staging_dir is not None else super()._get_output_dir(trial)

    def _save_rng_state(self, output_dir: str) -> None:
        """Also save what a resumed run needs besides the Trainer's state: the selection generator (the random
        rule's draws), the data position (`pods_rl.trainer.refill`), and, between two generations, TRL's buffer of
        the last one (`_save_generation_buffer`)."""
        super()._save_rng_state(output_dir)
        if self.args.should_save:
            save_file({"selection": self._selection_generator.get_state()}, str(Path(output_dir) / SELECTION_RNG_FILE))
            self._data_stream.save(Path(output_dir))
            if self._allocator is not None:
                self._allocator.save(Path(output_dir))
        self._save_generation_buffer(Path(output_dir))

    def _load_rng_state(self, checkpoint: str | None) -> None:
        super()._load_rng_state(checkpoint)
        path = Path(checkpoint or "") / SELECTION_RNG_FILE
        if checkpoint is not None and path.is_file():
            self._selection_generator.set_state(load_file(str(path))["selection"])
        if checkpoint is not None and self._allocator is not None:
            self._allocator.load(Path(checkpoint), self.state.global_step)

    def _save_generation_buffer(self, folder: Path) -> None:
        """TRL trains R = steps_per_generation * num_iterations micro-batches from one generation, kept in
        `_buffered_inputs`, and counts them in `_step`; it saves neither, so a run resumed between two generations
        would generate again from a batch it had trained on. Save both there (each process its own rows)."""
        if self._step % (self.args.steps_per_generation * self.num_iterations):
            state = {"step": self._step, "buffer": self._buffered_inputs}
            torch.save(state, folder / GENERATION_BUFFER_FILE.format(process=self.args.process_index))

    def _load_generation_buffer(self, checkpoint: Path) -> None:
        path = checkpoint / GENERATION_BUFFER_FILE.format(process=self.args.process_index)
        self._step, self._buffered_inputs = 0, None  # at a generation's start: TRL generates first
        if path.is_file():
            state = send_to_device(torch.load(path, map_location="cpu", weights_only=True), self.accelerator.device)
            self._step, self._buffered_inputs = state["step"], state["buffer"]

    def save_checkpoint_of_failed_step(self) -> None:
        """After a step failed before its update (a RewardError while it generated), save a checkpoint of the last
        completed step as a checkpoint saved at its end would be: the data position and the random generators go
        back to where the failed step began, so that a resumed run repeats that step as the uninterrupted run did.
        Every process calls it (the save is collective)."""
        if self._step_start_random is not None:  # the failed step had begun (not an evaluation's failure)
            self._data_stream.rewind()
            if self._allocator is not None:
                self._allocator.rewind()
            states, selection = self._step_start_random
            _set_random_states(states)
            self._selection_generator.set_state(selection)
            self._step_start_random = None
        self._save_checkpoint(self.model_wrapped, trial=None)

    # ------------------------------------------------------------------ data: pools of n per prompt, in order
    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The step's batches, through the data stream (which counts them and serves what a draw handed back);
        the random generators are noted first, for `save_checkpoint_of_failed_step`."""
        self._step_start_random = _random_states(), self._selection_generator.get_state()
        if self._allocator is not None:
            self._allocator.note_step_start()
        batches = self._data_stream.take(epoch_iterator, num_batches)
        return batches, self._get_num_items_in_batch(batches, device)

    def _init_training_state(
        self, max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
    ):
        """Resume at the saved data position (`pods_rl.trainer.refill`): refills consumed batches that the Trainer's
        count of `global_step * gradient_accumulation_steps` does not know of, and a dataset without a length never
        leaves the Trainer's epoch 0. TRL's buffer of the current generation comes back too."""
        epochs_trained, batches_trained = super()._init_training_state(
            max_steps, num_update_steps_per_epoch, num_train_epochs, resume_from_checkpoint, trial
        )
        saved = None
        if resume_from_checkpoint is not None:
            self._load_generation_buffer(Path(resume_from_checkpoint))
            if not self.args.ignore_data_skip:
                saved = self._data_stream.saved_position(Path(resume_from_checkpoint))
        if saved is not None:
            epochs_trained, batches_trained = saved
        self._data_stream.start_at(epochs_trained, batches_trained)
        return epochs_trained, batches_trained

    def set_initial_training_values(self, args, dataloader):
        """Note the epoch's length in batches (where the dataloader has one) for the data stream. With dynamic
        sampling an epoch holds fewer steps than the Trainer counts (refills consume its batches): run as many
        epochs as max_steps needs (PODSConfig requires max_steps with dynamic sampling)."""
        values = super().set_initial_training_values(args, dataloader)
        self._data_stream.epoch_length = len(dataloader) if has_length(dataloader) else None
        if (args.dynamic_sampling or args.rollout_allocation != "none") and args.max_steps > 0:
            return (sys.maxsize, *values[1:])
        return values

    def _run_epoch(self, *, epoch: int, **kwargs):
        """Tell the sampler its epoch before the epoch's first batch. The Trainer's `set_epoch` on the dataloader
        does not reach it through every accelerate wrapper (a resumed multi-process run's skipping sampler)."""
        if self._train_sampler is not None:
            self._train_sampler.set_epoch(epoch)
        return super()._run_epoch(epoch=epoch, **kwargs)

    def get_train_dataloader(self):
        """Batches of this process's `local_pool_size` rows: whole pools of n per prompt, laid out prompt by prompt
        over the processes (the sampler for a map-style dataset, TRL's stream transform for an IterableDataset)."""
        dataset = self.train_dataset
        if isinstance(dataset, IterableDataset):
            if self.shuffle_dataset:
                dataset = dataset.shuffle(seed=self.args.seed)
            dataset = repeat_iterable_dataset(
                dataset,
                mini_repeat_count=self.args.num_generations,
                batch_size=self.args.generation_batch_size // self.args.num_selected,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
            )
        return self._get_dataloader(
            dataset=dataset,
            description="Training",
            batch_size=self.args.local_pool_size,
            sampler_fn=self._get_train_sampler,
            is_training=True,
        )

    def _get_train_sampler(self, dataset=None) -> EpochRepeatSampler:
        self._train_sampler = EpochRepeatSampler(
            data_source=self.train_dataset if dataset is None else dataset,
            mini_repeat_count=self.args.num_generations,
            batch_size=self.args.generation_batch_size // self.args.num_selected,
            repeat_count=self.num_iterations * self.args.steps_per_generation,
            shuffle=self.shuffle_dataset,
            seed=self.args.seed,
        )
        return self._train_sampler

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
            self._trained_rewards = None
        if self._selected_advantages is None:
            raise RuntimeError(
                "PODSTrainer's selection hook did not run: the installed TRL no longer calls `_generate` from "
                "`_generate_and_score_completions`. Pin trl to the version in pyproject.toml."
            )
        output["advantages"] = self._selected_advantages
        self._selected_advantages = None
        self._correct_trl_logs()
        return output

    def _correct_trl_logs(self) -> None:
        """TRL just logged its reward metrics over the trained rows and its own advantages for them. Log instead
        the pool's reward metrics under TRL's names (what GRPO would log; `pods/selected_*` describe the trained
        subset), and in the completions table the advantages the update used."""
        metrics = self._metrics["train"]
        for name, value in self._pool_metrics.items():
            metrics[name][-1] = value
        logged = self._logs["advantages"]
        for _ in range(len(self._trained_advantages)):
            logged.pop()
        logged.extend(self._trained_advantages.tolist())
        self._pool_metrics, self._trained_advantages = {}, None

    def _generate(self, prompts: list):
        if self._allocator is not None and self._pool_inputs is not None:  # the allocation generates the pool
            return self._down_sample(prompts, None)
        start = time.perf_counter()
        with self._generation_autocast():
            generated = super()._generate(prompts)
        self.phase_seconds["generate"] += time.perf_counter() - start
        if self._pool_inputs is None:  # evaluation, or a TRL path that does not train
            return generated
        return self._down_sample(prompts, generated)

    def _generation_autocast(self):
        """With bf16 on a CPU, one autocast over HF `generate`'s whole call. accelerate already runs each forward
        under autocast, but the casts of the weights are cached only while an autocast is open, so each token would
        cast every weight again; under one outer autocast each is cast once per call (the same arithmetic). It also
        covers a PEFT model's generate, which reaches the base model's forward past accelerate's wrapper."""
        if self.args.bf16 and self.accelerator.device.type == "cpu" and not self.use_vllm:
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        if self._trained_rewards is not None:  # the trained rows were scored with their pool
            rewards, self._trained_rewards = self._trained_rewards, None
            return rewards
        start = time.perf_counter()
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._raise_reward_failure()
        self._check_reward_models(rewards, prompts, completions)
        self.phase_seconds["score"] += time.perf_counter() - start
        return rewards

    def _raise_reward_failure(self) -> None:
        """Raise the RewardError of a reward function that failed on any process, on every process (they all call
        this after each scoring): the failing one raises its own, the others name it and its process."""
        failure = self._reward_failures[0] if self._reward_failures else None
        self._reward_failures.clear()
        if self.accelerator.num_processes > 1:
            failed = self.accelerator.gather(torch.tensor([failure is not None], device=self.accelerator.device))
            if failed.any():
                messages = gather_object([None if failure is None else str(failure)])
                process = int(failed.nonzero()[0, 0])
                failure = failure or RewardError(f"{messages[process]} (on process {process})")
        if failure is not None:
            raise failure

    def _check_reward_models(self, rewards: torch.Tensor, prompts: list, completions: list) -> None:
        """Raise RewardError for a NaN/inf score of a reward model (nn.Module) in the gathered `rewards`.

        A model never means "not applicable" (None, which TRL stores as NaN), so every non-finite score is an
        error. Checked on the gathered rewards, so that every process raises, naming the first bad row."""
        for column, (func, name) in enumerate(zip(self.reward_funcs, self.reward_func_names, strict=True)):
            bad = (~torch.isfinite(rewards[:, column])).nonzero() if isinstance(func, nn.Module) else []
            if not len(bad):
                continue
            row = bad[0, 0].item()
            local = row - self.accelerator.process_index * len(prompts)
            where = (
                _sample(local, prompts, completions)
                if 0 <= local < len(prompts)
                else f"row {row} of the gathered batch (generated on another process)"
            )
            raise RewardError(
                f"Reward model {name!r} returned {rewards[row, column].item()!r} for {where}: "
                "reward models must score every sample with a finite number."
            )

    def _down_sample(self, prompts: list, generated: tuple) -> tuple:
        """Score the pool, select rollouts on the gathered rewards and take this process's share of the selected rows.

        Rewards and two numbers per row are the only things gathered from every process; every process runs the
        selection stages (`pods_rl.trainer.stages`) on every pool. The selected rows are listed in global order and
        each process trains on an equal, contiguous share of them; a row generated on another process (only when a
        prompt's pool spans processes) is sent by `take_rows`, which moves nothing when all pools are local.
        """
        inputs = self._pool_inputs
        generated, rewards_per_func, layout, allocated = self._build_pools(prompts, inputs, generated)
        (_, completion_ids, tool_mask, _, _, extra_fields, images, _) = generated

        start = time.perf_counter()
        settings = self._selection_settings()
        weights = self.reward_weights.to(rewards_per_func.device)
        # Per generated row (one small gather): the model's completion tokens and whether TRL masks the row's loss.
        local_rows = torch.tensor(
            list(zip(_model_tokens(completion_ids, tool_mask), self._loss_masked(completion_ids), strict=True)),
            dtype=torch.int32,
            device=self.accelerator.device,
        )
        gathered = self.accelerator.gather(local_rows).cpu()
        pools = stages.lay_out(rewards_per_func, layout, gathered[:, 0], gathered[:, 1], weights, settings.aggregation)
        selected = self._select(pools, settings)
        advantages = stages.advantages(pools, selected, weights, settings)
        processes, process = self.accelerator.num_processes, self.accelerator.process_index
        positions, plan = stages.row_plan(selected, layout, processes, settings.rows_per_process)
        local_size = len(prompts)
        rows = self._trained_rows(prompts, inputs, generated, plan)
        self._trained_rewards = rewards_per_func[plan.flatten().to(rewards_per_func.device)]
        self._trained_advantages = advantages[positions]
        mine = positions.view(processes, settings.rows_per_process)[process]
        self._selected_advantages = advantages[mine].to(device=self.accelerator.device, dtype=torch.float32)
        self._pool_metrics = grpo_metrics(
            pools.rewards, weights, self.reward_func_names, pools.size, settings.aggregation, settings.scale
        )
        metrics = self._metrics["train"]
        for name, value in stages.selection_metrics(pools, selected, settings, rows_to_move(plan, local_size)).items():
            metrics[name].append(value)
        if self.args.dynamic_sampling and allocated is None:
            self._log_dynamic_sampling()
        if allocated is not None:
            self._allocator.log(metrics, allocated.stats, float(gathered[:, 0].sum()))

        # TRL's caller keeps using these two lists: shrink them in place to the trained rows.
        prompts[:] = rows["prompt"]
        inputs[:] = rows["input"]
        self.num_generations = self.num_selected  # TRL now groups the trained rows by m
        self.phase_seconds["select"] += time.perf_counter() - start

        # On the rollout_func path `images` is None and TRL would fall back to the (unselected) dataset images.
        images = _dataset_images(rows["input"]) if images is None else rows["images"]
        return _generated_from_columns(rows, extra_fields, local_size, images)

    def _build_pools(
        self, prompts: list, inputs: list, generated: tuple | None
    ) -> tuple[tuple, torch.Tensor, torch.Tensor, Pool | None]:
        """The step's pools, built as configured: `generated`'s n rows per prompt, the groups dynamic sampling kept,
        or the rollout allocation's pools (which it generates: `generated` is None). Returns the generated rows
        (`_generate`'s tuple; `prompts` and `inputs` are rewritten in place to match), their gathered rewards, the
        (prompts, K) layout of each pool's rows (-1: padding) and the allocation's pool (None without allocation)."""
        if self._allocator is not None:  # pools of chosen sizes, laid out over the generated rows
            allocated = self._allocator.build(prompts, inputs)
            prompts[:], inputs[:] = allocated.columns["prompt"], allocated.columns["input"]
            generated = _generated_from_columns(
                allocated.columns, allocated.extra_fields, len(prompts), allocated.columns["images"]
            )
            return generated, allocated.rewards, allocated.layout, allocated
        rewards_per_func = self._score_pool(prompts, inputs, generated)
        if self.args.dynamic_sampling:
            generated, rewards_per_func = self._sample_dynamically(prompts, inputs, generated, rewards_per_func)
        layout = torch.arange(len(rewards_per_func)).view(-1, self.pool_size)  # n rows per prompt, in order
        return generated, rewards_per_func, layout, None

    def _trained_rows(self, prompts: list, inputs: list, generated: tuple, plan: torch.Tensor) -> dict[str, list]:
        """This process's rows of the (processes, rows) `plan`, column by column, through `exchange.take_rows`: the
        generated columns, reward functions' `log_extra` columns and environments. TRL's pending `log_extra` columns
        and environments are cut to those rows too."""
        local_size, process = len(prompts), self.accelerator.process_index
        columns = {
            **_pool_columns(prompts, inputs, generated),
            # Columns that reward functions logged through `log_extra`, one value per pool row.
            **{f"log:{key}": value for key, value in self._pending_extra_logs.items() if _per_row(value, local_size)},
        }
        if self.environment_factories is not None:
            columns["environment"] = self._batch_environments
        rows = take_rows(columns, plan, local_size, process, self.accelerator.device)
        if self.environment_factories is not None:
            self._batch_environments = rows["environment"]  # TRL renders each row's tools from it
        self._align_environments(plan[process], local_size)
        for key in columns:
            if key.startswith("log:"):
                self._pending_extra_logs[key[4:]] = rows[key]
        return rows

    def _generate_rows(self, inputs: list[dict], per_prompt: int) -> tuple[dict, torch.Tensor, dict]:
        """Generate one rollout for each of `inputs` (this process's rows; consecutive rows of a prompt form groups
        of `per_prompt`, which TRL's vLLM generation reads as `num_generations`) and score them. Returns the rows'
        columns (`_pool_columns`), the gathered rewards and rollout_func's extra fields. Every process calls it with
        the same number of rows."""
        if inputs and ("images" in inputs[0] or "image" in inputs[0]):
            raise ValueError("rollout_allocation supports text prompts only; the training data has images.")
        prompts = [row["prompt"] for row in inputs]
        start = time.perf_counter()
        self.num_generations = per_prompt
        try:
            with self._generation_autocast():
                generated = super()._generate(prompts)
        finally:
            self.num_generations = self.pool_size
        self.phase_seconds["generate"] += time.perf_counter() - start
        rewards = self._score_pool(prompts, inputs, generated)
        return _pool_columns(prompts, inputs, generated), rewards, generated[5]

    def _score_pool(self, prompts: list, inputs: list, generated: tuple) -> torch.Tensor:
        """Gathered (rows of every process, reward functions) rewards of a generated pool. TRL merges rollout_func's
        extra fields into the inputs only after `_generate`; the pool is scored here, so merge them first."""
        (_, completion_ids, _, completions, _, extra_fields, _, _) = generated
        return self._calculate_rewards(_merge_extra_fields(inputs, extra_fields), prompts, completions, completion_ids)

    def _sample_dynamically(self, prompts: list, inputs: list, generated: tuple, rewards_per_func: torch.Tensor):
        """Dynamic sampling: drop the pool's groups whose selection scores are all equal and generate the next
        prompts of the training data until every process holds its groups (`pods_rl.core.dynamic_sampling`, prompts
        from `pods_rl.trainer.refill`). Returns the kept pool's `generated` tuple and gathered rewards, and rewrites
        `prompts` and `inputs` in place to its rows; each process keeps `len(prompts)` rows of its own rollouts."""
        n, local_size, processes = self.pool_size, len(prompts), self.accelerator.num_processes
        weights = self.reward_weights.to(rewards_per_func.device)

        def informative(rewards: torch.Tensor) -> torch.Tensor:
            """(processes, groups) bool: which of every process's groups vary."""
            return stages.informative(rewards, weights, n, self.multi_objective_aggregation).view(processes, -1)

        rounds, rewards = [_pool_columns(prompts, inputs, generated)], [rewards_per_func]
        masks = [informative(rewards_per_func)]
        while another_round_needed(masks, self.args.max_generation_rounds):
            batch = self._data_stream.draw()
            if batch is None:  # the epoch has no generation batch left (on every process alike)
                break
            if "images" in batch[0] or "image" in batch[0]:
                raise ValueError("dynamic_sampling supports text prompts only; the training data has images.")
            batch_prompts = [row["prompt"] for row in batch]
            start = time.perf_counter()
            with self._generation_autocast():
                batch_generated = super()._generate(batch_prompts)
            self.phase_seconds["generate"] += time.perf_counter() - start
            batch_rewards = self._score_pool(batch_prompts, batch, batch_generated)
            rounds.append(_pool_columns(batch_prompts, batch, batch_generated))
            rewards.append(batch_rewards)
            masks.append(informative(batch_rewards))

        plan = plan_groups(masks)  # (processes, groups, 2): the (round, group) of every slot
        within = torch.arange(n)
        rounds_of_rows = plan[..., 0, None].expand(-1, -1, n)
        local_rows = plan[..., 1, None] * n + within  # row within its round's local pool
        global_rows = local_rows + torch.arange(processes).view(-1, 1, 1) * local_size
        device = rewards_per_func.device
        pool_rewards = torch.stack(rewards)[rounds_of_rows.flatten().to(device), global_rows.flatten().to(device)]
        mine = (rounds_of_rows * local_size + local_rows)[self.accelerator.process_index].flatten().tolist()
        columns = {}
        for key in dict.fromkeys(key for columns_of_round in rounds for key in columns_of_round):
            values = [value for r in rounds for value in (r.get(key) or [None] * local_size)]
            columns[key] = None if all(value is None for value in values) else [values[row] for row in mine]
        for key, values in self._pending_extra_logs.items():  # reward functions logged one value per row, each round
            if len(values) == len(rounds) * local_size:
                self._pending_extra_logs[key] = [values[row] for row in mine]
        prompts[:], inputs[:] = columns["prompt"], columns["input"]

        generated_tokens = sum(len(ids) for r in rounds for ids in r["completion_ids"])
        self._rounds_generated = {
            "rounds": float(len(masks)),
            "prompts": float(len(masks) * plan.shape[0] * plan.shape[1]),
            "groups_dropped": (~torch.stack(masks)).double().mean().item(),
            "tokens": self.accelerator.gather(torch.tensor([generated_tokens], device=device)).sum().item(),
        }
        return _generated_from_columns(columns, generated[5], local_size, columns["images"]), pool_rewards

    def _log_dynamic_sampling(self) -> None:
        """Log what dynamic sampling's rounds generated (`pods/generation_rounds`, `pods/prompts_generated`,
        `pods/groups_dropped_frac`, `pods/rollouts_per_trained_row`), and count every round's rollouts and tokens in
        `pods/rollouts_generated` and `pods/tokens_generated`, which the cost model charges generation by."""
        metrics, stats = self._metrics["train"], self._rounds_generated
        rollouts = stats["prompts"] * self.pool_size
        metrics["pods/rollouts_generated"][-1] = rollouts
        metrics["pods/tokens_generated"][-1] = stats["tokens"]
        metrics["pods/generation_rounds"].append(stats["rounds"])
        metrics["pods/prompts_generated"].append(stats["prompts"])
        metrics["pods/groups_dropped_frac"].append(stats["groups_dropped"])
        metrics["pods/rollouts_per_trained_row"].append(rollouts / metrics["pods/rollouts_trained"][-1])

    def _selection_settings(self) -> stages.SelectionSettings:
        """What the selection stages read from this trainer's configuration."""
        args = self.args
        return stages.SelectionSettings(
            num_selected=self.num_selected,
            rule=args.selection_rule,
            budget=args.selection_budget,
            tie_break=args.selection_tie_break,
            rows_per_process=args.per_device_train_batch_size * args.steps_per_generation,
            aggregation=self.multi_objective_aggregation,
            scale=self.scale_rewards,
            advantage_stats=args.advantage_stats,
        )

    def _select(self, pools: stages.Pools, settings: stages.SelectionSettings) -> torch.Tensor:
        """(G, n) bool mask of the rollouts the update sees: `stages.select` by the configured rule and budget, the
        random rule drawing from the selection generator (saved with each checkpoint).

        The one place that decides; another rule can override it with any mask that keeps `processes x
        per_device_train_batch_size x steps_per_generation` rollouts in all, in any groups: advantages, row
        exchange and logging follow the mask. It must be the same on every process (it sees the same pools).
        With `selection_budget="batch"` whole pools are local (checked by PODSConfig), so no row moves.
        """
        return stages.select(pools, settings, self._selection_generator)

    def _loss_masked(self, completion_ids: list[list[int]]) -> list[bool]:
        """Per row, whether TRL will mask its loss: with `mask_truncated_completions`, a truncated completion, which
        TRL tells by its last token being neither EOS nor pad."""
        if not self.mask_truncated_completions:
            return [False] * len(completion_ids)
        ends = {*self.eos_token_ids, self._tokenizer.pad_token_id}
        return [bool(ids) and ids[-1] not in ends for ids in completion_ids]

    def _align_environments(self, my_rows: torch.Tensor, local_size: int) -> None:
        """Keep `environments` row-aligned with the trained rows. Environments cannot move between processes: a row
        generated elsewhere gets None (TRL reads environments only while generating and scoring, both done)."""
        if not self.environments:
            return
        start = self.accelerator.process_index * local_size
        self.environments = [
            self.environments[row - start] if 0 <= row - start < local_size else None for row in my_rows.tolist()
        ]


def _environment_placeholder(args: PODSConfig, factory: Any) -> Dataset | None:
    """When a single environment owns the data (no train_dataset), TRL builds a placeholder of
    `generation_batch_size / n` empty prompts; PODS draws `generation_batch_size / m` prompts per generation, so
    TRL's would yield no batch at all. Build it at PODS's size (None leaves TRL's own error cases to TRL: a dict of
    environments, or no max_steps)."""
    if not callable(factory) or isinstance(factory, dict) or args.max_steps <= 0:
        return None
    prompts = args.generation_batch_size // args.num_selected
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}]] * prompts})


def _model_tokens(completion_ids: list[list[int]], tool_mask: list[list[int]] | None) -> list[int]:
    """Per row, the completion tokens the model generated: TRL's `tool_mask` marks tool and environment output 0."""
    if tool_mask is None:
        return [len(ids) for ids in completion_ids]
    return [sum(mask) for mask in tool_mask]


def _pool_columns(prompts: list, inputs: list, generated: tuple) -> dict[str, list | None]:
    """One generation round's local rows, column by column (rollout_func's per-row extra fields as `extra:<key>`)."""
    (prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images) = generated
    return {
        "prompt": prompts,
        "input": inputs,
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "tool_mask": tool_mask,
        "completion": completions,
        "logprobs": logprobs,
        "images": images,
        "tool_images": tool_images or None,  # an empty list when no tool ran
        **{f"extra:{key}": value for key, value in extra_fields.items() if _per_row(value, len(prompts))},
    }


def _generated_from_columns(columns: dict, extra_fields: dict, pool_rows: int, images: list | None) -> tuple:
    """`_generate`'s tuple for the rows in `columns` (the inverse of `_pool_columns`): rollout_func's per-row extra
    fields come from their `extra:<key>` columns, the others (of the `pool_rows`-row pool) stay whole."""
    extra = {key: value for key, value in extra_fields.items() if not _per_row(value, pool_rows)}
    extra.update({key[6:]: value for key, value in columns.items() if key.startswith("extra:")})
    return (
        columns["prompt_ids"],
        columns["completion_ids"],
        columns["tool_mask"],
        columns["completion"],
        columns["logprobs"],
        extra,
        images,
        columns["tool_images"] or [],
    )


def _per_row(value: Any, rows: int) -> bool:
    """Whether an extra field or log_extra column holds one value per pool row (else it is kept whole)."""
    return isinstance(value, list) and len(value) == rows


def _merge_extra_fields(inputs: list[dict], extra_fields: dict) -> list[dict]:
    """Copies of `inputs` with rollout_func's extra fields merged in, exactly as TRL merges them before scoring."""
    if not extra_fields:
        return inputs
    merged = []
    for i, row in enumerate(inputs):
        row = dict(row)
        for key, values in extra_fields.items():
            if isinstance(values, list) and i < len(values):
                row[key] = values[i]
            elif not isinstance(values, list):
                row[key] = values
        merged.append(row)
    return merged


def _dataset_images(inputs: list[dict]) -> list | None:
    """The images TRL takes from the dataset rows (`images` or `image` column), for the given rows."""
    if not inputs:
        return None
    if "images" in inputs[0]:
        images = [row.get("images") for row in inputs]
    elif "image" in inputs[0]:
        images = [[row["image"]] if row.get("image") is not None else None for row in inputs]
    else:
        return None
    return None if all(image_list == [] for image_list in images) else images


def _guard_reward(func: Callable[..., list], name: str, failures: list[RewardError]) -> Callable[..., list]:
    """`func`, checked. When it raises, returns other than one reward per sample, or returns a reward that is
    neither None nor a number finite as TRL stores it (float32; checked before TRL turns None into NaN), the
    RewardError naming `name` and the sample goes to `failures` and every reward is 0: the trainer raises it on every
    process once TRL has gathered the rewards (`PODSTrainer._raise_reward_failure`), so that no process is left
    waiting in that gather.

    None stays allowed: in TRL it means "this function does not apply to this sample".
    """

    def failed(failure: RewardError, size: int) -> list:
        failures.append(failure)
        return [0.0] * size

    if is_async_callable(func):

        @functools.wraps(func)
        async def guarded_async(*, prompts: list, completions: list, **kwargs: Any) -> list:
            try:
                rewards = await func(prompts=prompts, completions=completions, **kwargs)
            except Exception as error:
                where = f"a batch of {len(prompts)} samples"
                return failed(_raised(name, error, where), len(prompts))
            failure = _check_rewards(name, rewards, prompts, completions)
            return rewards if failure is None else failed(failure, len(prompts))

        return guarded_async

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
            return failed(_raised(name, error, where), len(prompts))
        failure = _check_rewards(name, rewards, prompts, completions)
        return rewards if failure is None else failed(failure, len(prompts))

    return guarded


def _raised(name: str, error: Exception, where: str) -> RewardError:
    failure = RewardError(f"Reward function {name!r} raised {type(error).__name__}: {error} on {where}.")
    failure.__cause__ = error
    return failure


def _check_rewards(name: str, rewards: Any, prompts: list, completions: list) -> RewardError | None:
    """The RewardError for rewards that are not one per sample, or for the first that is neither None nor a number
    finite in float32 (what TRL stores: 1e39 is a finite float but an infinite float32); None if they pass."""
    try:
        count = len(rewards)
    except TypeError:
        count = None
    if count != len(prompts):
        got = f"{count} rewards" if count is not None else f"a {type(rewards).__name__}"
        return RewardError(
            f"Reward function {name!r} returned {got} for {len(prompts)} samples: it must return a list of one "
            "reward per sample (None where it does not apply)."
        )
    values = [_as_float(reward) for reward in rewards]
    stored = torch.tensor([0.0 if v is None else v for v in values], dtype=torch.float64).to(torch.float32)
    finite = stored.isfinite().tolist()  # one call, not one a reward: this runs on every step
    for index, (reward, value) in enumerate(zip(rewards, values, strict=True)):
        if reward is not None and (value is None or not finite[index]):
            shown, sample = _clip(repr(reward), 60), _sample(index, prompts, completions)
            return RewardError(
                f"Reward function {name!r} returned {shown} for {sample}: rewards must be numbers, finite in float32 "
                "(or None where the function does not apply)."
            )
    return None


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


def _as_float(value: Any) -> float | None:
    """`value` as a float, or None if it is no number (a string, None) or beyond a float (an int like 10**400)."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _random_states() -> dict[str, Any]:
    """The global random generators' states, those the Trainer checkpoints: Python's, NumPy's, torch's (CPU and
    every CUDA device)."""
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["cpu"])
    if "cuda" in states:
        torch.cuda.set_rng_state_all(states["cuda"])


def _sample(index: int, prompts: list, completions: list) -> str:
    return f"sample {index} (prompt {_preview(prompts[index])}, completion {_preview(completions[index])})"


def _preview(value: Any, limit: int = 200) -> str:
    """A prompt or completion, as text and clipped: a chat shows its last message."""
    if isinstance(value, list) and value and isinstance(value[-1], dict):
        value = value[-1].get("content", value[-1])
    return _clip(repr(value), limit)


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _DataProgress(TrainerCallback):
    """At a step's end: log as `epoch` the share of the data taken (epochs begun, plus the current one's batches
    taken over its length), refills included, instead of the Trainer's count of the loop's own batches: the same
    whether or not the run was resumed, and what an epoch means under dynamic sampling (without refills both are
    equal). And forget the random states of the step's start (`PODSTrainer.save_checkpoint_of_failed_step`)."""

    def __init__(self, trainer: PODSTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        stream = self.trainer._data_stream
        if stream.epoch_length:
            state.epoch = stream.epoch + stream.position / stream.epoch_length
        self.trainer._step_start_random = None  # the step completed: nothing to rewind


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
