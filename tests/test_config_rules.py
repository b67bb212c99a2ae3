"""PODSConfig's rules, checked without TRL: the settings layer and PODSConfig reach the same verdict with one code."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from pods_rl.config_rules import (
    PODS_DEFAULTS,
    TRL_DEFAULTS,
    allocation_objective,
    check_batch,
    check_selection_fields,
    rows_per_process,
)
from pods_rl.run.settings import RunSettings
from pods_rl.trainer import PODSConfig


def test_the_defaults_the_rules_read_are_podsconfigs():
    defaults = {field.name: field.default for field in dataclasses.fields(PODSConfig)}
    assert {name: defaults[name] for name in TRL_DEFAULTS} == TRL_DEFAULTS
    assert {name: defaults[name] for name in PODS_DEFAULTS} == PODS_DEFAULTS


@pytest.mark.parametrize(
    ("fields", "processes"),
    [
        ({}, 1),
        ({"per_device_train_batch_size": 3, "gradient_accumulation_steps": 2}, 1),
        ({"per_device_train_batch_size": 3, "steps_per_generation": 4}, 2),
        ({"per_device_train_batch_size": 2, "generation_batch_size": 12}, 2),
    ],
)
def test_rows_per_process_as_grpoconfig_derives_them(tmp_path, monkeypatch, fields, processes):
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: processes))
    config = PODSConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, num_generations=2, **fields)
    assert rows_per_process(fields, processes) == config.per_device_train_batch_size * config.steps_per_generation


def test_contradictory_batch_fields_are_left_to_grpoconfig():
    assert rows_per_process({"generation_batch_size": 8, "steps_per_generation": 2}, 1) is None
    assert rows_per_process({"per_device_train_batch_size": 3, "generation_batch_size": 8}, 1) is None


def test_pools_may_span_processes_when_the_rows_hold_whole_groups():
    check_batch(3, 2, 4, 2, "per_prompt")  # 6 rows of groups of 2; 12 rollouts per process
    with pytest.raises(ValueError, match="pool must lie on one process"):
        check_batch(3, 2, 4, 2, "batch")
    with pytest.raises(ValueError, match=r"rows trained per generation, must be divisible by num_selected \(m=2\)"):
        check_batch(3, 1, 4, 2, "per_prompt")


def verdict(check, *args, **kwargs) -> str | None:
    try:
        check(*args, **kwargs)
    except (ValueError, TypeError) as error:
        return str(error)
    return None


# Every combination of the fields the rules read, over values on both sides of each rule.
GRID = [
    dict(
        zip(
            ("num_generations", "num_selected", "per_device_train_batch_size", "selection_rule", "selection_budget"),
            v,
            strict=True,
        )
    )
    for v in itertools.product(
        [1, 4, 6], [None, 1, 2, 3, 5], [4, 6], ["max_variance", "random"], ["per_prompt", "batch"]
    )
]


@pytest.mark.parametrize("fields", GRID, ids=lambda fields: "-".join(map(str, fields.values())))
def test_settings_refuse_exactly_what_podsconfig_refuses(tmp_path, fields):
    """Brute force over the grid: the settings layer raises iff PODSConfig does; where PODSConfig's message is its own
    (not TRL's), the settings say the same, naming the `trainer.` setting."""
    built = verdict(PODSConfig, output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **fields)
    checked = verdict(RunSettings.from_dict, {"trainer": fields})
    assert (built is None) == (checked is None), (built, checked)
    own = built is not None and verdict(check_selection_fields, fields) is not None
    if own:
        assert checked == f"settings: trainer.{built}"


@pytest.mark.parametrize(
    ("fields", "processes"),
    [
        ({"gradient_accumulation_steps": 2}, 1),  # steps_per_generation defaults to 2: whole optimizer steps
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 1}, 1),
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 3}, 1),
        ({"gradient_accumulation_steps": 2, "steps_per_generation": 3, "num_iterations": 2}, 1),
        ({"gradient_accumulation_steps": 4, "generation_batch_size": 16}, 1),  # 2 steps per generation
        ({"gradient_accumulation_steps": 2, "generation_batch_size": 32}, 2),
        ({"per_device_train_batch_size": 2}, 2),  # each pool of 4 would span both processes
        ({"max_generation_rounds": 0}, 1),
        ({"max_generation_rounds": 1}, 1),
        ({"max_steps": -1}, 1),  # sized in epochs, which refills shorten
        ({"max_steps": 0, "num_train_epochs": 2}, 1),
    ],
)
def test_settings_refuse_exactly_the_dynamic_sampling_podsconfig_refuses(tmp_path, monkeypatch, fields, processes):
    """Dynamic sampling's own rules (whole pools per process, refills at optimizer steps, rounds >= 1) are checked
    by the settings layer before TRL, with PODSConfig's words."""
    fields = {
        "num_generations": 8,
        "num_selected": 4,
        "per_device_train_batch_size": 8,
        "dynamic_sampling": True,
        "max_steps": 10,
        **fields,
    }
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: processes))
    built = verdict(PODSConfig, output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **fields)
    monkeypatch.setenv("WORLD_SIZE", str(processes))  # what the settings layer reads (accelerate's, in a real launch)
    checked = verdict(RunSettings.from_dict, {"trainer": fields})
    monkeypatch.delenv("WORLD_SIZE")
    assert (built is None) == (checked is None), (built, checked)
    if built is not None and any(name in built for name in ("allocation", "screen", "history", "budget", "success")):
        assert checked == f"settings: trainer.{built}"  # an allocation rule's refusal (the others are TRL's words)
    if built is not None and "dynamic_sampling" in built:
        # A refusal that names dynamic sampling is its own: the same batch without it is accepted.
        plain = {**fields, "dynamic_sampling": False}
        assert (
            verdict(PODSConfig, output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **plain) is None
        )


# Allocation settings on both sides of each rule, alone and with a mode, on one and two processes.
ALLOCATION_GRID = [
    {},
    {"rollout_allocation": "bogus"},
    {"rollout_allocation": "screen"},
    *({"rollout_allocation": "screen", "screen_size": size} for size in (1, 2, 7, 8)),
    {"rollout_allocation": "screen", "screen_size": 4, "screen_pass_rate_band": [0.2, 0.8]},
    {"rollout_allocation": "screen", "screen_size": 4, "screen_pass_rate_band": [0.9, 0.1]},
    {"rollout_allocation": "screen", "screen_size": 4, "screen_pass_rate_band": [0.5]},
    {"screen_size": 4},
    {"success_threshold": None},
    {"rollout_allocation": "screen", "screen_size": 4, "history_exploration": 0.5},
    *({"rollout_allocation": "history", "history_exploration": p} for p in (-0.5, 0.0, 1.0, 1.5)),
    *({"rollout_allocation": "history", "history_decay": d} for d in (0.0, 0.5, 1.5)),
    {"rollout_allocation": "history", "history_prior_successes": -1.0},
    {"rollout_allocation": "history", "allocation_objective": "informative"},
    {"rollout_allocation": "history", "allocation_objective": "knapsack_rl"},
    {"rollout_allocation": "history", "allocation_objective": "auto"},
    {"rollout_allocation": "history", "allocation_objective": "gain"},
    {"allocation_objective": "knapsack_rl"},
    {"rollout_allocation": "history", "selection_rule": "random"},
    *({"rollout_allocation": "history", "max_rollouts_per_prompt": k} for k in (3, 4, 32)),
    *({"rollout_allocation": "history", "generation_budget": b} for b in (15, 16, 17, 24, 32, 33, 64, 65)),
    {"rollout_allocation": "history", "generation_budget": 64, "max_rollouts_per_prompt": 32},
    {"rollout_allocation": "history", "per_device_train_batch_size": 2},
    {"rollout_allocation": "screen", "screen_size": 4, "gradient_accumulation_steps": 2, "steps_per_generation": 1},
]


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("fields", ALLOCATION_GRID, ids=lambda fields: "-".join(map(str, fields.values())) or "none")
def test_settings_refuse_exactly_the_allocation_podsconfig_refuses(tmp_path, monkeypatch, fields, processes):
    """Rollout allocation's rules (modes, their options, the budget against the rows and the processes) are checked
    by the settings layer before TRL, with PODSConfig's words."""
    fields = {"num_generations": 8, "num_selected": 4, "per_device_train_batch_size": 8, **fields}
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: processes))
    built = verdict(PODSConfig, output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", **fields)
    monkeypatch.setenv("WORLD_SIZE", str(processes))
    checked = verdict(RunSettings.from_dict, {"trainer": fields})
    monkeypatch.delenv("WORLD_SIZE")
    assert (built is None) == (checked is None), (built, checked)
    if built is not None and any(name in built for name in ("allocation", "screen", "history", "budget", "success")):
        assert checked == f"settings: trainer.{built}"  # an allocation rule's refusal (the others are TRL's words)


@pytest.mark.parametrize(
    ("scale_rewards", "aggregation", "expected"),
    [
        ("group", "sum_then_normalize", "informative"),  # TRL's default: each group divided by its own std
        (True, "sum_then_normalize", "informative"),  # TRL's older spelling of "group"
        ("batch", "sum_then_normalize", "variance"),  # one std for the whole step
        ("none", "sum_then_normalize", "variance"),  # Dr. GRPO
        (False, "sum_then_normalize", "variance"),
        ("none", "normalize_then_sum", "informative"),  # each reward function normalised within its group
        ("batch", "normalize_then_sum", "informative"),
    ],
)
def test_the_default_objective_matches_the_advantage_scaling(scale_rewards, aggregation, expected):
    """`auto` (the default) is the objective whose value is the expected squared norm of the advantages in use;
    a named objective stays as named."""
    assert PODS_DEFAULTS["allocation_objective"] == "auto"
    assert allocation_objective("auto", scale_rewards, aggregation) == expected
    for named in ("variance", "informative", "knapsack_rl"):
        assert allocation_objective(named, scale_rewards, aggregation) == named
