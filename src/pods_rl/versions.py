"""What the installed packages allow, read without importing them (the CLI checks settings before any heavy
import)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version

from packaging.version import Version


def checkpointing_field() -> str:
    """transformers 5.23 renamed TrainingArguments' `gradient_checkpointing` to `activation_checkpointing` (the old
    name warns there); vLLM 0.31's environment holds transformers 5.17, which knows only the old name."""
    return (
        "activation_checkpointing" if Version(version("transformers")) >= Version("5.23") else "gradient_checkpointing"
    )


CHECKPOINTING_FIELD = checkpointing_field()


def vllm_installed() -> bool:
    """vLLM can generate in this environment (`make vllm`'s `.venv-vllm`)."""
    return importlib.util.find_spec("vllm") is not None
