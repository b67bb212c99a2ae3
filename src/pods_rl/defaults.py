"""Default settings: generic ones for any model, and the tuned preset of the built-in run (`pods train`).

The preset applies only when the run's model is `tiny` and its task `arithmetic` (the no-argument default), under
the user's own settings: `pods train --model Qwen/... --task gsm8k` gets the generic defaults, not the tiny model's
learning rate or task options. How the preset was chosen, with the measurements, is in the README.
"""

from __future__ import annotations

from typing import Any

from pods_rl.run.settings import merge
from pods_rl.versions import CHECKPOINTING_FIELD

GENERIC: dict[str, Any] = {
    "model": "tiny",
    "task": "arithmetic",
    "task_options": {},
    "trainer": {
        # PODS with the paper's recommended ratio n/m = 4.
        "num_generations": 16,
        "num_selected": 4,
        "per_device_train_batch_size": 16,  # trained rows: 16 / m = 4 prompts per step on one device
        "learning_rate": 5e-6,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        "max_completion_length": 512,
        "temperature": 0.9,
        "beta": 0.0,
        "max_steps": 1000,
        "save_strategy": "steps",
        "save_steps": 50,
        CHECKPOINTING_FIELD: False,
    },
    "eval": {"every_steps": 50},
}

# The built-in run on a 2-core CPU: the tiny model's warm start, then 250 PODS steps (about 2.5 minutes in all).
TINY_ARITHMETIC: dict[str, Any] = {
    "trainer": {
        "per_device_train_batch_size": 64,  # 64 / m = 16 prompts per step
        "learning_rate": 1e-4,
        "max_completion_length": 32,
        "temperature": 1.0,
        "max_steps": 250,
        "save_steps": 50,
        "dataloader_num_workers": 0,
    },
    "eval": {"every_steps": 50, "batch_size": 200},
}


def default_run_settings(model: str = "tiny", task: str = "arithmetic") -> dict[str, Any]:
    """The defaults a run of `model` on `task` starts from, as the mapping a YAML config file would hold."""
    from pods_rl.models.tiny import TINY_TASK_OPTIONS

    settings = merge(GENERIC, {"model": model, "task": task})
    if model == "tiny" and task == "arithmetic":
        settings = merge(settings, {**TINY_ARITHMETIC, "task_options": dict(TINY_TASK_OPTIONS)})
    return settings
