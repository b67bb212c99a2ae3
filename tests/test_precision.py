"""The precision rule, the start-up measurement's arithmetic and cache, and fp32 evaluation of a bf16 model."""

import json
import math
import os

import pytest
import torch
from support import char_tokenizer, tiny_llama

import pods_rl.run.step_costs as step_costs
from pods_rl.precision import MARGIN, Precision, bf16_instructions, choose_precision, full_precision
from pods_rl.run.step_costs import (
    StepShape,
    cached_costs,
    cost_key,
    expected_lines,
    measure_step,
    save_costs,
    step_shape,
)

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw"}
ZEN4 = AVX512 | {"avx512_bf16"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_bf16", "amx_tile"}
NO_BF16 = "CPU without bf16 instructions (AMX-BF16, AVX512-BF16); --set trainer.bf16=true forces bf16"
SINGLE = "measured only in a single-process run; --set trainer.bf16=true forces bf16"


def test_bf16_instructions_name_the_best_a_cpu_has():
    assert [bf16_instructions(flags) for flags in (AVX2, AVX512, ZEN4, SAPPHIRE_RAPIDS)] == [
        None,
        None,
        "AVX512-BF16",
        "AMX-BF16",
    ]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # Forced either way, on any machine, measured or not.
        (dict(forced=True, flags=AVX2), Precision(True, "trainer.bf16=true")),
        (dict(forced=False, flags=SAPPHIRE_RAPIDS), Precision(False, "trainer.bf16=false")),
        # A GPU: its default, as TRL's.
        (dict(accelerator_bf16=True, flags=AVX2), Precision(True, "the accelerator's default", on_cpu=False)),
        (dict(accelerator_bf16=False, flags=AVX2), Precision(False, "the accelerator has no bf16", on_cpu=False)),
        # A CPU without bf16 instructions: fp32 without measuring.
        (dict(flags=AVX512), Precision(False, f"AVX-512 {NO_BF16}")),
        (dict(flags=AVX2), Precision(False, f"AVX2 {NO_BF16}")),
        # With them: a measurement decides (None until it has); several processes do not measure.
        (dict(flags=ZEN4), None),
        (dict(flags=ZEN4, step_seconds={"fp32": 2.0}), None),
        (dict(flags=ZEN4, processes=2), Precision(False, f"AVX512-BF16 CPU, 2 processes: {SINGLE}")),
    ],
)
def test_choose_precision(kwargs, expected):
    arguments = dict(forced=None, accelerator_bf16=None, step_seconds=None, processes=1) | kwargs
    assert choose_precision(**arguments) == expected


def test_a_measurement_takes_bf16_only_from_the_margin_on():
    def choose(fp32: float, bf16: float) -> Precision:
        return choose_precision(
            forced=None, accelerator_bf16=None, flags=SAPPHIRE_RAPIDS, step_seconds={"fp32": fp32, "bf16": bf16}
        )

    faster = choose(2.3, 1.0)
    assert faster == Precision(
        True,
        "AMX-BF16 CPU: a step measured 2.30 s in fp32, 1.00 s in bf16 for this model and shape, 2.30x; "
        "--set trainer.bf16=false forces fp32",
        {"fp32": 2.3, "bf16": 1.0},
    )
    assert faster.describe().startswith("bf16 autocast over fp32 weights (AMX-BF16 CPU: ")
    assert choose(MARGIN, 1.0).bf16 and not choose(MARGIN - 0.01, 1.0).bf16
    slower = choose(1.0, 1.6)
    assert slower.reason == (
        "AMX-BF16 CPU, but a step measured 1.00 s in fp32, 1.60 s in bf16 for this model and shape, 0.62x "
        "(< 1.10x); --set trainer.bf16=true forces bf16"
    )
    assert slower.describe() == f"fp32 ({slower.reason})"


class FakeModel:
    """A model whose calls advance a fake clock: generating `k` tokens costs 0.5 + 0.1 k s in fp32 and half that under
    bf16 autocast, a forward and backward 2 s in fp32 and 1 s in bf16; the first call of each kind in each precision
    (the warm-up) costs 5 s more."""

    def __init__(self, clock):
        self.clock, self.training, self.calls = clock, True, []
        self.warm: set[tuple[str, str]] = set()

    def _spend(self, kind: str, seconds: float) -> None:
        bf16 = torch.is_autocast_enabled("cpu")
        key = (kind, "bf16" if bf16 else "fp32")
        self.clock[0] += (seconds / 2 if bf16 else seconds) + (0 if key in self.warm else 5.0)
        self.warm.add(key)
        self.calls.append(key)

    def get_input_embeddings(self):
        return torch.nn.Embedding(50, 4)

    def generate(self, *, input_ids, max_new_tokens, min_new_tokens, **kwargs):
        assert max_new_tokens == min_new_tokens and input_ids.shape == (4, 10)
        self._spend("generate", 0.5 + 0.1 * max_new_tokens)

    def __call__(self, *, input_ids, labels):
        assert input_ids.shape == (3, 10 + 30)  # 512 tokens need 13 rows of 40; the micro-batch has 3
        self._spend("update", 2.0)
        return type("Output", (), {"loss": torch.zeros((), requires_grad=True)})()

    def train(self, mode: bool = True):
        self.training = mode

    def eval(self):
        self.training = False

    def zero_grad(self, set_to_none: bool = True):
        pass


def test_measure_step_scales_to_the_step_and_keeps_the_fastest_after_the_warm_up(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(step_costs.time, "perf_counter", lambda: clock[0])
    model = FakeModel(clock)
    # 4 rollouts (one batch) of up to 30 tokens, twice per step; 3 rows a pass, 2 passes.
    shape = StepShape(rollouts=4, completion_tokens=30, rows=3, passes=2)
    state = torch.get_rng_state()
    costs = measure_step(model, list(range(10)), shape, ("fp32", "bf16"))
    # generate: the first token (prefill) 0.6 s, each further one 0.1 s: 0.6 + 29 x 0.1 = 3.5 s in fp32.
    # update: 2 s a pass of 3 rows, 2 passes: 4 s in fp32. bf16: half of each.
    assert costs == {
        "fp32": {"generate": pytest.approx(3.5), "update": pytest.approx(4.0)},
        "bf16": {"generate": pytest.approx(1.75), "update": pytest.approx(2.0)},
    }
    assert [precision for kind, precision in model.calls if kind == "update"] == [
        "fp32", "bf16", "bf16", "fp32", "fp32", "bf16",
    ]  # fmt: skip  # alternating, each round in the other order
    assert model.training and torch.equal(torch.get_rng_state(), state)


def test_measure_step_of_a_real_model_changes_nothing_in_it():
    tokenizer = char_tokenizer()
    model = tiny_llama(tokenizer)
    before = {name: value.detach().clone() for name, value in model.named_parameters()}
    model.eval()
    state = torch.get_rng_state()
    shape = StepShape(rollouts=6, completion_tokens=4, rows=2, passes=1)
    costs = measure_step(model, [5, 6, 7], shape, ("fp32", "bf16"), pad_token_id=tokenizer.pad_token_id)
    assert set(costs) == {"fp32", "bf16"} and all(
        set(phases) == {"generate", "update"} and all(math.isfinite(s) and s >= 0 for s in phases.values())
        for phases in costs.values()
    )
    assert all(torch.equal(value, before[name]) for name, value in model.named_parameters())
    assert all(value.grad is None for value in model.parameters())
    assert not model.training and torch.equal(torch.get_rng_state(), state)
    generated_nothing = measure_step(model, [5, 6], StepShape(0, 4, 2, 1), ("fp32",))  # vLLM generates
    assert generated_nothing["fp32"]["generate"] == 0.0


def test_step_shape_follows_the_batch_fields():
    from pods_rl import PODSConfig
    from pods_rl.versions import CHECKPOINTING_FIELD

    args = PODSConfig(output_dir="unused", use_cpu=True, bf16=False, num_generations=8, num_selected=2,
                      per_device_train_batch_size=4, gradient_accumulation_steps=2, max_completion_length=48,
                      **{CHECKPOINTING_FIELD: False})  # fmt: skip
    # 8 trained rows a generation = 4 prompts, 32 rollouts; one generation per step of 2 passes of 4 rows.
    assert step_shape(args) == StepShape(rollouts=32, completion_tokens=48, rows=4, passes=2)


SHAPE = StepShape(16, 64, 4, 1)


def key_of(**changes):
    """The cost key of SmolLM2 on one-digit sums without LoRA, with `changes`."""
    arguments = dict(model="smollm2-135m", task="arithmetic", task_options={"digits": 1}, lora=None, shape=SHAPE)
    return cost_key(**(arguments | changes))


def test_costs_are_cached_per_key(step_costs_file):
    key = key_of()
    assert cached_costs(key) is None
    costs = {"fp32": {"generate": 12.0, "update": 8.0}}
    save_costs(key, costs)
    assert cached_costs(key) == costs and cached_costs(key_of()) == costs and step_costs_file.is_file()
    assert cached_costs(key_of(task="arithmetic-3term")) is None
    assert cached_costs(key_of(shape=StepShape(16, 64, 4, 2))) is None
    step_costs_file.write_text("not json")
    assert cached_costs(key) is None  # an unreadable cache is no cache


@pytest.mark.parametrize(
    "change",
    [
        dict(model="tiny"),
        dict(task="arithmetic-3term"),
        dict(task_options={"digits": 3}),  # longer prompts
        dict(task_options={"digits": 1, "operands": [3]}),
        dict(lora={"r": 8, "lora_alpha": 16}),
        dict(shape=StepShape(16, 64, 4, 2)),
        dict(shape=StepShape(16, 128, 4, 1)),
        dict(shape=StepShape(32, 64, 4, 1)),
    ],
    ids=["model", "task", "task options", "more task options", "lora", "passes", "completion length", "rollouts"],
)
def test_the_cost_key_changes_with_what_the_measurement_depends_on(change):
    assert key_of(**change) != key_of()


def test_the_cost_key_tells_lora_ranks_and_targets_apart():
    adapters = [
        None,
        {"r": 8, "lora_alpha": 16},
        {"r": 16, "lora_alpha": 16},
        {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]},
        {"r": 8, "lora_alpha": 16, "target_modules": "all-linear"},
    ]
    keys = [json.dumps(key_of(lora=lora), sort_keys=True) for lora in adapters]
    assert len(set(keys)) == len(adapters)


def test_the_cost_key_holds_the_torch_version_and_the_built_in_models_recipe(monkeypatch):
    assert key_of(model="tiny", vllm=True) != key_of(model="tiny")  # vLLM runs build tiny with 2 heads of 32
    warm_starts = [key_of(model="tiny", model_options=options) for options in ({}, {"flawed_fraction": 0.9})]
    assert warm_starts[0] == key_of(model="tiny") and warm_starts[1] != warm_starts[0]
    before = key_of()
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert key_of() != before


def test_the_cost_key_of_a_local_folder_follows_its_files(tmp_path):
    """A local model folder is the same model while its files (config, weights, tokenizer) keep their names, sizes
    and modification times: the same path with new weights is measured again."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(b"0" * 100)
    first = key_of(model=str(folder))
    assert key_of(model=str(folder)) == first
    weights.write_bytes(b"0" * 200)
    resized = key_of(model=str(folder))
    os.utime(weights, ns=(10**18, 10**18))
    touched = key_of(model=str(folder))
    (folder / "tokenizer.json").write_text("{}")  # another tokenizer: other prompt lengths
    keys = [first, resized, touched, key_of(model=str(folder))]
    assert len({json.dumps(key, sort_keys=True) for key in keys}) == len(keys)


def test_the_start_up_measurement_runs_on_the_model_with_its_lora_adapter(monkeypatch, tmp_path):
    """With `lora` set, the step is measured as it trains: with the adapter (only its weights trainable); afterwards
    the model is as it was (no adapter, the same parameters, trainable, the random state untouched), for TRL to apply
    the adapter to."""
    from support import prompt_dataset

    from pods_rl.run.settings import RunSettings

    monkeypatch.setattr(step_costs, "cpu_flags", lambda: AVX2)
    trainer = {"num_generations": 4, "num_selected": 2, "per_device_train_batch_size": 2, "max_completion_length": 8}
    settings = RunSettings(lora={"r": 4, "lora_alpha": 8}, trainer=trainer)
    startup = step_costs.RunPrecision(settings, settings.trainer_config(tmp_path))
    tokenizer = char_tokenizer()
    model = tiny_llama(tokenizer)
    parameters = {name: id(value) for name, value in model.named_parameters()}
    trainable = []

    def spy(measured, prompt, shape, precisions, **kwargs):
        trainable.extend(name for name, value in measured.named_parameters() if value.requires_grad)
        return {precision: {"generate": 1.0, "update": 1.0} for precision in precisions}

    monkeypatch.setattr(step_costs, "measure_step", spy)
    state = torch.get_rng_state()
    startup.settle(model, tokenizer, prompt_dataset(), lambda line: None)
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    assert {name: id(value) for name, value in model.named_parameters()} == parameters
    assert all(value.requires_grad for value in model.parameters())
    assert not hasattr(model, "peft_config") and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize(
    ("steps", "budget", "line_end", "warning"),
    [
        (50, None, "about 17 min for 50 steps; evaluation not counted", None),
        (50, 600.0, "the 600-s time budget ends training after about 30 of 50 steps; evaluation not counted", None),
        (1000, None, "about 5.6 hours for 1000 steps; evaluation not counted",
         "at the measured pace this run trains for about 5.6 hours: fewer steps (--max-steps), a --time-budget or a "
         "shorter trainer.max_completion_length make it shorter"),
    ],
)  # fmt: skip
def test_expected_time_of_a_step_and_the_run(steps, budget, line_end, warning):
    shape = StepShape(rollouts=16, completion_tokens=64, rows=4, passes=1)
    line, warned = expected_lines({"generate": 12.0, "update": 8.0}, shape, "bf16", steps, budget)
    assert line == (
        "expected: about 20.0 s a step at most (generating 16 rollouts of up to 64 tokens 12.0 s, updating on 4 rows "
        f"8.0 s, in bf16; completions at full length), {line_end}"
    )
    assert warned == warning


def test_full_precision_runs_a_bf16_wrapped_forward_without_autocast():
    """accelerate's bf16 wrapper (`model.forward` under autocast, the original kept as `_original_forward`)."""
    tokenizer = char_tokenizer()
    model = tiny_llama(tokenizer)
    seen = []
    model.model.layers[0].mlp.register_forward_pre_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    model._original_forward = model.forward
    model.forward = torch.autocast("cpu", dtype=torch.bfloat16)(model._original_forward)
    ids = torch.tensor([[5, 6, 7]])
    model(input_ids=ids)
    with full_precision(model):
        model(input_ids=ids)
    model(input_ids=ids)
    assert seen == [True, False, True]
    plain = tiny_llama(tokenizer)  # no wrapper: nothing to undo
    with full_precision(plain):
        assert "forward" not in vars(plain)


def test_in_fp32_the_sampler_and_the_training_forward_agree_on_each_tokens_log_prob():
    """With HF `generate` TRL keeps no sampler log-probabilities, so nothing corrects a difference between how
    `generate` scored a sampled token and how the training forward scores it: in fp32 there is none to correct (to
    float rounding). bf16 has one (docs/performance.md), which this does not bound."""
    import importlib.util
    from pathlib import Path

    from transformers import GenerationConfig
    from trl.trainer.utils import add_fused_lm_head

    path = Path(__file__).parents[1] / "benchmarks" / "sampler_gap.py"
    spec = importlib.util.spec_from_file_location("sampler_gap", path)
    sampler_gap = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sampler_gap)
    tokenizer = char_tokenizer()
    model = tiny_llama(tokenizer).eval()
    add_fused_lm_head(model, temperature=0.9)
    ends = [tokenizer.eos_token_id]
    generation = GenerationConfig(
        max_new_tokens=12,
        do_sample=True,
        temperature=0.9,
        top_k=0,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=ends,
    )
    torch.manual_seed(0)
    sampler, trainer, mask = sampler_gap.sampler_and_trainer_logps(
        model, tokenizer("12+3=")["input_ids"], 8, generation
    )
    assert mask.sum() > 40 and sampler.shape == trainer.shape == mask.shape == (8, 12)
    assert (sampler - trainer)[mask].abs().max() < 1e-4


def test_with_vllm_trls_importance_sampling_correction_stays_on():
    """vLLM samples in its own precision (bf16 on a CPU) and its own kernels; TRL corrects for that by weighing each
    trained row by exp(training forward - vLLM log-probs), masking rows whose ratio exceeds 3. PODSConfig keeps TRL's
    defaults for it, and no preset changes them."""
    from pods_rl import PODSConfig
    from pods_rl.defaults import CPU_SIZED, GENERIC, SMOLLM2_CPU_PRESETS, SMOLLM2_CPU_VLLM, TINY_ARITHMETIC
    from pods_rl.versions import CHECKPOINTING_FIELD

    args = PODSConfig(output_dir="unused", use_cpu=True, bf16=False, **{CHECKPOINTING_FIELD: False})
    assert args.vllm_importance_sampling_correction
    assert (args.vllm_importance_sampling_mode, args.vllm_importance_sampling_clip_max) == ("sequence_mask", 3.0)
    presets = [GENERIC, TINY_ARITHMETIC, CPU_SIZED, SMOLLM2_CPU_VLLM, *SMOLLM2_CPU_PRESETS.values()]
    assert not any(key.startswith("vllm_importance_sampling") for preset in presets for key in preset["trainer"])
