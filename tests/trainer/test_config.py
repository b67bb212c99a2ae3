import pytest

from pods_rl import PODSConfig


def make(tmp_path, **kwargs) -> PODSConfig:
    defaults = dict(output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to="none")
    return PODSConfig(**{**defaults, **kwargs})


def test_worked_example_counts(tmp_path):
    config = make(
        tmp_path,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_generations=32,
        num_selected=8,
    )
    assert config.generation_batch_size == 16  # one process here: 8 rows * 2 micro-batches
    assert config.generation_batch_size // config.num_selected == 2  # prompts per generation
    assert config.local_pool_size == 64  # rollouts generated per generation
    assert config.num_generations == 32  # TRL's meaning survives the post-init


def test_default_keeps_every_rollout(tmp_path):
    config = make(tmp_path, per_device_train_batch_size=8, num_generations=8)
    assert config.num_selected == 8
    assert config.local_pool_size == 8


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(num_generations=8, num_selected=9), r"2 <= m <= num_generations \(n=8\), got 9"),
        (dict(num_generations=8, num_selected=0), "got 0"),
        (dict(num_generations=8, num_selected=1), "group of one"),
        (dict(num_generations=1, num_selected=1), "num_generations .* must be >= 2, got 1"),
        (dict(num_generations=8, num_selected=4, selection_rule="best"), "selection_rule must be one of"),
        (dict(num_generations=8, num_selected=4, advantage_stats="all"), "advantage_stats must be one of"),
        (
            # Evaluation generates n (not m) per prompt: GRPOConfig rejects an eval batch of 8 with n = 16.
            dict(num_generations=16, num_selected=8, per_device_eval_batch_size=8, eval_strategy="steps"),
            r"eval batch size \(8 \* 1\) must be divisible by the number of generations used for evaluation \(16\)",
        ),
        (
            dict(num_generations=8, num_selected=4, num_generations_eval=3, eval_strategy="steps"),
            r"evaluation \(3\)",
        ),
        (
            dict(per_device_train_batch_size=6, num_generations=8, num_selected=4),
            r"divisible by num_generations \(4\)",
        ),
        (dict(num_generations=8, num_selected=4, selection_budget="global"), "selection_budget must be one of"),
        (dict(num_generations=8, num_selected=4, selection_tie_break="longest"), "selection_tie_break must be one of"),
        (
            dict(num_generations=8, num_selected=4, selection_budget="batch", selection_rule="random"),
            "selection_budget='batch' needs selection_rule='max_variance'",
        ),
        (
            dict(num_generations=8, num_selected=4, selection_tie_break="shortest", selection_rule="max_reward"),
            "selection_tie_break='shortest' needs selection_rule='max_variance'",
        ),
    ],
)
def test_inconsistent_settings_fail_at_construction(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(tmp_path, **{"per_device_train_batch_size": 8, **kwargs})


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(scale_rewards="batch"),
        dict(multi_objective_aggregation="normalize_then_sum"),
        dict(num_generations_eval=4, per_device_eval_batch_size=4, eval_strategy="steps"),
    ],
    ids=lambda kwargs: ",".join(f"{k}={v}" for k, v in kwargs.items()),
)
def test_grpo_options_are_accepted(tmp_path, kwargs):
    config = make(tmp_path, per_device_train_batch_size=8, num_generations=8, num_selected=4, **kwargs)
    for key, value in kwargs.items():
        assert getattr(config, key) == value
    assert config.num_generations_eval == kwargs.get("num_generations_eval")  # None still means "n" to TRL


def test_batch_budget_needs_whole_pools_per_process(tmp_path, monkeypatch):
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: 2))
    kwargs = dict(per_device_train_batch_size=2, num_generations=8, num_selected=4)
    assert make(tmp_path, **kwargs).local_pool_size == 4  # per prompt: each pool of 8 spans both processes
    with pytest.raises(ValueError, match=r"every prompt's pool must lie on one process: .* \(2\) must be a multiple"):
        make(tmp_path, selection_budget="batch", **kwargs)
    config = make(tmp_path, selection_budget="batch", **{**kwargs, "per_device_train_batch_size": 4})
    assert config.generation_batch_size == 8 and config.local_pool_size == 8  # one whole pool per process


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(max_generation_rounds=0), "max_generation_rounds must be >= 1, got 0"),
        (
            dict(per_device_train_batch_size=2),
            r"dynamic_sampling keeps or drops whole pools .* every prompt's pool must lie on one process: .* \(2\)",
        ),
        (
            dict(gradient_accumulation_steps=2, steps_per_generation=1),
            r"steps_per_generation \* num_iterations \(1\) must be a multiple of gradient_accumulation_steps \(2\)",
        ),
        (dict(max_steps=-1, num_train_epochs=3), "dynamic_sampling needs max_steps > 0: its refills use up an epoch"),
    ],
)
def test_dynamic_sampling_settings_are_checked(tmp_path, monkeypatch, kwargs, message):
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: 2))
    settings = dict(
        per_device_train_batch_size=4, num_generations=8, num_selected=4, dynamic_sampling=True, max_steps=9
    )
    assert make(tmp_path, **settings).max_generation_rounds == 3
    with pytest.raises(ValueError, match=message):
        make(tmp_path, **{**settings, **kwargs})
    # Without dynamic sampling only the round count is checked.
    if "max_generation_rounds" not in kwargs:
        make(tmp_path, **{**settings, **kwargs, "dynamic_sampling": False})
