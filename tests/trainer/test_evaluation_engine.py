"""`evaluation_engine` (pods_rl.trainer.vllm) on a stand-in trainer: which runs evaluate on their vLLM engine, and
that the engine gets the weights of the step being evaluated exactly once. No vLLM needed."""

from types import SimpleNamespace

import pytest

from pods_rl.trainer.vllm import evaluation_engine


class FakeGeneration:
    def __init__(self) -> None:
        self.llm = object()
        self.synced = 0

    def sync_weights(self) -> None:
        self.synced += 1


def _trainer(**args) -> SimpleNamespace:
    settings = {
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_tensor_parallel_size": 1,
        "vllm_enable_sleep_mode": False,
        **args,
    }
    return SimpleNamespace(
        args=SimpleNamespace(**settings),
        state=SimpleNamespace(global_step=0),
        vllm_generation=FakeGeneration(),
        _last_loaded_step=-1,  # as GRPOTrainer.__init__ sets it
    )


def test_the_engine_gets_the_updated_weights_once_per_step() -> None:
    trainer = _trainer()
    assert evaluation_engine(trainer) is trainer.vllm_generation.llm  # the start: synced (a resume loads weights)
    assert trainer.vllm_generation.synced == 1 and trainer._last_loaded_step == 0
    trainer.state.global_step = 5  # TRL synced before step 5's generation (at step 4); then the update ran
    trainer._last_loaded_step = 4
    evaluation_engine(trainer)
    assert trainer.vllm_generation.synced == 2 and trainer._last_loaded_step == 5  # so step 6 does not sync again
    evaluation_engine(trainer)
    assert trainer.vllm_generation.synced == 2


@pytest.mark.parametrize(
    "args",
    [
        {"use_vllm": False},
        {"vllm_mode": "server"},  # the server's engine is not this process's to lend
        {"vllm_tensor_parallel_size": 2},  # one engine over several processes
        {"vllm_enable_sleep_mode": True},  # asleep between generations
    ],
)
def test_other_runs_evaluate_with_hf_generate(args) -> None:
    trainer = _trainer(**args)
    assert evaluation_engine(trainer) is None and trainer.vllm_generation.synced == 0
