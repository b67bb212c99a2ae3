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


ALLOCATION = dict(per_device_train_batch_size=8, num_generations=8, num_selected=4, max_steps=5)  # 2 prompts, 8 rows


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(rollout_allocation="adaptive"), r"rollout_allocation must be one of \('none', 'screen', 'history'\)"),
        (dict(rollout_allocation="screen"), "rollout_allocation='screen' needs screen_size"),
        (
            dict(rollout_allocation="screen", screen_size=8),
            r"screen_size must satisfy 2 <= screen_size < num_generations \(n=8\), got 8",
        ),
        (dict(rollout_allocation="screen", screen_size=1), "got 1: the screen is the first part of a pool"),
        (
            dict(rollout_allocation="screen", screen_size=2, screen_pass_rate_band=[0.8, 0.2]),
            r"screen_pass_rate_band must be \[low, high\] with 0 <= low <= high <= 1, got \[0.8, 0.2\]",
        ),
        (dict(screen_size=2), "screen_size is an option of rollout_allocation='screen', got rollout_allocation='none'"),
        (
            dict(rollout_allocation="screen", screen_size=2, history_decay=0.5),
            "history_decay is an option of rollout_allocation='history', got rollout_allocation='screen'",
        ),
        (dict(success_threshold=1.0), "success_threshold is an option of rollout_allocation='screen' or 'history'"),
        (
            dict(rollout_allocation="history", history_exploration=1.5),
            r"history_exploration must be a probability in \[0, 1\], got 1.5",
        ),
        (
            dict(rollout_allocation="history", history_exploration=-0.1),
            r"history_exploration must be a probability in \[0, 1\], got -0.1",
        ),
        (dict(rollout_allocation="history", history_decay=0.0), r"history_decay must be in \(0, 1\]"),
        (dict(rollout_allocation="history", history_prior_failures=0.0), "history_prior_failures .* must be > 0"),
        (dict(rollout_allocation="history", allocation_objective="gain"), "allocation_objective must be one of"),
        (
            dict(rollout_allocation="history", selection_rule="random"),
            "rollout_allocation='history' needs selection_rule='max_variance'",
        ),
        (
            dict(rollout_allocation="history", max_rollouts_per_prompt=3),
            r"max_rollouts_per_prompt must be >= num_selected \(m=4\)",
        ),
        (
            dict(rollout_allocation="history", generation_budget=7),
            r"generation_budget \(7\) is below the rows trained per generation \(8\)",
        ),
        (
            dict(rollout_allocation="history", generation_budget=17),
            r"generation_budget \(17\) exceeds what the 2 prompts of a generation can take \(2 x "
            r"max_rollouts_per_prompt 8 = 16\)",
        ),
        (
            dict(rollout_allocation="history", success_threshold=float("inf")),
            "success_threshold must be a finite number or None",
        ),
        (
            dict(rollout_allocation="history", gradient_accumulation_steps=2, steps_per_generation=1),
            r"rollout_allocation='history' draws further generation batches at the start of an optimizer step",
        ),
    ],
)
def test_allocation_settings_are_checked(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(tmp_path, **{**ALLOCATION, **kwargs})


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(rollout_allocation="screen", screen_size=2),
        dict(rollout_allocation="screen", screen_size=7, screen_pass_rate_band=[0.1, 0.9], success_threshold=None),
        dict(rollout_allocation="history"),
        dict(
            rollout_allocation="history",
            generation_budget=8,
            max_rollouts_per_prompt=32,
            allocation_objective="informative",
            history_exploration=0.0,
            history_prior_successes=0.5,
            history_prior_failures=0.5,
            history_decay=0.5,
        ),
        dict(rollout_allocation="history", generation_budget=64, max_rollouts_per_prompt=32),
        dict(rollout_allocation="history", allocation_objective="knapsack_rl"),
    ],
    ids=lambda kwargs: ",".join(f"{k}={v}" for k, v in kwargs.items()),
)
def test_allocation_settings_are_accepted_and_off_by_default(tmp_path, kwargs):
    config = make(tmp_path, **{**ALLOCATION, **kwargs})
    for key, value in kwargs.items():
        assert getattr(config, key) == value
    assert make(tmp_path, **ALLOCATION).rollout_allocation == "none"


def test_generation_budget_is_shared_by_the_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(PODSConfig, "world_size", property(lambda self: 2))
    settings = dict(ALLOCATION, rollout_allocation="history")
    assert make(tmp_path, **settings, generation_budget=24).generation_budget == 24  # 4 prompts, 16 rows in all
    with pytest.raises(ValueError, match=r"generation_budget \(15\) is below the rows trained per generation \(16\)"):
        make(tmp_path, **settings, generation_budget=15)
    with pytest.raises(ValueError, match=r"generation_budget \(25\) must be divisible by the 2 processes"):
        make(tmp_path, **settings, generation_budget=25)
    with pytest.raises(
        ValueError,
        match=r"rollout_allocation='history' plans each process's prompts on that process, so every prompt's pool "
        r"must lie on one process: .* \(2\) must be a multiple of num_selected \(4\)",
    ):
        make(tmp_path, **{**settings, "per_device_train_batch_size": 2})


def test_allocation_with_tools_is_refused_before_the_model_loads(tmp_path):
    """Allocation generates its own calls of the pool: tools and environments are refused in one line, before
    anything loads (the model here is a name that would fail to load)."""
    from pods_rl import PODSTrainer

    args = make(tmp_path, **ALLOCATION, rollout_allocation="screen", screen_size=2)
    with pytest.raises(ValueError, match=r"rollout_allocation='screen' supports neither tools nor environment_factory"):
        PODSTrainer(model="no/such-model", reward_funcs=[], args=args, tools=[len])


def test_the_largest_generation_call_sizes_the_vllm_engine(tmp_path):
    """A colocated vLLM engine is sized to the most rows one call generates: the pool, or a history budget's share."""
    from pods_rl.trainer.vllm import pool_rows_per_engine

    plain = make(tmp_path, **ALLOCATION)
    assert plain.largest_generation_call == plain.local_pool_size == 16  # 2 prompts x n = 8
    history = make(
        tmp_path, **ALLOCATION, rollout_allocation="history", generation_budget=24, max_rollouts_per_prompt=16
    )
    assert history.largest_generation_call == pool_rows_per_engine(history) == 24
