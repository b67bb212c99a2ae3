"""Run settings: what `pods train` reads from defaults, a YAML file and command-line overrides.

Everything is validated here, before any model or dataset is loaded, so a bad setting fails in a second.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from pods_rl.trainer import PODSConfig


class _Loader(yaml.SafeLoader):
    """The safe loader, also reading `1e-4` as a float (YAML 1.1 needs `1.0e-4`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: builds plain data only


@dataclass
class EvalSettings:
    """Held-out evaluation during training; its time is excluded from the training clock."""

    every_steps: int | None = 20
    every_seconds: float | None = None  # of training time; used instead of every_steps when set
    num_examples: int | None = None  # None: the whole test split
    sampled_k: int = 0  # also report sampled pass@1 averaged over k samples at the training temperature
    batch_size: int = 128
    max_new_tokens: int | None = None  # None: the trainer's max_completion_length


@dataclass
class RunSettings:
    """A whole run. `trainer` holds any PODSConfig field (TRL's GRPOConfig plus num_selected, selection_rule...)."""

    model: str = "tiny"
    task: str = "arithmetic"
    task_options: dict[str, Any] = field(default_factory=dict)
    lora: dict[str, Any] | None = None  # peft.LoraConfig fields, e.g. {r: 16, lora_alpha: 32}
    trainer: dict[str, Any] = field(default_factory=dict)
    eval: EvalSettings = field(default_factory=EvalSettings)
    time_budget: float | None = None  # seconds of training time (evaluation and checkpoints excluded)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "settings") -> RunSettings:
        data = dict(data)
        _reject_unknown(data, cls, where)
        eval_data = data.pop("eval", None) or {}
        if not isinstance(eval_data, dict):
            raise ValueError(f"{where}: 'eval' must be a mapping, got {eval_data!r}.")
        _reject_unknown(eval_data, EvalSettings, f"{where}: eval")
        for name in ("task_options", "trainer"):
            if not isinstance(data.get(name, {}), dict):
                raise ValueError(f"{where}: {name!r} must be a mapping, got {data[name]!r}.")
        return cls(**data, eval=EvalSettings(**eval_data))

    def trainer_config(self, output_dir: Path, **run_fields: Any) -> PODSConfig:
        """The PODSConfig of this run; raises ValueError naming any unknown or inconsistent trainer setting."""
        known = {f.name for f in fields(PODSConfig)}
        unknown = sorted(set(self.trainer) - known)
        if unknown:
            raise ValueError(f"Unknown trainer setting(s) {unknown}: each must be a PODSConfig/GRPOConfig field.")
        values = {"seed": self.seed, **_device_defaults(), **self.trainer, "output_dir": str(output_dir), **run_fields}
        try:
            return PODSConfig(**values)
        except ValueError as error:
            raise ValueError(f"Invalid trainer settings: {error}") from error


def _device_defaults() -> dict[str, bool]:
    """Run on the accelerator when there is one, else on the CPU (where TRL's default bf16 fails).

    `use_cpu` must be explicit on a CPU-only machine: without it transformers does not set up gloo for
    `accelerate launch`, and each process would train alone.
    """
    import torch

    has_accelerator = torch.accelerator.is_available()
    bf16 = has_accelerator and (not torch.cuda.is_available() or torch.cuda.is_bf16_supported())
    return {"use_cpu": not has_accelerator, "bf16": bf16}


def _reject_unknown(data: dict[str, Any], cls: type, where: str) -> None:
    allowed = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {allowed}.")


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a settings file with the safe loader; errors name the file and what is wrong."""
    try:
        data = load_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"Config file {path} does not exist.") from None
    except yaml.YAMLError as error:
        raise ValueError(f"Config file {path} is not valid YAML: {error}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"Config file {path} must hold a mapping of settings, got {type(data).__name__}.")
    return data


def merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """Nested dict update: mappings merge key by key, everything else replaces."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_override(text: str) -> dict[str, Any]:
    """`trainer.learning_rate=1e-4` -> {"trainer": {"learning_rate": 0.0001}}; the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ValueError(f"Override {text!r} must look like KEY=VALUE, e.g. trainer.learning_rate=1e-4.")
    try:
        value = load_yaml(raw)
    except yaml.YAMLError as error:
        raise ValueError(f"Override {text!r}: the value is not valid YAML: {error}") from None
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def resolve(
    defaults: Callable[[str, str], dict[str, Any]], config_file: Path | None, overrides: list[dict[str, Any]]
) -> RunSettings:
    """Defaults for the chosen model and task, then the YAML file, then command-line overrides, in that order."""
    user: dict[str, Any] = read_yaml(config_file) if config_file is not None else {}
    for override in overrides:
        user = merge(user, override)
    data = merge(defaults(user.get("model", "tiny"), user.get("task", "arithmetic")), user)
    return RunSettings.from_dict(data, where=str(config_file) if config_file else "settings")
