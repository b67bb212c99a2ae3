"""Default settings: generic ones for any model, and the presets of the two built-in models on their tasks.

A preset applies only to its model and task (and, for SmolLM2, only on a machine without an accelerator), under the
user's own settings: `pods train --model Qwen/... --task gsm8k` gets the generic defaults, and on a GPU SmolLM2 gets
them too (the paper's sizes). How the presets were chosen, with the measurements, is in the README.
"""

from __future__ import annotations

from typing import Any

from pods_rl.run.settings import accelerator_available, merge
from pods_rl.versions import CHECKPOINTING_FIELD, vllm_installed

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


# SmolLM2-135M-Instruct on a CPU (2 cores measured): a step of 2 prompts x 8 rollouts of at most 64 tokens, 4 rows
# trained, takes about 20 s on an idle machine; sums of two one-digit numbers, which the model gets right about half
# the time, so that groups have reward variance and a 10-minute run can move the accuracy.
SMOLLM2_CPU_ARITHMETIC: dict[str, Any] = {
    "task_options": {"operands": [2], "digits": 1, "operators": "+", "num_train": 50, "num_test": 50},
    "trainer": {
        "num_generations": 8,
        "num_selected": 2,
        "per_device_train_batch_size": 4,  # 4 / m = 2 prompts per step, 16 rollouts generated
        "learning_rate": 2e-5,
        "max_completion_length": 64,
        "temperature": 1.0,
        "max_steps": 50,
        "save_steps": 25,
        "save_total_limit": 1,
    },
    "eval": {"every_steps": 25, "batch_size": 50},  # by steps, so that `--eval-every` alone replaces it
}

# Where vLLM is installed (`make vllm`), the preset generates with it: a step took 11.7 s against 14.9 s with HF
# `generate` on the 2-core CPU (docs/benchmarks.md, "Generation with vLLM"). 512 tokens hold the prompt and the
# completion; vLLM's default, the model's 8192, would reserve a KV cache 16x larger.
# SmolLM2 on `arithmetic-3term` (a+b+c over one digit, 18.5% right at the start, so room to grow): the run
# sizes of a+b, on the task's own split, 800 to train and 200 held out (one question is half a point).
SMOLLM2_CPU_THREE_TERMS: dict[str, Any] = {k: v for k, v in SMOLLM2_CPU_ARITHMETIC.items() if k != "task_options"}

SMOLLM2_CPU_PRESETS = {"arithmetic": SMOLLM2_CPU_ARITHMETIC, "arithmetic-3term": SMOLLM2_CPU_THREE_TERMS}

SMOLLM2_CPU_VLLM: dict[str, Any] = {"trainer": {"use_vllm": True, "vllm_max_model_length": 512}}

SMOLLM2_CPU_NOTE = "the CPU preset of smollm2-135m on {task} (no accelerator found); your settings override it"


def preset_for(model: str, task: str) -> str | None:
    """The preset a run of `model` on `task` starts from on this machine: "tiny", "smollm2-135m" or None."""
    if model == "tiny" and task == "arithmetic":
        return "tiny"
    if model == "smollm2-135m" and task in SMOLLM2_CPU_PRESETS and not accelerator_available():
        return "smollm2-135m"
    return None


def default_run_settings(model: str = "tiny", task: str = "arithmetic") -> dict[str, Any]:
    """The defaults a run of `model` on `task` starts from, as the mapping a YAML config file would hold."""
    from pods_rl.models.tiny import TINY_TASK_OPTIONS

    settings = merge(GENERIC, {"model": model, "task": task})
    preset = preset_for(model, task)
    if preset == "tiny":
        settings = merge(settings, {**TINY_ARITHMETIC, "task_options": dict(TINY_TASK_OPTIONS)})
    elif preset == "smollm2-135m":
        settings = merge(settings, SMOLLM2_CPU_PRESETS[task])
        if vllm_installed():
            settings = merge(settings, SMOLLM2_CPU_VLLM)
    return settings
