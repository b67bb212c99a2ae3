"""Run settings: what `pods train` reads from defaults, a YAML file and command-line overrides.

Every section has a schema (pydantic), so the types, ranges and help text live in one place, and everything is
validated here, before any model or dataset is loaded. This module imports neither torch nor TRL: the `trainer` and
`lora` sections are checked against field tables generated from PODSConfig and peft's LoraConfig
(`pods_rl.run.field_types`, kept equal to the installed classes by a test), so a mistyped setting fails in a second.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pods_rl.config_rules import check_async_fields, check_batch_fields, check_selection_fields, check_vllm
from pods_rl.models.tiny import WARM_START_OPTIONS
from pods_rl.run.field_types import FIELD_TYPES
from pods_rl.tasks.names import check_task_name


class _Loader(yaml.SafeLoader):
    """The safe loader with YAML 1.2's scalars: `1e-4` is a float (YAML 1.1 needs `1.0e-4`), and only true/false are
    booleans, so that `save_strategy: no` (in a file or `--set`) stays the string TRL takes (YAML 1.1 reads
    no/yes/on/off as booleans)."""


BOOL = "tag:yaml.org,2002:bool"
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: builds plain data only


class SettingsError(ValueError):
    """A setting is wrong: the message is one line naming the setting and what is allowed."""


_STRICT = ConfigDict(extra="forbid", strict=True, validate_assignment=True)


class EvalSettings(BaseModel):
    """Held-out evaluation during training; its time is excluded from the training clock."""

    model_config = _STRICT

    every_steps: int | None = Field(20, ge=1, description="evaluate every this many steps (null: start and end only)")
    every_seconds: float | None = Field(
        None, gt=0, description="evaluate every this many seconds of training time; replaces every_steps when set"
    )
    num_examples: int | None = Field(None, ge=1, description="evaluate on the first N test examples (null: all)")
    sampled_k: int = Field(0, ge=0, description="also sampled pass@1, averaged over k samples at the temperature")
    batch_size: int = Field(128, ge=1, description="generation batch size of the evaluation")
    max_new_tokens: int | None = Field(None, ge=1, description="completion limit (null: max_completion_length)")


class AsyncSettings(BaseModel):
    """Asynchronous training (`pods train --async`, docs/async.md): a vLLM server generates while the trainer
    updates (TRL's asynchronous GRPO with PODS's selection in its rollout worker)."""

    model_config = _STRICT

    server_url: str | None = Field(None, description="a running vLLM server's base URL (null: start one for the run)")
    max_staleness: int = Field(2, ge=0, description="drop a sample generated more than this many updates ago")
    weight_sync_steps: int = Field(1, ge=1, description="send the policy to the server every this many steps")
    max_inflight_tasks: int | None = Field(
        None, ge=1, description="completions requested at once (null: max_staleness x a step's rows x n/m)"
    )
    server_args: list[str] = Field(default_factory=list, description="more arguments of the started server")


class RunSettings(BaseModel):
    """A whole run. `trainer` holds any PODSConfig field (TRL's GRPOConfig plus num_selected, selection_rule...)."""

    model_config = _STRICT

    model: str = Field("tiny", min_length=1, description="'tiny', 'smollm2-135m', a local folder or a hub id")
    task: str = Field("arithmetic", min_length=1, description="a task name, see `pods tasks`")
    task_options: dict[str, Any] = Field(default_factory=dict, description="keyword options of the task's loader")
    model_options: dict[str, Any] = Field(
        default_factory=dict, description="the tiny model's warm start: flawed_fraction, sft_steps, seed"
    )
    lora: dict[str, Any] | None = Field(None, description="peft.LoraConfig fields, e.g. {r: 16, lora_alpha: 32}")
    trainer: dict[str, Any] = Field(default_factory=dict, description="PODSConfig fields")
    eval: EvalSettings = Field(default_factory=EvalSettings, description="held-out evaluation")
    time_budget: float | None = Field(None, gt=0, description="seconds of training time (evaluation excluded)")
    asynchronous: AsyncSettings | None = Field(
        None, description="generate on a vLLM server while training (null: generate, then train, in turn)"
    )
    seed: int = Field(0, ge=0, lt=2**32, description="seed of the data order, sampling and selection")

    @field_validator("trainer")
    @classmethod
    def _trainer_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_fields("trainer", value, hint="each key is a PODSConfig (TRL GRPOConfig) field")

    @field_validator("lora")
    @classmethod
    def _lora_fields(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else check_fields("lora", value, hint="each key is a peft.LoraConfig field")

    @field_validator("task_options")
    @classmethod
    def _data_files_exist(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_data_files(value.get("data_files"))
        return value

    @field_validator("model_options")
    @classmethod
    def _model_option_values(cls, value: dict[str, Any]) -> dict[str, Any]:
        return check_model_options(value)

    @field_validator("task")
    @classmethod
    def _task_exists(cls, value: str) -> str:
        check_task_name(value)
        return value

    @model_validator(mode="after")
    def _trainer_rules(self, info: ValidationInfo) -> RunSettings:
        """PODSConfig's rules on n, m, the selection options and the batch, checked here with the same code, so that
        they fail before TRL is imported (seconds). Settings that are not a whole run yet (the user's own, before the
        defaults) skip them: an absent field is not yet at its final value. Settings read back from a run folder skip
        the rules of this environment (vLLM installed, the process count)."""
        checks = (info.context or {}).get("checks", "all")
        if checks == "fields":
            return self
        if self.model_options and self.model != "tiny":
            raise ValueError(f"model_options apply to the built-in tiny model only, not to {self.model!r}")
        check_selection_fields(self.trainer, section="trainer.")
        if self.asynchronous is not None:
            check_async_fields(self.trainer, section="trainer.")
            if self.trainer.get("use_vllm"):
                raise ValueError("trainer.use_vllm: asynchronous training generates on its vLLM server; drop it")
        if checks == "all":
            if self.asynchronous is not None:
                check_async_environment(bool(self.lora))
            check_vllm(self.trainer.get("use_vllm", False), section="trainer.")
            check_batch_fields(self.trainer, int(os.environ.get("WORLD_SIZE", "1")), section="trainer.")
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def model_label(self) -> str:
        """The model as plans name it: its name, with its `model_options` when set (`tiny (flawed_fraction=0.9)`)."""
        options = ", ".join(f"{key}={value}" for key, value in self.model_options.items())
        return f"{self.model} ({options})" if options else self.model

    @classmethod
    def from_dict(
        cls, data: Any, *, where: str = "settings", checks: Literal["all", "portable", "fields"] = "all"
    ) -> RunSettings:
        """Validate `data`; raises SettingsError with one line naming the first wrong setting.

        `checks`: "all" for a run here; "portable" for a run's saved settings, without the rules of this environment;
        "fields" for settings that are not a whole run yet, each field on its own."""
        if not isinstance(data, dict):
            raise SettingsError(f"{where}: settings must be a mapping, got {data!r}.")
        try:
            return cls.model_validate(data, context={"checks": checks})
        except ValidationError as error:
            raise SettingsError(f"{where}: {describe(error, cls)}") from None

    def trainer_config(self, output_dir: Path, **run_fields: Any):
        """The PODSConfig of this run; raises SettingsError naming any inconsistent trainer setting.

        This imports TRL (seconds): the checks that need no PODSConfig ran when the settings were built.
        """
        from pods_rl.trainer import PODSConfig

        values = {"seed": self.seed, **_device_defaults(), **self.trainer, "output_dir": str(output_dir), **run_fields}
        try:
            return PODSConfig(**values)
        except (ValueError, TypeError) as error:
            raise SettingsError(f"Invalid trainer settings: {error}") from error


def check_async_environment(lora: bool) -> None:
    """Asynchronous training needs vLLM (its server, and TRL's rollout worker checks for it) and aiohttp; on a CPU,
    LoRA (the policy reaches the server as adapters by path; full weights go over NCCL, GPUs only)."""
    import importlib.util

    from pods_rl.versions import vllm_installed

    missing = [name for name, found in (("vllm", vllm_installed()), ("aiohttp", importlib.util.find_spec("aiohttp")))
               if not found]  # fmt: skip
    if missing:
        raise ValueError(
            f"asynchronous training needs {' and '.join(missing)}, which this environment lacks: `make vllm` builds "
            "one that has them; run .venv-vllm/bin/pods (docs/async.md)."
        )
    if not lora and not accelerator_available():
        raise ValueError(
            "asynchronous training on a CPU sends the policy to the vLLM server as a LoRA adapter: add --lora-r 8 "
            "(or lora: {r: 8}); full weights go over NCCL, GPUs only."
        )


def accelerator_available() -> bool:
    """Whether torch sees a GPU (or another accelerator); imported late, as the CLI's fast path avoids torch."""
    import torch

    return torch.accelerator.is_available()


def _device_defaults() -> dict[str, bool]:
    """Run on the accelerator when there is one, else on the CPU (where TRL's default bf16 fails).

    `use_cpu` must be explicit on a CPU-only machine: without it transformers does not set up gloo for
    `accelerate launch`, and each process would train alone.
    """
    import torch

    has_accelerator = accelerator_available()
    bf16 = has_accelerator and (not torch.cuda.is_available() or torch.cuda.is_bf16_supported())
    return {"use_cpu": not has_accelerator, "bf16": bf16}


# ------------------------------------------------------------------ field tables of PODSConfig and LoraConfig

_TYPE_NAMES = {"bool": bool, "int": int, "float": float, "str": str, "list": list, "dict": dict, "Any": Any}


@cache
def _adapter(type_text: str) -> TypeAdapter:
    annotation = eval(type_text, {"__builtins__": {}}, {**_TYPE_NAMES, "Literal": Literal, "None": None})
    return TypeAdapter(annotation, config=ConfigDict(strict=True))


# Ranges that peft checks only when it builds the adapter on the loaded model (or that torch checks there): the rank
# and the QA-LoRA group size are positive (a rank, a divisor), the dropout is a probability (torch's Dropout).
RANGES: dict[str, dict[str, TypeAdapter]] = {
    "lora": {
        "r": TypeAdapter(Annotated[int, Field(ge=1)]),
        "qalora_group_size": TypeAdapter(Annotated[int, Field(ge=1)]),
        "lora_dropout": TypeAdapter(Annotated[float, Field(ge=0, le=1)]),
    }
}


def check_fields(section: str, values: dict[str, Any], *, hint: str) -> dict[str, Any]:
    """Check each key of `section` against its field table and `RANGES`: an unknown key, a wrong type or a value out
    of range raises one line naming the setting."""
    table = FIELD_TYPES[section]
    for key, value in values.items():
        if key not in table:
            raise ValueError(f"unknown key {section}.{key}{_close_matches(key, table)}; {hint}")
        try:
            _adapter(table[key]).validate_python(value)
        except ValidationError:
            raise ValueError(f"{section}.{key}: expected {table[key]}, got {value!r}") from None
        allowed = RANGES.get(section, {}).get(key)
        try:
            if allowed is not None:
                allowed.validate_python(value)
        except ValidationError as error:
            message = error.errors()[0]["msg"]
            raise ValueError(f"{section}.{key}: {message[0].lower()}{message[1:]}, got {value!r}") from None
    return values


def _close_matches(key: str, allowed: Any) -> str:
    matches = difflib.get_close_matches(str(key), list(allowed), n=3, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, matches))}?)" if matches else ""


def describe(error: ValidationError, model: type[BaseModel]) -> str:
    """The first error of a validation as one line: the dotted setting, what is wrong, what is allowed."""
    first = error.errors()[0]
    location = [str(part) for part in first["loc"]]
    place = ".".join(location)
    if first["type"] == "extra_forbidden":
        section = _section_model(model, location[:-1])
        allowed = list(section.model_fields)
        return f"unknown key {place}{_close_matches(location[-1], allowed)}; allowed: {', '.join(allowed)}."
    if first["type"] == "value_error":
        message = str(first["ctx"]["error"]).rstrip(".")  # from a check of this module, config_rules or tasks
        named = message.startswith((place, "unknown key"))
        return f"{message}." if named else f"{place}: {message}."
    message = first["msg"][0].lower() + first["msg"][1:]
    return f"{place}: {message}, got {first['input']!r}."


def _section_model(model: type[BaseModel], path: list[str]) -> type[BaseModel]:
    for name in path:
        annotation = model.model_fields[name].annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return model


def check_model_options(options: dict[str, Any]) -> dict[str, Any]:
    """Each key of `model_options` is a warm-start option of the tiny model (`WARM_START_OPTIONS`), its value a
    number of its type in its range."""
    for key, value in options.items():
        if key not in WARM_START_OPTIONS:
            raise ValueError(f"model_options.{key}: not an option; the tiny model takes {list(WARM_START_OPTIONS)}")
        kind, low, high = WARM_START_OPTIONS[key]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or (kind is int and not isinstance(value, int)) or not low <= value <= high:
            raise ValueError(f"model_options.{key}: {value!r} is not {kind.__name__} in [{low}, {high}]")
    return {key: float(value) if WARM_START_OPTIONS[key][0] is float else value for key, value in options.items()}


def check_data_files(data_files: Any) -> None:
    """`task_options.data_files` maps split names to local files (or lists of them) that exist."""
    if data_files is None:
        return
    usage = "e.g. --set task_options.data_files='{train: train.jsonl, test: test.jsonl}'"
    if not isinstance(data_files, dict):
        raise ValueError(f"data_files must map each split to its files, {usage}; got {data_files!r}")
    for split, files in data_files.items():
        for file in [files] if isinstance(files, str) else files if isinstance(files, list) else [files]:
            if not isinstance(file, str):
                raise ValueError(f"data_files[{split!r}] must be a path or a list of paths, got {file!r}")
            local = "://" not in file and not any(char in file for char in "*?[")
            if local and not Path(file).is_file():
                raise ValueError(f"data_files[{split!r}]: no file {file!r} ({usage})")


# ------------------------------------------------------------------ reading and merging


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a settings file with the safe loader; errors name the file and what is wrong."""
    try:
        data = load_yaml(Path(path).read_text())
    except FileNotFoundError:
        raise SettingsError(f"Config file {path} does not exist.") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise SettingsError(f"Config file {path} is not valid YAML{at}: {problem}.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"Config file {path} must hold a mapping of settings, got {type(data).__name__}.")
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


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"trainer": {"max_steps": 5}} -> {"trainer.max_steps": 5}."""
    items: dict[str, Any] = {}
    for key, value in data.items():
        items.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return items


def changed_values(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (old, new)} for every value that differs between two nested settings."""
    old, new = flatten(before), flatten(after)
    keys = sorted(old.keys() | new.keys())
    return {key: (old.get(key), new.get(key)) for key in keys if old.get(key) != new.get(key)}


def parse_override(text: str) -> dict[str, Any]:
    """`trainer.learning_rate=1e-4` -> {"trainer": {"learning_rate": 0.0001}}; the value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise SettingsError(f"Override {text!r} must look like KEY=VALUE, e.g. trainer.learning_rate=1e-4.")
    try:
        value = load_yaml(raw)
    except yaml.YAMLError as error:
        raise SettingsError(f"Override {text!r}: the value is not valid YAML: {error}") from None
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def resolve(
    defaults: Callable[[str, str], dict[str, Any]], config_file: Path | None, overrides: list[dict[str, Any]]
) -> RunSettings:
    """Defaults for the chosen model and task, then the YAML file, then command-line overrides, in that order.

    The user's own settings are checked first, on their own: a mistake there is reported before the defaults of the
    model and task are built.
    """
    where = str(config_file) if config_file else "settings"
    user: dict[str, Any] = read_yaml(config_file) if config_file is not None else {}
    for override in overrides:
        user = merge(user, override)
    checked = RunSettings.from_dict(user, where=where, checks="fields")
    return RunSettings.from_dict(merge(defaults(checked.model, checked.task), user), where=where)


# ------------------------------------------------------------------ resuming with changed settings

# What `--resume` may change: when to stop, when to evaluate, and how to log and save. Anything else would make the
# resumed run a different run from its checkpoint.
RESUMABLE = (
    "trainer.max_steps",
    "time_budget",
    "eval.every_steps",
    "eval.every_seconds",
    "eval.batch_size",
    "trainer.save_steps",
    "trainer.save_total_limit",
    "trainer.report_to",
    "asynchronous.server_url",
)


def apply_on_resume(
    saved: RunSettings, overrides: list[dict[str, Any]], *, where: str
) -> tuple[RunSettings, dict[str, tuple[Any, Any]]]:
    """The saved settings with `overrides` applied, and the changes as {dotted key: (old, new)}.

    Raises SettingsError naming every key that may not change on resume.
    """
    data = saved.to_dict()
    for override in overrides:
        data = merge(data, override)
    updated = RunSettings.from_dict(data, where=where)
    changes = changed_values(saved.to_dict(), updated.to_dict())
    refused = [key for key in changes if key not in RESUMABLE]
    if refused:
        raise SettingsError(
            f"--resume cannot change {', '.join(refused)}: a resumed run keeps the settings it started with; "
            f"it may change only {', '.join(RESUMABLE)}."
        )
    return updated, changes
