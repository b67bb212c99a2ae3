import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import pods_rl.trainer.config
from pods_rl.cli import app
from pods_rl.run.compare import (
    band,
    first_time_at_least,
    resolve_compare,
    speedup,
    summarize,
    write_comparison,
)
from pods_rl.run.cost_model import CostModel, LinearCost, fit_linear, when_pods_pays

runner = CliRunner()
CONFIGS = Path(__file__).parents[2] / "configs"

QUICK = [
    "--set", "trainer.max_steps=3",
    "--set", "trainer.max_completion_length=24",
    "--set", "task_options.num_train=64",
    "--set", "task_options.num_test=16",
    "--set", "eval.every_seconds=0.001",
]  # fmt: skip


def test_compare_two_arms_writes_comparison(tiny_model_dir, tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", "--model", str(tiny_model_dir), "--output-dir", str(out), "--arm", "grpo", "--arm", "pods"]
    args += ["--seed", "0", "-n", "4", "-m", "2", "--prompts-per-step", "2", "--time-budget", "600", *QUICK]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    comparison = json.loads((out / "comparison.json").read_text())
    assert set(comparison["arms"]) == {"grpo", "pods"}
    for name, (n, rows) in {"grpo": (2, 4), "pods": (4, 4)}.items():
        arm = comparison["arms"][name]
        config = yaml.safe_load((out / name / "seed-0" / "config.yaml").read_text())
        assert config["trainer"]["num_generations"] == n and config["trainer"]["per_device_train_batch_size"] == rows
        assert arm["steps"]["mean"] == 3 and arm["per_step"]["rollouts_generated"] == 2 * n
        assert arm["totals"]["rollouts_trained"] == 3 * 4
        assert set(arm["seconds_per_step"]) == {"generate", "score", "select", "update", "total"}
        for key in ("peak_accuracy", "time_to_target", "speedup", "predicted_seconds_per_step", "curve"):
            assert key in arm
    assert comparison["arms"]["grpo"]["speedup"] in (1.0, None)
    assert comparison["target"]["accuracy"] == pytest.approx(0.99 * max(comparison["arms"]["grpo"]["curve"]["mean"]))
    assert set(comparison["cost_model"]["phases"]) == {"generate", "score", "select", "update"}
    assert "time to target" in (out / "comparison.md").read_text()
    assert (out / "comparison.png").stat().st_size > 1000

    again = runner.invoke(app, ["compare", "--resume", str(out)])  # all runs finished: kept, comparison rewritten
    assert again.exit_code == 0, again.output
    assert "done earlier, kept" in again.output


def test_first_time_at_least():
    times, accuracy = [0, 10, 20, 30], [0.1, 0.5, 0.9, 0.8]
    assert first_time_at_least(times, accuracy, 0.85) == 20
    assert first_time_at_least(times, accuracy, 0.5) == 10
    assert first_time_at_least(times, accuracy, 0.95) is None


def test_speedup():
    assert speedup(100.0, 50.0) == 2.0
    assert speedup(None, 50.0) is None
    assert speedup(100.0, None) is None
    assert speedup(100.0, 0.0) is None


def test_band_interpolates_onto_the_union_of_times():
    curves = [([0, 10, 20], [0.0, 0.4, 0.8]), ([0, 5, 10], [0.2, 0.6, 0.6])]
    result = band(curves)
    assert result["train_seconds"] == [0, 5, 10, 20]
    assert result["mean"] == pytest.approx([0.1, 0.4, 0.5, 0.7])  # the second seed is held at 0.6 after t = 10
    assert result["min"] == pytest.approx([0.0, 0.2, 0.4, 0.6])
    assert result["max"] == pytest.approx([0.2, 0.6, 0.6, 0.8])


def test_fit_linear_is_exact_on_a_line_and_through_zero_on_one_count():
    line = fit_linear([4, 8, 16], [1.4, 1.8, 2.6])
    assert (line.per_rollout, line.constant) == (pytest.approx(0.1), pytest.approx(1.0))
    single = fit_linear([4, 4], [2.0, 2.4])
    assert (single.per_rollout, single.constant) == (pytest.approx(0.55), 0.0)


def test_when_pods_pays():
    zero = LinearCost(0.0, 0.0)
    model = CostModel({"generate": LinearCost(0.1, 1.0), "score": zero, "select": zero, "update": LinearCost(0.2, 1.0)})
    result = when_pods_pays(model, n=16, m=4, prompts=1)
    assert result["seconds_per_step"] == pytest.approx({"grpo": 3.2, "pods": 4.4, "grpo-pool": 6.8})
    assert result["pods_over_grpo"] == pytest.approx(1.375)
    assert result["max_pool_size"] == pytest.approx({"0.25": 12.0, "0.5": 20.0, "1.0": 36.0})


def _run(times: list[float], accuracy: list[float], generated: int, trained: int) -> dict[str, list[dict]]:
    """Synthetic records: phase times exactly linear in the rollout counts."""
    phases = {
        "pods/time_generate": 0.1 * generated + 0.5,
        "pods/time_score": 0.01 * generated,
        "pods/time_select": 0.001 * generated + 0.002,
        "pods/time_update": 0.2 * trained + 1.0,
    }
    counts = {"pods/rollouts_generated": generated, "pods/rollouts_trained": trained}
    tokens = {"pods/tokens_generated": 10 * generated, "pods/tokens_trained": 10 * trained}
    steps = [{"step": i + 1, "train_seconds": t, **phases, **counts, **tokens} for i, t in enumerate(times[1:])]
    evals = [
        {"step": i, "train_seconds": t, "accuracy": a} for i, (t, a) in enumerate(zip(times, accuracy, strict=True))
    ]
    return {"step": steps, "eval": evals}


def test_summarize_on_synthetic_runs(tmp_path):
    settings = resolve_compare(None, [{"n": 8, "m": 2, "prompts_per_step": 2, "seeds": [0, 1]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "grpo-pool", "pods")}
    times = [0, 10, 20, 30]
    records = {
        "grpo": [_run(times, [0.2, 0.4, 0.6, 0.5], 4, 4), _run(times, [0.2, 0.4, 0.6, 0.7], 4, 4)],
        "grpo-pool": [_run(times, [0.2, 0.3, 0.4, 0.5], 16, 16), _run(times, [0.2, 0.3, 0.4, 0.5], 16, 16)],
        "pods": [_run(times, [0.2, 0.6, 0.7, 0.7], 16, 4), _run(times, [0.2, 0.6, 0.5, 0.7], 16, 4)],
    }
    comparison = summarize(settings, records)
    assert comparison["target"]["baseline_peak"] == pytest.approx(0.6)  # peak of grpo's mean curve
    assert comparison["target"]["accuracy"] == pytest.approx(0.594)
    grpo, pool, pods = (comparison["arms"][name] for name in ("grpo", "grpo-pool", "pods"))
    assert (grpo["time_to_target"], grpo["speedup"]) == (20.0, 1.0)
    assert (pods["time_to_target"], pods["speedup"]) == (10.0, 2.0)
    assert (pool["time_to_target"], pool["speedup"]) == (None, None)
    assert pods["time_to_target_per_seed"] == [10.0, 10.0]
    assert pods["peak_accuracy"] == {"mean": 0.7, "std": 0.0, "min": 0.7, "max": 0.7, "per_seed": [0.7, 0.7]}
    assert grpo["peak_accuracy"]["std"] == pytest.approx(0.0707107, rel=1e-5)
    assert pods["seconds_per_step"] == pytest.approx(
        {"generate": 2.1, "score": 0.16, "select": 0.018, "update": 1.8, "total": 4.078}
    )
    assert pods["totals"] == {
        "rollouts_generated": 48,
        "rollouts_trained": 12,
        "tokens_generated": 480,
        "tokens_trained": 120,
    }
    fitted = comparison["cost_model"]["phases"]
    assert fitted["generate"]["per_rollout"] == pytest.approx(0.1)
    assert fitted["generate"]["constant"] == pytest.approx(0.5)
    assert fitted["update"]["per_rollout"] == pytest.approx(0.2)
    assert fitted["update"]["constant"] == pytest.approx(1.0)
    for arm in (grpo, pool, pods):
        assert arm["predicted_seconds_per_step"] == pytest.approx(arm["seconds_per_step"]["total"])
    pays = comparison["cost_model"]["when_pods_pays"]
    assert pays["seconds_per_step"]["pods"] == pytest.approx(pods["seconds_per_step"]["total"])

    write_comparison(tmp_path, comparison)
    markdown = (tmp_path / "comparison.md").read_text()
    assert "| pods | 8 | 2 | max_variance |" in markdown and "not reached" in markdown
    assert (tmp_path / "comparison.png").stat().st_size > 1000
    assert json.loads((tmp_path / "comparison.json").read_text())["arms"]["pods"]["speedup"] == 2.0


def test_resolve_compare_arms_and_batch_sizes(tmp_path):
    config = tmp_path / "compare.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "n": 16,
                "m": 4,
                "prompts_per_step": 2,
                "trainer": {"gradient_accumulation_steps": 2},
                "arms": {"grpo": {"n": "m"}, "grpo-pool": {"m": "n"}, "pods-8": {"n": 8, "rule": "random"}},
            }
        )
    )
    settings = resolve_compare(config, [{"arms": {"grpo": {"trainer": {"beta": 0.04}}}}])
    assert list(settings.arms) == ["grpo", "grpo-pool", "pods-8"]  # the file's arms replace the defaults
    trainers = {name: settings.arm_settings(name, 7).trainer for name in settings.arms}
    assert trainers["grpo"]["beta"] == 0.04 and trainers["pods-8"]["beta"] == 0.0
    sizes = {
        name: (t["num_generations"], t["num_selected"], t["per_device_train_batch_size"])
        for name, t in trainers.items()
    }
    assert sizes == {"grpo": (4, 4, 4), "grpo-pool": (16, 16, 16), "pods-8": (8, 4, 4)}  # 2 prompts / step, 2 micro
    assert settings.arm_settings("pods-8", 7).seed == 7
    assert list(resolve_compare(config, [], only=["grpo"]).arms) == ["grpo"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"trainer": {"num_generations": 8}}, "set per arm"),
        ({"seed": 1}, "seeds"),
        ({"arms": {"x": {"seed": 1}}}, "shares"),
        ({"arms": {"x": {"n": "k"}}}, "integers"),
        ({"n": 4, "m": 8}, "2 <= m <= n"),
        ({"arms": {"x": {"trainer": {"no_such_field": 1}}}}, "unknown key trainer.no_such_field"),
        ({"prompts_per_step": 3, "trainer": {"gradient_accumulation_steps": 2}, "m": 3}, "micro-batches"),
    ],
)
def test_resolve_compare_rejects_bad_settings(tmp_path, data, message):
    config = tmp_path / "compare.yaml"
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=message):
        resolve_compare(config, [])


def test_bad_model_fails_before_any_run(tmp_path):
    result = runner.invoke(app, ["compare", "--model", "no-such-model", "--output-dir", str(tmp_path / "cmp")])
    assert result.exit_code == 2 and "Unknown model" in result.output
    assert not (tmp_path / "cmp").exists()


def test_overwrite_refuses_a_folder_that_holds_no_comparison(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = runner.invoke(app, ["compare", "--output-dir", str(out), "--overwrite", "--arm", "pods"])
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    assert f"{out} holds files but no comparison (no compare.yaml): it is not replaced even with --overwrite" in output
    assert (out / "notes.txt").read_text() == "mine"


def test_overwrite_keeps_the_previous_comparison_when_a_check_fails(tmp_path):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.yaml").write_text("n: 16\n")
    (out / "pods").mkdir()
    (out / "pods" / "marker").write_text("earlier run")
    bad_task = ["--set", "task_options.digitz=3"]  # found when the task loads, the last check
    for bad in (["--model", "no-such-model"], bad_task):
        result = runner.invoke(app, ["compare", "--output-dir", str(out), "--overwrite", "--arm", "pods", *bad])
        assert result.exit_code == 2, result.output
        assert (out / "pods" / "marker").read_text() == "earlier run"


def test_unknown_arm_is_rejected():
    with pytest.raises(ValueError, match="Unknown arm"):
        resolve_compare(None, [], only=["nope"])


@pytest.mark.parametrize(
    "name",
    [
        "compare-tiny.yaml",
        "compare-smollm2.yaml",
        "compare-smollm2-cpu.yaml",
        "compare-smollm2-vllm.yaml",
        "compare-smollm2-3term.yaml",
    ],
)
def test_shipped_compare_configs_resolve(name, monkeypatch):
    monkeypatch.setattr(pods_rl.trainer.config, "vllm_installed", lambda: True)  # the vLLM config's environment
    settings = resolve_compare(CONFIGS / name, [])
    assert {"grpo", "pods"} <= set(settings.arms) and settings.base["time_budget"] > 0
    assert settings.base["eval"]["every_seconds"] > 0


def test_three_term_compare_config_runs_the_papers_sizes():
    settings = resolve_compare(CONFIGS / "compare-smollm2-3term.yaml", [])
    assert {name: settings.arm_sizes(name) for name in settings.arms} == {
        "grpo": (4, 4, "max_variance"),
        "grpo-pool": (16, 16, "max_variance"),
        "pods": (16, 4, "max_variance"),
    }
    assert settings.seeds == [0, 1, 2, 3, 4, 5] and settings.base["time_budget"] == 600
    run = settings.arm_settings("pods", 0)
    assert (run.task, run.task_options, run.eval.every_seconds, run.eval.every_steps) == (
        "arithmetic-3term",
        {},
        30,
        None,
    )
    assert run.trainer["per_device_train_batch_size"] == 8  # 2 prompts x m = 4


def test_budget_compare_config_runs_equal_steps_with_the_new_options():
    settings = resolve_compare(CONFIGS / "compare-budget.yaml", [])
    trainers = {name: settings.arm_settings(name, 0).trainer for name in settings.arms}
    assert trainers["pods-batch"]["selection_budget"] == "batch"
    assert trainers["pods-shortest"]["selection_tie_break"] == "shortest"
    assert trainers["pods"].get("selection_budget", "per_prompt") == "per_prompt"
    assert settings.base["time_budget"] is None and {t["max_steps"] for t in trainers.values()} == {30}
    assert {t["per_device_train_batch_size"] for t in trainers.values()} == {64}
