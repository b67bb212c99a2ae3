"""Field tables of PODSConfig and peft's LoraConfig, so settings are checked without importing TRL or peft.

`field_types.json` is generated from the installed classes by `python -m pods_rl.run.field_types`; a test
regenerates the tables and fails when they differ (after an upgrade of TRL, transformers or peft, or a new PODSConfig
field). A type is written in a small vocabulary (bool, int, float, str, None, Any, list[...], dict, Literal[...],
unions), which is what a YAML value can be: enums become `str`, other classes `Any`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

TABLE_FILE = Path(__file__).with_name("field_types.json")
FIELD_TYPES: dict[str, dict[str, str]] = json.loads(TABLE_FILE.read_text())


def type_text(annotation: Any) -> str:
    """A field's annotation in the vocabulary above, e.g. `Union[str, IntervalStrategy]` -> 'str'."""
    if annotation is type(None) or annotation is None:
        return "None"
    if annotation in (bool, int, float, str):
        return annotation.__name__
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "str"
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return f"Literal[{', '.join(map(repr, arguments))}]"
    if origin in (typing.Union, types.UnionType):
        members = list(dict.fromkeys(type_text(argument) for argument in arguments))
        return "Any" if "Any" in members else " | ".join(members)
    if origin in (list, tuple) or annotation in (list, tuple):
        return "list" if not arguments else f"list[{type_text(arguments[0])}]"
    if origin is dict or annotation is dict:
        return "dict"
    return "Any"


def field_table(cls: type) -> dict[str, str]:
    hints = typing.get_type_hints(cls)
    return {field.name: type_text(hints[field.name]) for field in dataclasses.fields(cls) if field.init}


def current_tables() -> dict[str, dict[str, str]]:
    """The tables of the installed classes (imports TRL and peft)."""
    from peft import LoraConfig

    from pods_rl.trainer import PODSConfig

    return {"trainer": field_table(PODSConfig), "lora": field_table(LoraConfig)}


if __name__ == "__main__":
    TABLE_FILE.write_text(json.dumps(current_tables(), indent=1) + "\n")
    print(f"wrote {TABLE_FILE}")
