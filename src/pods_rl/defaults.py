"""Default settings: generic ones for any model, the presets of the two built-in models on their tasks, and
CPU-sized ones for everything else on a machine without an accelerator.

A preset applies only to its model and task (and, for SmolLM2, only on a machine without an accelerator), under the
user's own settings. On a GPU, `pods train --model Qwen/... --task gsm8k` gets the generic defaults (the paper's
sizes), and so does SmolLM2. On a CPU, any model and task without a preset gets `CPU_SIZED` over the generic ones:
the sizes that cost time (rollouts, completion length, steps, evaluation), not those that set what a step learns. How
the presets were chosen, with the measurements, is in docs/benchmarks/presets.md.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pods_rl.machine import cpu_flags
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
        # 512 tokens hold the prompt and the completion; vLLM's default, the model's 8192, would reserve a KV cache
        # 16x larger (and start minutes slower on a CPU). Here, not only in SMOLLM2_CPU_VLLM, so that `--vllm` on a
        # CPU the preset keeps on HF `generate` still gets it; HF `generate` ignores it.
        "vllm_max_model_length": 512,
        "temperature": 1.0,
        "max_steps": 50,
        "save_steps": 25,
        "save_total_limit": 1,
    },
    "eval": {"every_steps": 25, "batch_size": 50},  # by steps, so that `--eval-every` alone replaces it
}

# SmolLM2 on `arithmetic-3term` (a+b+c over one digit, 18.5% right at the start, so room to grow), on the task's own
# split (800 to train, 200 held out): the sizing run that lifted it steadily on two seeds (17.5% -> 27.5% and 29.0% in
# 27 steps, about 22 s each on an AVX-512 Xeon with vLLM; docs/benchmarks/presets.md). a+b's 2 prompts per step at
# 2e-5 swung and collapsed here: about half the groups have no right rollout, so 4 prompts, n/m = 16/4, a lower rate
# and temperature.
SMOLLM2_CPU_THREE_TERMS: dict[str, Any] = merge(
    {k: v for k, v in SMOLLM2_CPU_ARITHMETIC.items() if k != "task_options"},
    {
        "trainer": {
            "num_generations": 16,
            "num_selected": 4,
            "per_device_train_batch_size": 16,  # 16 / m = 4 prompts per step, 64 rollouts generated
            "learning_rate": 1e-5,
            "temperature": 0.5,
            "max_steps": 30,
            "save_steps": 10,
        },
        "eval": {"every_steps": 10},
    },
)

SMOLLM2_CPU_PRESETS = {"arithmetic": SMOLLM2_CPU_ARITHMETIC, "arithmetic-3term": SMOLLM2_CPU_THREE_TERMS}

# Where vLLM is installed (`make vllm`) and the CPU has AVX-512 (`generation_backend`), the preset generates with it.
SMOLLM2_CPU_VLLM: dict[str, Any] = {"trainer": {"use_vllm": True}}


SMOLLM2_CPU_NOTE = "the CPU preset of smollm2-135m on {task} (no accelerator found); your settings override it"

# Any other model and task on a CPU: the SmolLM2 preset's step (2 prompts x n = 8, m = 2, about 20 s for a 135M model
# on 2 cores at 64 tokens), 50 steps and a 50-example evaluation, so that a run ends in minutes to an hour rather than
# days. The learning rate and the other settings of what a step learns stay generic: they do not depend on the
# machine. `pods train` states the expected time of a step and of the run once it has measured the model.
CPU_SIZED: dict[str, Any] = {
    "trainer": {
        "num_generations": 8,
        "num_selected": 2,
        "per_device_train_batch_size": 4,  # 4 / m = 2 prompts per step, 16 rollouts generated
        "max_steps": 50,
        "save_steps": 25,
    },
    "eval": {"every_steps": 25, "num_examples": 50, "batch_size": 50},
}
# Completion tokens on a CPU, by task: what its answers need (a sum takes a few dozen tokens with its reasoning, a
# GSM8K or MATH solution a few hundred); any other task, reasoning-gym's included, gets CPU_COMPLETION_TOKENS.
CPU_COMPLETION_TOKENS_BY_TASK = {"arithmetic": 64, "arithmetic-3term": 64, "gsm8k": 256, "math": 256}
CPU_COMPLETION_TOKENS = 128
CPU_SIZED_NOTE = (
    "CPU-sized defaults (rollouts, completion length, steps, evaluation) for {model} on {task} (no accelerator "
    "found); your settings override them"
)


def cpu_sized(task: str) -> dict[str, Any]:
    """`CPU_SIZED` with the completion length of `task`."""
    tokens = CPU_COMPLETION_TOKENS_BY_TASK.get(task, CPU_COMPLETION_TOKENS)
    return merge(CPU_SIZED, {"trainer": {"max_completion_length": tokens}})


def generation_backend(cpu_flags: Collection[str]) -> tuple[bool, str]:
    """Whether the SmolLM2 CPU preset generates with vLLM on a CPU with these instruction-set flags, and why.

    The rule follows the measurements of `benchmarks/vllm_cost.py` (docs/benchmarks/micro.md, "Generation with vLLM
    (CPU)"), one per instruction set: on an Intel Xeon with AVX-512 a SmolLM2 step took 11.7 s with vLLM's CPU build
    against 14.9 s with HF `generate`; on an AMD EPYC with AVX2 only, 37.5 s against 16.9 s (vLLM generated 2.5x
    slower there, its CPU kernels being built for AVX-512). So vLLM where the CPU has AVX-512, HF `generate`
    elsewhere; `--vllm` / `--no-vllm` override either.
    """
    if "avx512f" in cpu_flags:
        return True, "AVX-512 CPU: vLLM's CPU build measured 1.3x faster per step there; --no-vllm turns it off"
    kind = "AVX2 CPU" if "avx2" in cpu_flags else "CPU"
    return False, f"{kind} without AVX-512: vLLM's CPU build measured 2.2x slower per step there; --vllm forces it"


def preset_for(model: str, task: str) -> str | None:
    """The preset a run of `model` on `task` starts from on this machine: "tiny", "smollm2-135m", "cpu" (the
    CPU-sized defaults of any other model and task on a machine without an accelerator) or None (the generic ones)."""
    if model == "tiny" and task == "arithmetic":
        return "tiny"
    if accelerator_available():
        return None
    return "smollm2-135m" if model == "smollm2-135m" and task in SMOLLM2_CPU_PRESETS else "cpu"


def preset_generation(model: str, task: str) -> tuple[bool, str] | None:
    """The preset's choice of generation backend for `model` on `task` and its reason; None where no preset
    chooses (any model but the CPU preset's, or no vLLM installed: HF `generate` then, as always)."""
    if preset_for(model, task) != "smollm2-135m" or not vllm_installed():
        return None
    return generation_backend(cpu_flags())


def default_run_settings(model: str = "tiny", task: str = "arithmetic") -> dict[str, Any]:
    """The defaults a run of `model` on `task` starts from, as the mapping a YAML config file would hold."""
    from pods_rl.models.tiny import TINY_TASK_OPTIONS

    settings = merge(GENERIC, {"model": model, "task": task})
    preset = preset_for(model, task)
    if preset == "tiny":
        settings = merge(settings, {**TINY_ARITHMETIC, "task_options": dict(TINY_TASK_OPTIONS)})
    elif preset == "smollm2-135m":
        settings = merge(settings, SMOLLM2_CPU_PRESETS[task])
        generation = preset_generation(model, task)
        if generation is not None and generation[0]:
            settings = merge(settings, SMOLLM2_CPU_VLLM)
    elif preset == "cpu":
        settings = merge(settings, cpu_sized(task))
    return settings
