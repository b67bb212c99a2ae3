"""The built-in default run: `pods train` with no arguments (tiny model, arithmetic, PODS on CPU).

The `tiny` warm start (see `pods_rl.models.tiny`) works every step of a 3-operand sum but answers the first
step's value about 60% of the time, so greedy decoding starts mostly wrong while sampling finds the right
answer often enough for max-variance groups to teach it. Temperature 0.7 keeps the arithmetic tokens
near-greedy while leaving that one decision random. Provisional: this exact recipe is not yet measured
end to end (20-point gain, under 5 minutes) across seeds.
"""

from __future__ import annotations

from typing import Any

from pods_rl.models.tiny import TINY_TASK_OPTIONS


def default_run_settings() -> dict[str, Any]:
    """Settings of the default run, as the nested mapping a YAML config file would hold.

    The task options are those the warm start was fitted on (same seed, so the test split is held out
    from it too); the run's own seed varies the RL only.
    """
    return {
        "model": "tiny",
        "task": "arithmetic",
        "task_options": dict(TINY_TASK_OPTIONS),
        "trainer": {
            "num_generations": 16,
            "num_selected": 4,
            "per_device_train_batch_size": 64,  # trained rows: 64 / m = 16 prompts per step
            "learning_rate": 5e-4,
            "lr_scheduler_type": "constant",
            "warmup_steps": 0,
            "max_completion_length": 32,
            "temperature": 0.7,
            "max_steps": 150,
            "beta": 0.0,
            "bf16": False,
            "activation_checkpointing": False,
            "use_cpu": True,
            "save_strategy": "steps",
            "save_steps": 50,
            "dataloader_num_workers": 0,
        },
        "eval": {"every_steps": 50, "batch_size": 200},
        "time_budget": None,
    }
