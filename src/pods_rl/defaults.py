"""The built-in default run: `pods train` with no arguments (tiny model, arithmetic, PODS on CPU)."""

from __future__ import annotations

from typing import Any


def default_run_settings() -> dict[str, Any]:
    """Settings of the default run, as the nested mapping a YAML config file would hold."""
    return {
        "model": "tiny",
        "task": "arithmetic",
        "task_options": {},
        "trainer": {
            "num_generations": 16,
            "num_selected": 4,
            "per_device_train_batch_size": 64,
            "learning_rate": 1e-4,
            "max_completion_length": 48,
            "temperature": 1.0,
            "max_steps": 200,
            "beta": 0.0,
            "bf16": False,
            "activation_checkpointing": False,
            "use_cpu": True,
            "save_strategy": "steps",
            "save_steps": 50,
            "dataloader_num_workers": 0,
        },
        "eval": {"every_steps": 20},
        "time_budget": None,
    }
