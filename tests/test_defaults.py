"""Default settings: the generic ones, and the presets that apply only to their model, task and machine."""

import pytest

import pods_rl.defaults
from pods_rl.defaults import (
    GENERIC,
    SMOLLM2_CPU_ARITHMETIC,
    default_run_settings,
    generation_backend,
    preset_for,
)
from pods_rl.run.settings import RunSettings, resolve

AVX512 = frozenset({"sse4_2", "avx", "avx2", "avx512f", "avx512bw"})
AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})


@pytest.fixture
def machine(monkeypatch):
    """Set whether this machine has an accelerator and vLLM, and its CPU's flags: `machine(gpu=True)`,
    `machine(gpu=False, vllm=True, flags={"avx2"})`."""

    def choose(*, gpu: bool, vllm: bool = False, flags: frozenset[str] = AVX512) -> None:
        monkeypatch.setattr(pods_rl.defaults, "accelerator_available", lambda: gpu)
        monkeypatch.setattr(pods_rl.defaults, "vllm_installed", lambda: vllm)
        monkeypatch.setattr(pods_rl.defaults, "cpu_flags", lambda: flags)

    return choose


def test_smollm2_on_a_cpu_gets_its_preset(machine):
    machine(gpu=False)
    settings = default_run_settings("smollm2-135m", "arithmetic")
    assert settings["task_options"] == {"operands": [2], "digits": 1, "operators": "+", "num_train": 50, "num_test": 50}
    trainer = settings["trainer"]
    assert (trainer["num_generations"], trainer["num_selected"], trainer["per_device_train_batch_size"]) == (8, 2, 4)
    assert (trainer["max_completion_length"], trainer["learning_rate"], trainer["max_steps"]) == (64, 2e-5, 50)
    assert trainer["beta"] == GENERIC["trainer"]["beta"]  # what the preset does not size stays generic
    assert settings["eval"] == {"every_steps": 25, "batch_size": 50}
    assert "use_vllm" not in trainer  # HF generate where vLLM is not installed
    RunSettings.from_dict(settings)  # a valid run


def test_smollm2_on_an_avx512_cpu_generates_with_vllm_where_installed(machine):
    machine(gpu=False, vllm=True, flags=AVX512)
    trainer = default_run_settings("smollm2-135m", "arithmetic")["trainer"]
    assert (trainer["use_vllm"], trainer["vllm_max_model_length"]) == (True, 512)
    assert trainer["num_generations"] == 8  # the rest of the preset stays
    machine(gpu=True, vllm=True)
    assert "use_vllm" not in default_run_settings("smollm2-135m", "arithmetic")["trainer"]  # a GPU: as the user says


def test_smollm2_on_an_avx2_cpu_generates_with_hf_even_where_vllm_is_installed(machine):
    machine(gpu=False, vllm=True, flags=AVX2)
    trainer = default_run_settings("smollm2-135m", "arithmetic")["trainer"]
    assert "use_vllm" not in trainer
    assert trainer["vllm_max_model_length"] == 512  # so that `--vllm` forcing it gets the preset's engine size
    assert trainer["num_generations"] == 8


@pytest.mark.parametrize(
    ("flags", "use_vllm", "reason"),
    [
        (AVX512, True, "AVX-512 CPU: vLLM's CPU build measured 1.3x faster per step there; --no-vllm turns it off"),
        (
            AVX2,
            False,
            "AVX2 CPU without AVX-512: vLLM's CPU build measured 2.2x slower per step there; --vllm forces it",
        ),
        (
            frozenset({"neon", "asimd"}),
            False,
            "CPU without AVX-512: vLLM's CPU build measured 2.2x slower per step there; --vllm forces it",
        ),
        (
            frozenset(),
            False,
            "CPU without AVX-512: vLLM's CPU build measured 2.2x slower per step there; --vllm forces it",
        ),
    ],
    ids=["avx512", "avx2", "arm", "unknown"],
)
def test_generation_backend_follows_the_instruction_set(flags, use_vllm, reason):
    assert generation_backend(flags) == (use_vllm, reason)


def test_smollm2_on_three_term_sums_gets_its_sizing_runs_setting_on_the_tasks_own_split(machine):
    machine(gpu=False)
    settings = default_run_settings("smollm2-135m", "arithmetic-3term")
    on_sums = default_run_settings("smollm2-135m", "arithmetic")
    assert settings["task_options"] == {} and preset_for("smollm2-135m", "arithmetic-3term") == "smollm2-135m"
    three_terms = {
        "num_generations": 16,
        "num_selected": 4,
        "per_device_train_batch_size": 16,
        "learning_rate": 1e-5,
        "temperature": 0.5,
        "max_steps": 30,
        "save_steps": 10,
    }
    assert settings == {
        **on_sums,
        "task": "arithmetic-3term",
        "task_options": {},
        "trainer": {**on_sums["trainer"], **three_terms},
        "eval": {"every_steps": 10, "batch_size": 50},
    }
    assert RunSettings.from_dict(settings).task_options == {}  # the task's own 800 / 200
    machine(gpu=True)
    assert default_run_settings("smollm2-135m", "arithmetic-3term") == {**GENERIC, "model": "smollm2-135m",
                                                                         "task": "arithmetic-3term"}  # fmt: skip
    assert preset_for("tiny", "arithmetic-3term") is None  # tiny's warm start has its own prompt and split


@pytest.mark.parametrize(
    ("model", "task", "gpu", "tokens"),
    [
        ("smollm2-135m", "arithmetic", True, None),  # a GPU keeps the paper's sizes
        ("Qwen/Qwen2.5-3B-Instruct", "gsm8k", True, None),
        ("smollm2-135m", "gsm8k", False, 256),  # the preset's task options and lengths are arithmetic's
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "arithmetic", False, 64),  # only the built-in name
        ("smollm2-135m", "reasoning-gym:chain_sum", False, 128),
        ("tiny", "arithmetic-3term", False, 64),
    ],
)
def test_the_smollm2_preset_applies_nowhere_else_and_a_cpu_gets_cpu_sized_defaults(machine, model, task, gpu, tokens):
    """Off the presets: the generic defaults on a GPU; on a CPU the sizes that cost time are CPU-sized (the task's
    completion length, 2 prompts x n = 8, 50 steps, a 50-example evaluation), and what a step learns stays generic."""
    machine(gpu=gpu)
    settings = default_run_settings(model, task)
    generic = {**GENERIC, "model": model, "task": task}
    if gpu:
        assert settings == generic and preset_for(model, task) is None
        return
    assert preset_for(model, task) == "cpu"
    sized = {"num_generations": 8, "num_selected": 2, "per_device_train_batch_size": 4, "max_completion_length": tokens,
             "max_steps": 50, "save_steps": 25}  # fmt: skip
    assert settings == {
        **generic,
        "trainer": {**GENERIC["trainer"], **sized},
        "eval": {"every_steps": 25, "num_examples": 50, "batch_size": 50},
    }
    assert settings["trainer"]["learning_rate"] == GENERIC["trainer"]["learning_rate"]
    RunSettings.from_dict(settings)  # a valid run


def test_the_tiny_preset_does_not_depend_on_the_machine(machine):
    machine(gpu=False)
    on_cpu = default_run_settings("tiny", "arithmetic")
    machine(gpu=True)
    assert default_run_settings("tiny", "arithmetic") == on_cpu
    assert on_cpu["trainer"]["max_completion_length"] == 32 and on_cpu["task_options"]["operands"] == [3]


def test_user_settings_override_the_preset_key_by_key(machine, tmp_path):
    machine(gpu=False)
    config = tmp_path / "run.yaml"
    config.write_text("trainer:\n  learning_rate: 1.0e-4\ntask_options:\n  num_test: 20\n")
    overrides = [{"model": "smollm2-135m"}, {"trainer": {"num_generations": 4}}, {"eval": {"every_steps": 3}}]
    settings = resolve(default_run_settings, config, overrides)
    assert settings.trainer["learning_rate"] == 1e-4 and settings.trainer["num_generations"] == 4
    assert settings.task_options["num_test"] == 20 and settings.eval.every_steps == 3
    # the rest of the preset stays
    assert settings.trainer["max_completion_length"] == SMOLLM2_CPU_ARITHMETIC["trainer"]["max_completion_length"]
    assert settings.task_options["operands"] == [2] and settings.trainer["num_selected"] == 2
