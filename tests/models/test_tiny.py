import os
import shutil
from pathlib import Path

import pytest
import torch

from pods_rl.models import list_models, load_model
from pods_rl.models.tiny import PINNED_ENV, TinyRecipe, build_tiny, build_tokenizer
from pods_rl.tasks.base import SYSTEM_PROMPT

QUICK = TinyRecipe(hidden_size=16, intermediate_size=32, num_heads=2, sft_steps=3, sft_batch_size=4)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_tokenizer_round_trips_and_spells_digits(tokenizer) -> None:
    text = "<think>\n12+3=15\n15*-4=-60\n</think>\n<answer>\n-60\n</answer> héllo"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert "<think>" in tokens and "</answer>" in tokens and "1" in tokens and "12" not in tokens


def test_chat_template_is_compact_and_ends_turns(tokenizer) -> None:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Compute 1+2."}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == f"<|system|>{SYSTEM_PROMPT}<|user|>Compute 1+2.<|assistant|>"
    full = tokenizer.apply_chat_template([*messages, {"role": "assistant", "content": "3"}], tokenize=False)
    assert full == prompt + "3" + tokenizer.eos_token
    assert len(tokenizer(prompt)["input_ids"]) < 80  # the system prompt is mostly whole-word tokens


def test_recipe_key_tracks_the_recipe() -> None:
    assert TinyRecipe().key() == TinyRecipe().key()
    assert TinyRecipe().key() != TinyRecipe(sft_steps=1).key()
    assert TinyRecipe().key() != TinyRecipe(task_options={"operators": "+"}).key()


def test_build_warm_start_and_reload_from_cache(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PODS_RL_CACHE", str(tmp_path))
    path = build_tiny(QUICK)
    assert path.parent == tmp_path and path.name == f"tiny-{QUICK.key()}"
    assert (path / "model.safetensors").exists() and (path / "recipe.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp folders left behind
    mtime = (path / "model.safetensors").stat().st_mtime
    assert build_tiny(QUICK) == path and (path / "model.safetensors").stat().st_mtime == mtime

    model, tok = load_model(str(path))
    assert type(model).__name__ == "LlamaForCausalLM" and tok.chat_template and tok.pad_token == "<|pad|>"
    prompt = tok.apply_chat_template([{"role": "user", "content": "Compute 1+2."}], add_generation_prompt=True)
    out = model.generate(torch.tensor([prompt["input_ids"]]), max_new_tokens=3, do_sample=False)
    assert out.shape[1] <= len(prompt["input_ids"]) + 3


def test_a_pinned_warm_start_comes_before_the_cache_and_is_pinned_on_first_use(tmp_path: Path, monkeypatch) -> None:
    """With $PODS_RL_PINNED_MODELS set (a comparison's base-models/), the first build copies the cache's checkpoint
    there, and from then on the pinned one is used even where the cache holds another (another CPU's build)."""
    cache, pins = tmp_path / "cache", tmp_path / "comparison" / "base-models"
    monkeypatch.setenv("PODS_RL_CACHE", str(cache))
    monkeypatch.setenv(PINNED_ENV, str(pins))
    pinned = build_tiny(QUICK)
    assert pinned == pins / f"tiny-{QUICK.key()}" and [p.name for p in pins.iterdir()] == [pinned.name]
    built = cache / pinned.name
    assert (built / "model.safetensors").read_bytes() == (pinned / "model.safetensors").read_bytes()
    assert os.environ[PINNED_ENV] == str(pins)  # set again after the inner build
    # Another machine's cache: different weights under the same recipe. The pinned checkpoint wins.
    (built / "model.safetensors").write_bytes(b"another build")
    assert build_tiny(QUICK) == pinned and (pinned / "model.safetensors").read_bytes() != b"another build"
    # A fresh machine (an empty cache) starts from the pinned checkpoint without building a warm start of its own.
    shutil.rmtree(cache)
    assert build_tiny(QUICK) == pinned and not cache.exists()
    monkeypatch.delenv(PINNED_ENV)
    assert build_tiny(QUICK) == built  # unset: the cache as before


def test_list_models() -> None:
    assert {"tiny", "smollm2-135m"} <= set(list_models())


def test_vllm_variant_has_heads_vllm_cpu_accepts(monkeypatch) -> None:
    import dataclasses

    import pods_rl.models
    from pods_rl.models.tiny import VLLM_RECIPE

    default = TinyRecipe()
    assert default.hidden_size // default.num_heads < 32  # why the variant exists
    assert VLLM_RECIPE.hidden_size // VLLM_RECIPE.num_heads >= 32
    assert dataclasses.replace(VLLM_RECIPE, num_heads=default.num_heads) == default  # nothing else differs
    built = []
    monkeypatch.setattr(
        pods_rl.models, "build_tiny", lambda recipe=None, cache_dir=None, progress=None: built.append(recipe)
    )
    pods_rl.models.model_path("tiny")
    pods_rl.models.model_path("tiny", vllm=True)
    assert built == [default, VLLM_RECIPE]


def test_model_options_change_only_the_warm_start_they_name(monkeypatch) -> None:
    """`model_options` (the difficulty map's knob): the flawed share, SFT steps or seed of the warm start, on the
    default or the vLLM shape; anything else, or options on another model, is refused."""
    import dataclasses

    import pods_rl.models
    from pods_rl.models.tiny import VLLM_RECIPE, tiny_recipe

    built = []
    monkeypatch.setattr(
        pods_rl.models, "build_tiny", lambda recipe=None, cache_dir=None, progress=None: built.append(recipe)
    )
    pods_rl.models.model_path("tiny", options={"flawed_fraction": 0.9})
    pods_rl.models.model_path("tiny", vllm=True, options={"sft_steps": 10, "seed": 3})
    assert built == [
        dataclasses.replace(TinyRecipe(), flawed_fraction=0.9),
        dataclasses.replace(VLLM_RECIPE, sft_steps=10, seed=3),
    ]
    assert tiny_recipe({"flawed_fraction": 0.9}).key() != TinyRecipe().key()  # its own cache folder
    assert tiny_recipe({}) == TinyRecipe() and tiny_recipe(None, vllm=True) == VLLM_RECIPE
    with pytest.raises(ValueError, match=r"model_options \['hidden_size'\]"):
        tiny_recipe({"hidden_size": 8})
    with pytest.raises(ValueError, match="tiny model only"):
        pods_rl.models.model_path("smollm2-135m", options={"flawed_fraction": 0.5})


def test_warm_start_leaves_accelerate_state_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """On a GPU, the run's trainer (bf16) is created after the warm start (CPU, fp32); it once failed there with
    "AcceleratorState has already been initialized"."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    monkeypatch.setenv("PODS_RL_CACHE", str(tmp_path))
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        Accelerator(mixed_precision="bf16", cpu=True)
        before = dict(AcceleratorState._shared_state), dict(PartialState._shared_state)
        build_tiny(QUICK)
        assert AcceleratorState().mixed_precision == "bf16"
        assert (dict(AcceleratorState._shared_state), dict(PartialState._shared_state)) == before
        Accelerator(mixed_precision="bf16", cpu=True)  # the run's trainer: raised before the state was kept
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
