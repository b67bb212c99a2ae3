"""PODSAsyncTrainer's trainer side, without a vLLM server: its settings refuse what cannot apply in one line, it
installs PODS's loop on TRL's rollout worker with the selection settings and the in-flight count a PODS step needs,
and it trains on a CPU from a queue (TRL's injectable worker interface, filled by hand)."""

import queue
import time

import numpy as np
import pytest
from support import char_tokenizer, prompt_dataset, tiny_llama

from pods_rl.trainer.async_trainer import PODSAsyncConfig, PODSAsyncTrainer
from pods_rl.trainer.async_worker import PODSRolloutLoop


def config(tmp_path, **changes) -> PODSAsyncConfig:
    values = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, max_steps=3, per_device_train_batch_size=8,
        num_generations=8, num_selected=2, token_budget=0, report_to="none", gradient_checkpointing=False,
        logging_steps=1, learning_rate=1e-3, save_strategy="no", max_staleness=2,
    )  # fmt: skip
    return PODSAsyncConfig(**{**values, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"selection_budget": "batch"}, "selection_budget='batch' cannot apply to asynchronous training"),
        ({"rollout_allocation": "screen"}, "rollout_allocation='screen' cannot apply"),
        ({"scale_rewards": "batch"}, "scale_rewards='batch' cannot apply"),
        ({"num_selected": 9}, r"num_selected \(m\) must satisfy 2 <= m <= num_generations \(n=8\), got 9"),
        ({"selection_rule": "min_variance"}, "selection_rule must be one of"),
    ],
)
def test_settings_that_cannot_apply_are_refused_in_one_line(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path, **changes)


def reward(completions, **kwargs):
    return [0.0] * len(completions)


class QueueWorker:
    """TRL's `RolloutWorkerProtocol` over a queue filled by hand (8 groups of 8 rows a step's worth), with the
    `_loop_kwargs` TRL's own worker holds, so the trainer installs PODS's loop on it as on TRL's."""

    _loop_cls = None

    def __init__(self):
        self.rollout_buffer, self.metrics_queue, self.version = queue.Queue(), queue.Queue(), 0
        self._loop_kwargs = {"reward_funcs": [reward, reward], "max_inflight_tasks": 48}

    def start(self):
        from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

        rng = np.random.default_rng(0)
        for group in range(16):
            for i in range(2):
                prompt, completion = rng.integers(3, 40, 4), rng.integers(3, 40, 6)
                self.rollout_buffer.put(
                    RolloutSample(
                        prompt=[], completion=[], input_ids=np.concatenate([prompt, completion]).astype(np.int64),
                        completion_mask=np.array([0] * 4 + [1] * 6), old_log_probs=np.full(10, -3.7, np.float32),
                        advantage=1.0 - 2 * i, model_version=self.version, group_id=group, metrics={"reward": i},
                        enqueued_at=time.time(),
                    )
                )  # fmt: skip
        self.metrics_queue.put({"pods/groups_dropped_total": 3.0, "pods/rollouts_generated_total": 64.0})

    def stop(self):
        pass

    def update_model_version(self, version):
        self.version = version

    def check_health(self, stale_after_s):
        pass


class Transfer:
    """TRL's `WeightTransferProtocol`, counting the parameters each sync streams."""

    def __init__(self):
        self.sent = []

    def init_weight_transfer(self):
        pass

    def pause(self):
        pass

    def resume(self):
        pass

    def destroy(self):
        pass

    def send_weights(self, iterator):
        self.sent.append(sum(tensor.numel() for _, tensor in iterator))


def test_the_trainer_installs_pods_loop_and_trains_on_a_cpu(tmp_path):
    tokenizer = char_tokenizer()
    model = tmp_path / "model"
    tiny_llama(tokenizer).save_pretrained(model)
    tokenizer.save_pretrained(model)
    worker, transfer = QueueWorker(), Transfer()
    args = config(tmp_path, dynamic_sampling=True, reward_weights=[1.0, 0.5], selection_rule="random", seed=5)
    trainer = PODSAsyncTrainer(
        str(model), [reward, reward], args, train_dataset=prompt_dataset(), processing_class=tokenizer,
        rollout_worker=worker, weight_transfer=transfer,
    )  # fmt: skip
    assert worker._loop_cls is PODSRolloutLoop
    # TRL's automatic in-flight count is max_staleness x rows a step (2 x 8); a PODS step generates n/m = 4 per row.
    assert trainer.args.max_inflight_tasks == worker._loop_kwargs["max_inflight_tasks"] == 2 * 8 * 4
    selection = worker._loop_kwargs["pods_selection"]
    assert selection["settings"]["num_selected"] == 2 and selection["settings"]["rule"] == "random"
    assert selection["weights"] == [1.0, 0.5] and selection["seed"] == 5
    assert selection["dynamic_sampling"] and selection["drop_limit"] == (3 - 1) * (8 // 2)
    trainer.train()
    assert trainer.state.global_step == 3 and len(transfer.sent) >= 3  # the first sync, then one per step
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert len(logged) == 3 and all(np.isfinite(entry["loss"]) for entry in logged)
    assert sum(entry.get("pods/groups_dropped_total", 0.0) for entry in trainer.state.log_history) == 3.0


def test_reward_weights_must_match_the_reward_functions(tmp_path):
    tokenizer = char_tokenizer()
    model = tmp_path / "model"
    tiny_llama(tokenizer).save_pretrained(model)
    tokenizer.save_pretrained(model)
    with pytest.raises(ValueError, match="reward_weights has 3 entries for 2 reward functions"):
        PODSAsyncTrainer(
            str(model), [reward, reward], config(tmp_path, reward_weights=[1.0, 1.0, 1.0]),
            train_dataset=prompt_dataset(), processing_class=tokenizer, rollout_worker=QueueWorker(),
            weight_transfer=Transfer(),
        )  # fmt: skip


def test_an_asynchronous_step_is_logged_in_the_synchronous_trainers_terms():
    """What `pods compare`'s cost model reads, per step: the trainer's wait as generation time, the update with a
    step's share of the weight sync, rollouts and tokens generated over the window's steps (not per group)."""
    from types import SimpleNamespace

    from pods_rl.trainer.async_trainer import AsyncStepCosts

    costs = AsyncStepCosts(weight_sync_steps=2)
    logs = {
        "perf/rollout_wait_s": 1.5, "perf/fwd_bwd_s": 2.0, "perf/optimizer_s": 0.25, "perf/weight_sync_s": 1.0,
        "pods/groups_scored_total": 30.0, "pods/rollouts_generated_total": 480.0, "pods/rollouts_generated": 16.0,
        "pods/tokens_generated": 200.0, "batch/samples_per_step": 64.0, "batch/trained_tokens_per_step": 900.0,
    }  # fmt: skip
    costs.on_log(None, SimpleNamespace(global_step=3), None, logs=logs)  # a window of 3 steps
    assert {key: value for key, value in logs.items() if key.startswith("pods/time") or "rollouts" in key} == {
        "pods/time_generate": 1.5, "pods/time_score": 0.0, "pods/time_select": 0.0, "pods/time_update": 2.75,
        "pods/rollouts_generated_total": 480.0, "pods/rollouts_generated": 160.0, "pods/rollouts_trained": 64.0,
    }  # fmt: skip
    assert (logs["pods/tokens_generated"], logs["pods/tokens_trained"]) == (2000.0, 900.0)
    quiet = {"loss": 0.1}
    costs.on_log(None, SimpleNamespace(global_step=4), None, logs=quiet)  # an evaluation's or TRL's other logs
    assert quiet == {"loss": 0.1}
