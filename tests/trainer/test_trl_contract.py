"""PODSTrainer hooks three GRPOTrainer internals; these tests fail loudly when TRL changes under them."""

import inspect
from importlib.metadata import version

from trl import GRPOTrainer

from pods_rl import PODSTrainer


def test_trl_is_the_pinned_release():
    assert version("trl") == "1.16.0", "PODSTrainer is tested against trl 1.16.0: re-check the hooks below."


def test_generate_and_score_feeds_the_hooks():
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    # The selection runs inside _generate and shrinks these two lists in place; TRL must keep using them after.
    assert "= self._generate(prompts)" in source
    assert "self._calculate_rewards(inputs, prompts, completions, completion_ids_list)" in source
    # Each process's slice of the gathered rewards and TRL's grouping must follow the (shrunk) lists.
    assert "self.accelerator.process_index * len(prompts)" in source
    assert 'num_generations = self.num_generations if mode == "train"' in source
    # The advantages we replace must be an output key.
    assert '"advantages": advantages' in source
    # On the rollout_func path TRL falls back to the dataset images when `_generate` returns none (we return the
    # selected rows' images instead), and merges extra fields into the shrunk inputs after `_generate`.
    assert "images = dataset_images" in source
    assert "for key, values in extra_fields.items():" in source
    # `_correct_trl_logs` overwrites what TRL just logged: one value per reward metric, one advantage per row.
    assert 'self._metrics[mode]["reward"].append(' in source
    assert '_metrics[mode][f"rewards/{reward_func_name}/mean"].append(' in source
    assert 'self._logs["advantages"].extend(all_process_advantages.tolist())' in source


def test_generate_returns_what_down_sampling_unpacks():
    source = inspect.getsource(GRPOTrainer._generate)
    assert (
        "return prompt_ids, completion_ids, tool_mask, completions, logprobs, extra_fields, images, tool_images"
        in source
    )


def test_signatures_are_unchanged():
    params = list(inspect.signature(GRPOTrainer._calculate_rewards).parameters)
    assert params == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    assert list(inspect.signature(GRPOTrainer._generate).parameters) == ["self", "prompts"]
    assert list(inspect.signature(PODSTrainer.__init__).parameters)[:4] == [
        "self",
        "model",
        "reward_funcs",
        "args",
    ]


def test_loss_mask_is_the_one_selection_predicts():
    """`_loss_masked` and `_model_tokens` predict which rows and tokens reach TRL's loss, by TRL's own rules."""
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert "if self.mask_truncated_completions:" in source
    assert "eos_and_pad = [*self.eos_token_ids, self._tokenizer.pad_token_id]" in source
    assert "is_truncated = torch.tensor([ids[-1] not in eos_and_pad for ids in completion_ids_list]" in source
    assert "loss_mask = completion_mask if tool_mask is None else completion_mask * tool_mask" in source
    assert 'tool_mask = extra_fields.pop("env_mask", None)' in inspect.getsource(GRPOTrainer._generate)


def test_the_training_loop_feeds_the_data_stream():
    """The data stream (and dynamic sampling) follows the loop's epoch iterator through `get_batch_samples`, tells a
    resumed loop its data position through `_init_training_state`, and lifts the epoch count in
    `set_initial_training_values`; the sampler learns its epoch in `_run_epoch`."""
    from transformers import Trainer

    loop = inspect.getsource(Trainer._run_epoch)
    assert "self.get_batch_samples(epoch_iterator, num_batches, self.args.device)" in loop
    assert "epoch_iterator = iter(train_dataloader)" in loop  # after `_run_epoch` began: the sampler knows its epoch
    assert "_run_epoch(\n                model=model,\n                epoch=epoch," in inspect.getsource(
        Trainer._inner_training_loop
    )
    samples = inspect.getsource(Trainer.get_batch_samples)  # PODSTrainer's takes the batches itself
    assert "num_items_in_batch = self._get_num_items_in_batch(batch_samples, device)" in samples
    assert "skip_first_batches(train_dataloader, steps_trained_in_current_epoch)" in loop
    assert "num_update_steps_trained = steps_trained_in_current_epoch // self.args.gradient_accumulation_steps" in loop
    training = inspect.getsource(Trainer._inner_training_loop)
    assert "epochs_trained, steps_trained_in_current_epoch = self._init_training_state(" in training
    assert "for epoch in range(epochs_trained, num_train_epochs):" in training
    assert "= self.set_initial_training_values(args, train_dataloader)" in training


def test_the_generation_buffer_is_what_pods_checkpoints():
    """TRL trains `steps_per_generation * num_iterations` micro-batches from `_buffered_inputs`, counted by `_step`:
    the two things `PODSTrainer._save_generation_buffer` saves between two generations."""
    source = inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "generate_every = self.args.steps_per_generation * self.num_iterations" in source
    assert "if self._step % generate_every == 0 or self._buffered_inputs is None:" in source
    assert "inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]" in source
    assert "self._step += 1" in inspect.getsource(GRPOTrainer.training_step)


def test_the_async_worker_scores_one_group_where_pods_selects():
    """What `pods_rl.trainer.async_selection` relies on in TRL 1.16's asynchronous GRPO (experimental, private): the
    worker runs a loop class it holds as `_loop_cls` with `_loop_kwargs`; the loop's `_score_group(group)` returns
    one sample per training row, each with per-function rewards in `metrics` and a settable `advantage`."""
    import dataclasses

    from trl.experimental.async_grpo import async_rollout_worker as worker

    assert inspect.iscoroutinefunction(worker._AsyncRolloutLoop._score_group)
    assert list(inspect.signature(worker._AsyncRolloutLoop._score_group).parameters) == ["self", "group"]
    source = inspect.getsource(worker.AsyncRolloutWorker)
    assert "self._loop_cls" in source and "self._loop_kwargs" in source
    sample_fields = {f.name for f in dataclasses.fields(worker.RolloutSample)}
    assert {"advantage", "metrics", "group_id", "model_version"} <= sample_fields
    group_fields = {f.name for f in dataclasses.fields(worker.RolloutGroup)}
    assert {"completions_ids", "completions_sequences", "model_version", "group_id"} <= group_fields
    assert 'f"rewards/{name}"' in inspect.getsource(worker._AsyncRolloutLoop._score_group)


def test_the_async_trainer_names_pods_replaces_on_a_cpu():
    """PODSAsyncTrainer replaces two module-level names of TRL's async trainer on a CPU: the MFU query and the packed
    trie attention's registered name."""
    import trl.experimental.async_grpo.async_grpo_trainer as trainer_module
    from trl.experimental.async_grpo import packing

    assert "get_peak_flops_per_device(" in inspect.getsource(trainer_module.AsyncGRPOTrainer.__init__)
    assert hasattr(trainer_module, "get_peak_flops_per_device") and isinstance(packing.TREE_ATTENTION, str)
    assert "_loop_kwargs" not in inspect.signature(trainer_module.AsyncGRPOTrainer.__init__).parameters
