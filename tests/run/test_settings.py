"""Run settings: one schema per section, field tables that follow the installed classes, resume rules."""

import enum
from typing import Literal, Optional, Union

import pytest

from pods_rl.run.field_types import FIELD_TYPES, current_tables, type_text
from pods_rl.run.settings import (
    RunSettings,
    SettingsError,
    apply_on_resume,
    changed_values,
    flatten,
    parse_override,
    resolve,
)


def test_field_tables_match_the_installed_classes():
    assert current_tables() == FIELD_TYPES, "regenerate with: python -m pods_rl.run.field_types"


class Strategy(enum.Enum):
    STEPS = "steps"


@pytest.mark.parametrize(
    ("annotation", "text"),
    [
        (int, "int"),
        (Optional[float], "float | None"),  # noqa: UP045 (the form transformers uses)
        (Union[Strategy, str], "str"),  # noqa: UP007
        (list[str] | None, "list[str] | None"),
        (dict[str, int] | str | None, "dict | str | None"),
        (Literal["none", "all"], "Literal['none', 'all']"),
        (str | None | Literal[False], "str | None | Literal[False]"),
        (tuple[int, int], "list[int]"),
        (Strategy | None, "str | None"),
        (object, "Any"),
        (int | object, "Any"),
    ],
)
def test_type_text(annotation, text):
    assert type_text(annotation) == text


@pytest.mark.parametrize(
    ("section", "value", "accepted"),
    [
        ({"trainer": {"learning_rate": 1}}, 1, True),  # an int is a valid float
        ({"trainer": {"learning_rate": "fast"}}, "fast", False),
        ({"trainer": {"report_to": ["tensorboard"]}}, None, True),
        ({"trainer": {"report_to": [1]}}, None, False),
        ({"trainer": {"trackio_static_space_id": False}}, None, True),
        ({"trainer": {"trackio_static_space_id": True}}, None, False),
        ({"lora": {"bias": "all"}}, None, True),
        ({"lora": {"bias": "some"}}, None, False),
        ({"eval": {"every_steps": None, "every_seconds": 30}}, None, True),
        ({"eval": {"sampled_k": True}}, None, False),  # strict: a bool is not a count
    ],
)
def test_sections_are_checked_against_their_types(section, value, accepted):
    if accepted:
        RunSettings.from_dict(section)
    else:
        with pytest.raises(SettingsError):
            RunSettings.from_dict(section)


def test_user_settings_are_checked_before_the_defaults_are_built():
    """The defaults of a model and task may import heavy modules: a bad user setting fails before that."""

    def defaults(model, task):
        raise AssertionError("defaults built before the user's settings were checked")

    with pytest.raises(SettingsError, match="seed: input should be a valid integer"):
        resolve(defaults, None, [{"seed": "abc"}])


def test_changed_values_names_every_differing_leaf_with_both_values():
    before = {"trainer": {"max_steps": 5, "beta": 0.0}, "seed": 0, "eval": {"every_steps": 10}}
    after = {"trainer": {"max_steps": 9, "beta": 0.0}, "seed": 0, "lora": {"r": 8}}
    assert changed_values(before, after) == {
        "eval.every_steps": (10, None),
        "lora.r": (None, 8),
        "trainer.max_steps": (5, 9),
    }
    assert changed_values(before, before) == {}


def test_resume_changes_only_what_may_change():
    saved = RunSettings.from_dict({"trainer": {"max_steps": 10, "learning_rate": 1e-4}, "eval": {"every_steps": 5}})
    updated, changes = apply_on_resume(
        saved, [{"trainer": {"max_steps": 20}}, {"time_budget": 60.0}], where="--resume run"
    )
    assert updated.trainer == {"max_steps": 20, "learning_rate": 1e-4} and updated.time_budget == 60.0
    assert changes == {"time_budget": (None, 60.0), "trainer.max_steps": (10, 20)}
    assert apply_on_resume(saved, [{"trainer": {"max_steps": 10}}], where="r")[1] == {}  # the same value: no change
    with pytest.raises(SettingsError, match=r"--resume cannot change lora\.r, task: a resumed run keeps"):
        apply_on_resume(saved, [{"task": "gsm8k"}, {"lora": {"r": 8}}], where="r")


def test_flatten():
    assert flatten({"a": 1, "b": {"c": 2, "d": {}}, "e": None}) == {"a": 1, "b.c": 2, "e": None}


def test_yaml_values_follow_yaml_1_2_booleans_and_floats(tmp_path):
    """`save_strategy=no` stays the string TRL takes (YAML 1.1 would read a boolean); true/false and 1e-4 are read
    as a boolean and a float, in a file and on the command line alike."""
    assert parse_override("trainer.save_strategy=no") == {"trainer": {"save_strategy": "no"}}
    assert [parse_override(f"x={raw}")["x"] for raw in ("yes", "on", "off", "true", "False", "1e-4", "null")] == [
        "yes",
        "on",
        "off",
        True,
        False,
        1e-4,
        None,
    ]
    config = tmp_path / "run.yaml"
    config.write_text("trainer:\n  save_strategy: no\n  bf16: false\n")
    settings = resolve(lambda model, task: {}, config, [parse_override("trainer.logging_strategy=no")])
    assert (settings.trainer["save_strategy"], settings.trainer["bf16"]) == ("no", False)
    assert settings.trainer["logging_strategy"] == "no"


@pytest.mark.parametrize(
    ("options", "model", "message"),
    [
        ({"flawed_fraction": 0.9}, "tiny", None),
        ({"flawed_fraction": 0, "sft_steps": 300, "seed": 2}, "tiny", None),
        ({"flawed": 0.9}, "tiny", r"model_options\.flawed: not an option; the tiny model takes \['flawed_fraction'"),
        ({"flawed_fraction": 1.5}, "tiny", r"model_options\.flawed_fraction: 1\.5 is not float in \[0\.0, 1\.0\]"),
        ({"flawed_fraction": True}, "tiny", "is not float"),
        ({"sft_steps": 2.5}, "tiny", "model_options.sft_steps: 2.5 is not int"),
        ({"seed": -1}, "tiny", "model_options.seed: -1 is not int"),
        ({"flawed_fraction": 0.5}, "smollm2-135m", "model_options apply to the built-in tiny model only"),
    ],
)
def test_model_options_are_the_tiny_models_warm_start(options, model, message):
    if message is None:
        settings = RunSettings.from_dict({"model": model, "model_options": options})
        assert settings.model_options == {key: value for key, value in options.items()}
        assert isinstance(settings.model_options.get("flawed_fraction", 0.0), float)  # 0 in YAML is the share 0.0
        assert settings.model_label().startswith("tiny (") and "flawed_fraction=" in settings.model_label()
    else:
        with pytest.raises(SettingsError, match=message):
            RunSettings.from_dict({"model": model, "model_options": options})
