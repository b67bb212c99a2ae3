import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from compare_fakes import fake_pods_train, synthetic_run
from rich.console import Console
from typer.testing import CliRunner

import pods_rl.versions
from pods_rl.cli import app
from pods_rl.compare import render as compare_report
from pods_rl.compare import runner as compare_runner
from pods_rl.compare import settings as settings_module
from pods_rl.compare import tuning as compare_tuning
from pods_rl.compare.cost_model import CostModel, LinearCost, fit_linear, when_pods_pays
from pods_rl.compare.measures import (
    difference_text,
    speedup_text,
    summarize,
)
from pods_rl.compare.render import comparison_markdown, write_comparison
from pods_rl.compare.runner import plan_table
from pods_rl.compare.settings import resolve_compare
from pods_rl.compare.statistics import seeds_to_resolve

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
    args += ["--set", "target_accuracy=0.01"]  # three steps gain nothing here: a target no run reaches
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    comparison = json.loads((out / "comparison.json").read_text())
    assert set(comparison["arms"]) == {"grpo", "pods"}
    for name, (n, rows) in {"grpo": (2, 4), "pods": (4, 4)}.items():
        arm = comparison["arms"][name]
        config = yaml.safe_load((out / name / "seed-0" / "config.yaml").read_text())
        assert config["trainer"]["num_generations"] == n and config["trainer"]["per_device_train_batch_size"] == rows
        assert config["trainer"]["bf16"] is False  # no accelerator here: every arm in one precision, fp32
        assert arm["steps"]["mean"] == 3 and arm["per_step"]["rollouts_generated"] == 2 * n
        assert arm["totals"]["rollouts_trained"] == 3 * 4
        assert set(arm["seconds_per_step"]) == {"generate", "score", "select", "update", "total"}
        for key in ("peak_accuracy", "time_to_target", "vs_baseline", "predicted_seconds_per_step", "curve"):
            assert key in arm
        assert [(e["step"], e["train_seconds"]) for e in arm["evaluations"][0]][-1] == (3, arm["train_seconds"]["mean"])
    assert comparison["arms"]["grpo"]["vs_baseline"] is None
    assert comparison["arms"]["pods"]["vs_baseline"]["speedup_per_seed"] == [
        {"estimate": None, "low": None, "high": None, "verdict": "neither reached"}
    ]
    assert comparison["target"]["accuracy"] == 0.01 and comparison["target"]["fraction"] is None
    assert comparison["verdicts"]["pods"]["time_to_target"] == "not resolved"
    assert set(comparison["cost_model"]["phases"]) == {"generate", "score", "select", "update"}
    assert "time to target" in (out / "comparison.md").read_text()
    assert (out / "comparison.png").stat().st_size > 1000

    again = runner.invoke(app, ["compare", "--resume", str(out)])  # all runs finished: kept, comparison rewritten
    assert again.exit_code == 0, again.output
    assert "done earlier, kept" in again.output


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


def test_summarize_on_synthetic_runs(tmp_path):
    only = ["grpo", "grpo-pool", "pods"]
    settings = resolve_compare(None, [{"n": 8, "m": 2, "prompts_per_step": 2, "seeds": [0, 1]}], only=only)
    times = [0, 10, 20, 30]
    records = {
        "grpo": [synthetic_run(times, [0.2, 0.4, 0.6, 0.5], 4, 4), synthetic_run(times, [0.2, 0.4, 0.6, 0.7], 4, 4)],
        "grpo-pool": [
            synthetic_run(times, [0.2, 0.3, 0.4, 0.5], 16, 16),
            synthetic_run(times, [0.2, 0.3, 0.4, 0.5], 16, 16),
        ],
        "pods": [synthetic_run(times, [0.2, 0.6, 0.7, 0.7], 16, 4), synthetic_run(times, [0.2, 0.6, 0.5, 0.7], 16, 4)],
    }
    comparison = summarize(settings, records)
    # The target: 75% of grpo's gain. Base (0.2 + 0.2) / 2; plateau: each curve's mean over the last quarter of the
    # 30 s window (22.5-30 s): (0.575 + 0.5) / 2 and (0.625 + 0.7) / 2, so 0.6; target 0.2 + 0.75 x 0.4 = 0.5.
    assert comparison["target"] == {
        "accuracy": pytest.approx(0.5),
        "fraction": 0.75,
        "base": pytest.approx(0.2),
        "plateau": pytest.approx(0.6),
        "of": None,
        "baseline": "grpo",
    }
    assert [t["fraction"] for t in comparison["targets"]] == [0.5, 0.75, 0.9]
    grpo, pool, pods = (comparison["arms"][name] for name in ("grpo", "grpo-pool", "pods"))
    # grpo crosses 0.5 in [10, 20] at 15 s on both seeds; pods in [0, 10] at 7.5 s; grpo-pool at its last, 30 s.
    assert [(t["below"], t["reached"], t["crossing"]) for t in grpo["time_to_target"]] == [(10, 20, 15.0)] * 2
    assert [t["crossing"] for t in pods["time_to_target"]] == pytest.approx([7.5, 7.5])
    assert [t["crossing"] for t in pods["steps_to_target"]] == pytest.approx([0.75, 0.75])  # evaluations at steps 0-3
    versus = pods["vs_baseline"]
    first = versus["speedup_per_seed"][0]
    # 15 / 7.5; at least 10 / 10, at most unbounded (pods may have got there right after its start); the brackets
    # [0, 10] and [10, 20] touch, and a crossing is after its bracket's start: faster whatever happened between.
    assert (first["estimate"], first["low"], first["high"], first["verdict"]) == (2.0, 1.0, None, "faster")
    assert pool["vs_baseline"]["speedup_per_seed"][0] == {
        "estimate": 0.5,
        "low": 10 / 30,
        "high": 1.0,
        "verdict": "slower",
    }
    time = versus["time_to_target"]
    # Two seeds: C(4, 2) = 6 splits, of which pods-first and grpo-first are as extreme as the observed: p = 2 / 6,
    # the smallest two seeds allow, so no interval excludes anything. The statistic changes sign at 15 / 7.5 = 2.
    assert (time["p_value"], time["least_p_value"], time["direction"]) == (
        pytest.approx(1 / 3),
        pytest.approx(1 / 3),
        "faster",
    )
    assert (time["estimate"], time["low"], time["high"]) == (pytest.approx(2.0, rel=0.005), 0.0, None)
    assert versus["steps_to_target"]["estimate"] == pytest.approx(2.0, rel=0.005)
    assert versus["sign_across_targets"] == {"time_to_target": "faster", "steps_to_target": "faster"}
    # Areas over 0-30 s: grpo 3 + 5 + 5.5 and 3 + 5 + 6.5; pods 4 + 6.5 + 7 and 4 + 5.5 + 6.
    assert versus["mean_accuracy_difference_per_seed"] == pytest.approx([4 / 30, 1 / 30])
    assert versus["mean_accuracy_difference"]["p_value"] == pytest.approx(0.3440417392452)  # t = 2.5 / 1.5, 1 df
    assert comparison["verdicts"] == {
        name: {"time_to_target": "not resolved", "steps_to_target": "not resolved", "mean_accuracy": "not resolved"}
        for name in ("grpo-pool", "pods")
    }
    # One question per arm: the primary time to target of two arms, Holm over both: 2 x 1/3; steps to target and the
    # window mean are secondary, with their own p-values unadjusted.
    family = comparison["method"]["family"]
    assert (family["tests"], family["primary"], family["secondary"]) == (
        2,
        "time_to_target",
        ["steps_to_target", "mean_accuracy"],
    )
    assert versus["adjusted_p_values"] == {
        "time_to_target": pytest.approx(2 / 3),
        "steps_to_target": None,
        "mean_accuracy": None,
    }
    assert versus["roles"] == {
        "time_to_target": "primary",
        "steps_to_target": "secondary",
        "mean_accuracy": "secondary",
    }
    projections = versus["projections"]
    # Measured: pods 4.078 s a step (2.1 + 0.16 + 0.018 + 1.8), grpo 2.746 s: 2.0 / 1.485. The H200's step at
    # 16 x the rows (64 trained): grpo 7.836 + 64 x 4.865 ms + 64 x 7.83 ms = 8.648 s, pods with 256 generated 9.583 s.
    assert projections["this machine, measured"]["step_cost_ratio"] == pytest.approx(4.078 / 2.746)
    assert projections["this machine, measured"]["estimate"] == pytest.approx(2.0 * 2.746 / 4.078, rel=0.005)
    assert projections["H200 (0.5B)"]["step_cost_ratio"] == pytest.approx(9.58256 / 8.64848)
    assert projections["paper (L40S)"]["high"] is None  # the steps interval is open, and so is its projection
    assert pool["vs_baseline"]["projections"]["paper (L40S)"]["step_cost_ratio"] is None  # trains 4x the rows
    # A user's step cost (cost_models), at 8 trained rollouts for the baseline (2x its 4): grpo 2 + 0.01 x 8 +
    # 0.02 x 8 = 2.24 s, pods 2 + 0.01 x 32 + 0.02 x 8 = 2.48 s.
    settings.cost_models = [
        {"name": "my GPU", "per_step": 2.0, "per_generated": 0.01, "per_trained": 0.02, "trained_per_step": 8}
    ]
    mine = summarize(settings, records)["arms"]["pods"]["vs_baseline"]["projections"]["my GPU"]
    assert mine["step_cost_ratio"] == pytest.approx(2.48 / 2.24) and mine["source"] == "given in the settings"
    settings.cost_models = None
    assert grpo["vs_baseline"] is None
    assert pods["peak_accuracy"] == {"mean": 0.7, "std": 0.0, "min": 0.7, "max": 0.7, "per_seed": [0.7, 0.7]}
    assert grpo["peak_accuracy"]["std"] == pytest.approx(0.0707107, rel=1e-5)
    warnings = " ".join(comparison["warnings"])
    assert "grpo-pool reaches the target at its first evaluation" not in warnings
    assert "pods reaches the target at its first evaluation on seed(s) 0 (10.0), 1 (10.0)" in warnings
    assert (
        "With 2 seed(s) per arm and 2 arm(s) against the baseline, the smallest p-value the primary time to target can "
        "reach after Holm's adjustment over the arms is 0.667, above 0.05: none can be resolved, however large; it "
        "takes at least 5 seeds per arm." in warnings
    )
    assert comparison["summary"][1].startswith(
        "pods vs grpo: time to target 2.00x (95% interval 0-∞x), reached by 2 of 2 pods and 2 of 2 grpo runs: not "
        "resolved (primary, Holm p 0.667; the interval bounds it on neither side); faster at every target "
        "(50%/75%/90% of the gain); by curve fits"
    )
    assert (
        "in steps 2.00x (95% interval 0-∞x): not resolved (secondary, p 0.333 unadjusted; the interval bounds it on "
        "neither side)" in comparison["summary"][1]
    )
    assert comparison["summary"][-1] == (
        "Target: 75% of grpo's gain (20.0% -> 60.0%): 50.0%. Verdicts: one primary question per arm, time to target, "
        "at the 5% level after Holm's adjustment over the 2 arm(s)' primary tests; steps to target and mean accuracy "
        "are secondary, each at 5% unadjusted; the intervals are 95% per comparison, unadjusted."
    )
    assert pods["seconds_per_step"] == pytest.approx(
        {"generate": 2.1, "score": 0.16, "select": 0.018, "update": 1.8, "total": 4.078}
    )
    assert (pods["rollouts_per_trained_row"], grpo["rollouts_per_trained_row"]) == (4, 1)
    assert pods["dynamic_sampling"] is None
    assert pods["seconds_per_evaluation"] == pytest.approx(3.5)  # 2, 3, 4, 5 s per evaluation
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
    assert "| pods | 8 | 2 | max_variance |" in markdown
    assert (
        "| pods | 2.00x (0-∞x) | 2 / 2 of 2 | not resolved (primary, Holm p 0.667; the interval bounds it on neither "
        "side) | 2.00x (0-∞x) | not resolved (secondary, p 0.333 unadjusted; the interval bounds it on neither side) | "
        in markdown
    )
    assert (
        "| +8.3 points (-55.2 to +71.9) | not resolved (secondary, p 0.344 unadjusted; the interval bounds it within "
        "-55.2 to +71.9 points) |" in markdown
    )
    assert "| pods | 16 | 4 | 4.00 | — | — | — | 48 | 12 | 480 | 120 |" in markdown
    assert "| grpo | 0 | 3 | 30 | 60.0 | 15.0 [10, 20] | 1.5 [1, 2] | baseline | baseline |" in markdown
    assert "| pods | 0 | 3 | 30 | 70.0 | 7.5 [0, 10] | 0.8 [0, 1] | 2.00x [1.00, ∞], faster | +13.3 |" in markdown
    assert "| grpo-pool | 1 | 3 | 30 | 50.0 | 30.0 [20, 30] | 3.0 [2, 3] | 0.50x [0.33, 1.00], slower |" in markdown
    assert comparison["summary"][1] in markdown
    assert (tmp_path / "comparison.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved["arms"]["pods"]["evaluations"] == [run["eval"] for run in records["pods"]]  # the raw per-seed data


def test_one_seed_and_a_censored_baseline_are_reported_without_a_false_figure(tmp_path):
    """One seed gave '95% interval 0.00-∞x' (0.0 where None was meant) and crashed arm_vs_arms.py; the censoring
    warning named the arm's bound for the baseline. Now: no interval, no verdict, strict JSON, the baseline named."""
    settings = resolve_compare(None, [{"n": 4, "m": 2, "prompts_per_step": 2, "seeds": [0]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "pods")}
    times = [0, 10, 20, 30, 40]
    records = {
        "grpo": [synthetic_run(times, [0.2, 0.4, 0.6, 0.6, 0.5], 4, 4)],
        "pods": [synthetic_run(times, [0.2, 0.6, 0.7, 0.7, 0.7], 8, 4)],
    }
    comparison = summarize(settings, records)
    versus = comparison["arms"]["pods"]["vs_baseline"]
    assert (versus["time_to_target"]["low"], versus["time_to_target"]["high"]) == (0.0, None)
    assert versus["time_to_target"]["least_p_value"] == 1.0 and versus["mean_accuracy_difference"]["low"] is None
    assert comparison["verdicts"]["pods"] == dict.fromkeys(
        ("time_to_target", "steps_to_target", "mean_accuracy"), "not resolved"
    )
    assert "(no interval from one seed)" in comparison["summary"][0]
    write_comparison(tmp_path, comparison)  # strict JSON: raises on NaN or Infinity
    saved = json.loads((tmp_path / "comparison.json").read_text())
    script = Path(__file__).parents[2] / "benchmarks" / "arm_vs_arms.py"
    shown = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "| grpo | " in shown.stdout and "(no interval from one seed)" in shown.stdout
    # A baseline seed that never reaches an absolute target: the warning names the baseline as such.
    absolute = resolve_compare(None, [{"n": 4, "m": 2, "prompts_per_step": 2, "seeds": [0], "target_accuracy": 0.65}])
    absolute.arms = settings.arms
    warnings = summarize(absolute, records)["warnings"]
    assert (
        "grpo (the baseline): 1 of 1 seed(s) never reached the target; the speedup tests rank such a run after every "
        "run that reached it, and a seed where neither arm reached it counts for neither." in warnings
    )
    assert saved["target"]["fraction"] == 0.75


def test_summarize_prices_dynamic_samplings_refills():
    settings = resolve_compare(None, [{"n": 4, "m": 4, "prompts_per_step": 2, "seeds": [0, 1]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "grpo-ds")}
    times = [0, 10, 20]
    # grpo-ds: 2 rounds a step on seed 0 (4 prompts, half dropped), 3 on seed 1 (6 prompts, 4 dropped); each round
    # generates 2 prompts x 4 rollouts, and 8 rows are trained a step.
    refills = [
        {"generation_rounds": [2, 2], "prompts_generated": [4, 4], "groups_dropped_frac": [0.5, 0.5]},
        {"generation_rounds": [3, 3], "prompts_generated": [6, 6], "groups_dropped_frac": [2 / 3, 2 / 3]},
    ]
    records = {
        "grpo": [synthetic_run(times, [0.2, 0.4, 0.6], 8, 8) for _ in range(2)],
        "grpo-ds": [
            synthetic_run(times, [0.2, 0.5, 0.6], 16, 8, refills[0]),
            synthetic_run(times, [0.2, 0.5, 0.6], 24, 8, refills[1]),
        ],
    }
    comparison = summarize(settings, records)
    ds = comparison["arms"]["grpo-ds"]
    assert ds["dynamic_sampling"] == pytest.approx(
        {"generation_rounds": 2.5, "prompts_generated": 5, "groups_dropped_frac": (0.5 + 2 / 3) / 2}
    )
    assert ds["rollouts_per_trained_row"] == pytest.approx(20 / 8)  # 16 and 24 generated a step; 8 trained
    assert comparison["arms"]["grpo"]["dynamic_sampling"] is None


EPYC = {
    "cpu": "AMD EPYC",
    "cpu_family": "26",
    "cpu_model": "2",
    "instruction_set": "AVX-512",
    "cores": 2,
    "accelerator": None,
}
XEON = {**EPYC, "cpu": "Intel Xeon", "cpu_family": "6", "cpu_model": "143"}


def test_summarize_names_the_machines_and_warns_when_a_seeds_arms_ran_on_different_ones():
    settings = resolve_compare(None, [{"n": 4, "m": 2, "prompts_per_step": 2, "seeds": [0, 1]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "pods")}
    times = [0, 10, 20]

    def runs(*machines):
        return [{**synthetic_run(times, [0.2, 0.4, 0.6], 8, 4), "machine": machine} for machine in machines]

    epyc, xeon = "AMD EPYC (family 26 model 2), AVX-512, 2 cores", "Intel Xeon (family 6 model 143), AVX-512, 2 cores"
    one = summarize(settings, {"grpo": runs(EPYC, EPYC), "pods": runs(EPYC, EPYC)})
    assert one["machines"] == {epyc: 4}
    assert not [w for w in one["warnings"] if "machine" in w]
    assert f"Machine: {epyc} (4 runs)." in comparison_markdown(one)

    by_seed = summarize(settings, {"grpo": runs(EPYC, XEON), "pods": runs(EPYC, XEON)})
    assert [w for w in by_seed["warnings"] if "machine" in w] == [
        f"The seeds ran on 2 machines ({epyc}: 2 runs; {xeon}: 2 runs); each seed's arms share one, so per-seed "
        "speedups hold, but pooled seconds (per step, per evaluation, the curves' time axis) mix CPUs."
    ]
    mixed = summarize(settings, {"grpo": runs(EPYC, XEON), "pods": runs(EPYC, None)})
    assert [w for w in mixed["warnings"] if "machine" in w] == [
        f"The arms of seed 1 ({xeon}; not recorded) ran on different machines: those seeds' times and speedups "
        "compare seconds from different CPUs. Rerun them on one machine."
    ]


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


def test_every_arm_trains_in_one_precision(tmp_path, monkeypatch):
    """Without an accelerator, an arm whose settings do not name a precision trains in fp32 (pods train would measure
    each arm's own step and could choose bf16 for some); a precision the comparison sets is every arm's. A run saved
    before precision was chosen (no trainer.bf16 in its config) counts as the planned fp32 run, not as changed."""
    config = tmp_path / "compare.yaml"
    config.write_text(yaml.safe_dump({"n": 4, "m": 2, "prompts_per_step": 2, "arms": {"grpo": {"n": "m"}}}))
    planned = resolve_compare(config, []).arm_settings("grpo", 0)
    assert "bf16" not in planned.trainer
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.setattr("torch.accelerator.is_available", lambda: False)
    assert compare_runner.one_precision(planned).trainer["bf16"] is False
    forced = resolve_compare(config, [{"trainer": {"bf16": True}}]).arm_settings("grpo", 0)
    assert compare_runner.one_precision(forced).trainer["bf16"] is True
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    assert "bf16" not in compare_runner.one_precision(planned).trainer  # a GPU: TRL's default, the same for all
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    old = planned.to_dict()  # saved by an earlier version: no trainer.bf16
    (run_dir / "config.yaml").write_text(yaml.safe_dump(old))
    assert compare_runner._changed_settings(run_dir, planned) == []
    (run_dir / "config.yaml").write_text(yaml.safe_dump({**old, "trainer": {**old["trainer"], "bf16": True}}))
    assert compare_runner._changed_settings(run_dir, planned) == ["trainer.bf16"]


def test_dynamic_sampling_arms(tmp_path):
    """grpo-ds trains n = m with dynamic sampling, pods-ds filters then down-samples n -> m; both build a valid
    PODSConfig from the built-in comparison."""
    settings = resolve_compare(None, [], only=["grpo-ds", "pods-ds"])
    configs = {name: settings.arm_settings(name, 0).trainer_config(tmp_path / name) for name in settings.arms}
    sizes = {name: (c.num_generations, c.num_selected, c.dynamic_sampling) for name, c in configs.items()}
    assert sizes == {"grpo-ds": (4, 4, True), "pods-ds": (16, 4, True)}


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
        ({"target": 0.99}, r"'target' \(a fraction of the baseline's peak\) is replaced by 'target_gain'"),
        ({"target_gain": 1.5}, "fractions of the baseline's gain in"),
        ({"target_gains": [0.5, 0]}, "fractions of the baseline's gain in"),
        ({"cost_models": [{"name": "gpu", "per_step": 1.0}]}, "is not a step cost"),
    ],
)
def test_resolve_compare_rejects_bad_settings(tmp_path, data, message):
    config = tmp_path / "compare.yaml"
    config.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match=message):
        resolve_compare(config, [])


def test_the_plan_says_when_its_seeds_cannot_resolve_a_time_to_target(tmp_path, monkeypatch):
    monkeypatch.setattr("pods_rl.compare.power.COMPARISONS", 10)  # the dry run's power: not what is tested here
    monkeypatch.setattr("pods_rl.compare.power.MOST_SEEDS", 6)
    base = ["compare", "--dry-run", "--output-dir", str(tmp_path / "cmp"), "--arm", "grpo", "--arm", "pods"]
    few = runner.invoke(app, [*base, "--set", "seeds=[0, 1, 2]"])
    assert few.exit_code == 0, few.output
    assert "smallest p-value the primary time to target can reach after Holm's adjustment over the arms is 0.1" in (
        " ".join(few.output.split())
    )
    assert "it takes at least 4 seeds per arm" in " ".join(few.output.split())
    enough = runner.invoke(app, [*base, "--set", "seeds=[0, 1, 2, 3]"])
    assert enough.exit_code == 0 and "smallest p-value" not in enough.output and not (tmp_path / "cmp").exists()


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


def test_default_arms_are_grpo_pods_and_dynamic_sampling_with_seeds_that_can_resolve_them():
    """Without a config's arms or --arm: GRPO, PODS and both with dynamic sampling, on as many seeds as a time to
    target needs to be resolvable after Holm; the ablations run when named or changed by an override."""
    settings = resolve_compare(None, [])
    assert list(settings.arms) == ["grpo", "pods", "grpo-ds", "pods-ds"]
    assert len(settings.seeds) == seeds_to_resolve(len(settings.arms) - 1) == 5  # one primary test per arm
    assert list(resolve_compare(None, [], only=["grpo", "grpo-pool"]).arms) == ["grpo", "grpo-pool"]
    changed = resolve_compare(None, [{"arms": {"pods-random": {"trainer": {"beta": 0.04}}, "pods-8": {"n": 8}}}])
    assert list(changed.arms) == ["grpo", "pods", "pods-random", "grpo-ds", "pods-ds", "pods-8"]


def test_async_arms(monkeypatch):
    """grpo-async, pods-async and pods-ds-async are the GRPO, PODS and PODS-with-dynamic-sampling arms trained
    asynchronously; where vLLM is missing, or on a CPU without LoRA, the comparison stops in one line before any run."""
    import importlib.util

    import pods_rl.versions

    arms = ["grpo-async", "pods-async", "pods-ds-async"]
    with pytest.raises(ValueError, match="arm 'grpo-async': asynchronous training needs vllm"):
        resolve_compare(None, [], only=arms)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "aiohttp" else real(name, *a))
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: True)
    with pytest.raises(ValueError, match=r"arm 'grpo-async': asynchronous training on a CPU .* add --lora-r 8"):
        resolve_compare(None, [], only=arms)
    settings = resolve_compare(None, [{"lora": {"r": 8}}], only=arms)
    runs = {name: settings.arm_settings(name, 0) for name in arms}
    assert all(run.asynchronous is not None and run.asynchronous.max_staleness == 2 for run in runs.values())
    sizes = {name: (run.trainer["num_generations"], run.trainer["num_selected"], run.trainer.get("dynamic_sampling"))
             for name, run in runs.items()}  # fmt: skip
    assert sizes == {"grpo-async": (4, 4, None), "pods-async": (16, 4, None), "pods-ds-async": (16, 4, True)}


def test_unknown_arm_is_rejected():
    with pytest.raises(ValueError, match="Unknown arm"):
        resolve_compare(None, [], only=["nope"])


@pytest.mark.parametrize(
    "name",
    [
        "compare-tiny.yaml",
        "compare-smollm2.yaml",
        "compare-smollm2-cpu.yaml",
        "compare-smollm2-sums.yaml",
        "compare-smollm2-3term.yaml",
        "compare-allocation-tiny.yaml",
        "compare-allocation-3term.yaml",
        "compare-map-tiny.yaml",
        "compare-smollm2-answer.yaml",
    ],
)
def test_shipped_compare_configs_resolve(name, monkeypatch):
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: True)  # the vLLM config's environment
    settings = resolve_compare(CONFIGS / name, [])
    assert {"grpo", "pods"} <= set(settings.arms)
    if settings.clock == "seconds":
        assert settings.base["time_budget"] > 0 and settings.base["eval"]["every_seconds"] > 0
    else:  # a budget and an evaluation grid in steps
        assert 0 < settings.base["eval"]["every_steps"] <= settings.base["trainer"]["max_steps"] < 1_000_000


def test_the_smollm2_answer_trains_each_arm_at_its_rate_from_allocation_3term_in_fp32():
    settings = resolve_compare(CONFIGS / "compare-smollm2-answer.yaml", [])
    assert settings.lr_grid is None and len(settings.seeds) == 16
    for arm, rate in (("grpo", 1e-5), ("pods", 2e-5)):
        run = settings.arm_settings(arm, 0)
        assert run.trainer["learning_rate"] == rate and run.trainer["bf16"] is False


def test_three_term_compare_config_runs_the_papers_sizes():
    settings = resolve_compare(CONFIGS / "compare-smollm2-3term.yaml", [])
    assert {name: settings.arm_sizes(name) for name in settings.arms} == {
        "grpo": (4, 4, "max_variance"),
        "grpo-pool": (16, 16, "max_variance"),
        "pods": (16, 4, "max_variance"),
        "grpo-ds": (4, 4, "max_variance"),
        "pods-ds": (16, 4, "max_variance"),
    }
    assert settings.seeds == [0, 1, 2, 3, 4, 5] and settings.base["time_budget"] == 600
    assert (settings.lr_grid, settings.tuning_seeds) == ([1.25e-6, 2.5e-6, 5e-6, 1e-5, 2e-5], [100])
    run = settings.arm_settings("pods", 0, 1e-5)
    assert (run.task, run.task_options, run.eval.every_seconds, run.eval.every_steps) == (
        "arithmetic-3term",
        {},
        150,
        None,
    )
    assert run.trainer["per_device_train_batch_size"] == 16  # 4 prompts x m = 4
    assert run.eval.batch_size == 16  # evaluation waves no larger than GRPO 4/4's engine decodes at once
    pool = settings.arm_settings("grpo-pool", 0, 1e-5).trainer  # 4 x 16 rows in micro-batches of 16, as the others'
    assert (pool["per_device_train_batch_size"], pool["gradient_accumulation_steps"]) == (16, 4)
    assert (run.trainer["learning_rate"], run.trainer["temperature"]) == (1e-5, 0.5)
    dynamic = {name: settings.arm_settings(name, 0).trainer.get("dynamic_sampling", False) for name in settings.arms}
    assert dynamic == {"grpo": False, "grpo-pool": False, "pods": False, "grpo-ds": True, "pods-ds": True}


@pytest.mark.parametrize(
    ("name", "arms"),
    [
        (
            "compare-allocation-tiny.yaml",
            {"pods-screen": "screen", "pods-history": "history", "grpo-history": "history"},
        ),
        ("compare-allocation-3term.yaml", {"pods-screen": "screen", "grpo-screen": "screen"}),
    ],
)
def test_allocation_compare_configs_race_allocation_against_grpo_pods_and_dynamic_sampling(name, arms):
    settings = resolve_compare(CONFIGS / name, [])
    assert {"grpo", "pods", "grpo-ds", "pods-ds"} | set(arms) == set(settings.arms)
    assert len(settings.seeds) >= seeds_to_resolve(len(settings.arms) - 1)
    assert set(settings.tuning_seeds).isdisjoint(settings.seeds) and len(settings.lr_grid) >= 3
    trainers = {arm: settings.arm_settings(arm, 0).trainer for arm in settings.arms}
    assert {arm: t.get("rollout_allocation", "none") for arm, t in trainers.items()} == {
        arm: arms.get(arm, "none") for arm in settings.arms
    }
    # Every arm trains the same rows a step: GRPO's n = m = 4 rows of each of the step's prompts.
    assert {t["per_device_train_batch_size"] for t in trainers.values()} == {settings.prompts_per_step * settings.m}


def test_budget_compare_config_runs_equal_steps_with_the_new_options():
    settings = resolve_compare(CONFIGS / "compare-budget.yaml", [])
    trainers = {name: settings.arm_settings(name, 0).trainer for name in settings.arms}
    assert trainers["pods-batch"]["selection_budget"] == "batch"
    assert trainers["pods-shortest"]["selection_tie_break"] == "shortest"
    assert trainers["pods"].get("selection_budget", "per_prompt") == "per_prompt"
    assert settings.base["time_budget"] is None and {t["max_steps"] for t in trainers.values()} == {30}
    assert {t["per_device_train_batch_size"] for t in trainers.values()} == {64}


def test_learning_rates_are_tuned_per_arm_on_tuning_seeds_and_resume_keeps_every_run(tmp_path, monkeypatch):
    calls: list[tuple[str, float, int]] = []
    monkeypatch.setattr(compare_runner, "_train_in_subprocess", fake_pods_train(calls))
    grid = {"lr_grid": [1e-5, 2e-5, 4e-5], "tuning_seeds": [7], "seeds": [0, 1], "n": 4, "m": 2, "prompts_per_step": 2}
    settings = resolve_compare(None, [grid], only=["grpo", "pods"])
    out = tmp_path / "cmp"
    comparison = compare_runner.run_comparison(settings, out, console=Console(quiet=True))
    tuning = [(arm, rate, 7) for arm in ("grpo", "pods") for rate in grid["lr_grid"]]
    assert calls == [*tuning, ("grpo", 2e-5, 0), ("pods", 4e-5, 0), ("grpo", 2e-5, 1), ("pods", 4e-5, 1)]
    chosen = comparison["learning_rates"]["arms"]
    assert {name: arm["chosen"] for name, arm in chosen.items()} == {"grpo": 2e-5, "pods": 4e-5}
    # The window 0-20 s: (0.1 + a) / 2 x 10 + a x 10, over 20 s.
    assert chosen["pods"]["mean_accuracy"] == pytest.approx({"1e-05": 0.175, "2e-05": 0.4, "4e-05": 0.55})
    assert (out / "tuning" / "pods" / "lr-4e-05" / "seed-7" / "summary.json").exists()
    markdown = (out / "comparison.md").read_text()
    assert "## Learning rates, tuned on seeds [7]" in markdown
    assert "| pods | 17.5 / 2 | 40.0 / 2 | **55.0** / 2 | 4e-05 |" in markdown
    assert "Tuned on: grpo, pods: not recorded." in markdown  # the fake runs record no machine

    assert [w for w in comparison["warnings"] if "lr_grid" in w] == [
        "pods: its chosen learning rate 4e-05 is the highest of lr_grid ['1e-05', '2e-05', '4e-05'], so a higher one "
        "may do better; widen the grid for every arm and resume (pods compare --resume <folder> --set "
        "'lr_grid=[...]') before reading the arms as tuned."
    ]

    again = compare_runner.run_comparison(
        settings_module.load_compare(out), out, resume=True, console=Console(quiet=True)
    )
    assert len(calls) == 10 and again["learning_rates"] == comparison["learning_rates"]  # nothing trained again

    # Widening the grid on resume trains only the new rate's tuning runs; the choices hold, so every reported run
    # is kept, and 4e-5 is no longer at the grid's edge.
    wider = runner.invoke(app, ["compare", "--resume", str(out), "--set", "lr_grid=[1e-5, 2e-5, 4e-5, 8e-5]"])
    assert wider.exit_code == 0, wider.output
    assert "--resume: lr_grid [1e-05, 2e-05, 4e-05] -> [1e-05, 2e-05, 4e-05, 8e-05]" in wider.output
    assert calls[10:] == [("grpo", 8e-5, 7), ("pods", 8e-5, 7)]
    widened = json.loads((out / "comparison.json").read_text())
    assert widened["learning_rates"]["arms"]["pods"]["mean_accuracy"]["8e-05"] == pytest.approx(0.5125)
    assert not [w for w in widened["warnings"] if "lr_grid" in w]
    assert settings_module.load_compare(out).lr_grid == [1e-5, 2e-5, 4e-5, 8e-5]


def test_resume_may_only_add_rates_and_seeds():
    saved = resolve_compare(None, [{"lr_grid": [1e-5, 2e-5], "tuning_seeds": [7], "seeds": [0, 1]}])
    grown, changes = settings_module.extend_on_resume(saved, [{"seeds": [0, 1, 2], "tuning_seeds": [7, 8]}], where="r")
    assert (grown.seeds, grown.tuning_seeds) == ([0, 1, 2], [7, 8])
    assert changes == {"seeds": ([0, 1], [0, 1, 2]), "tuning_seeds": ([7], [7, 8])}
    assert settings_module.extend_on_resume(saved, [], where="r")[1] == {}
    for override, key in (
        ({"lr_grid": [1e-5, 4e-5]}, "lr_grid"),  # drops 2e-5, whose runs are finished
        ({"seeds": [1]}, "seeds"),
        ({"time_budget": 30.0}, "time_budget"),
        ({"arms": {"pods": {"rule": "random"}}}, "arms.pods.rule"),
        ({"target_gain": 0.5}, "target_gain"),  # fixed before the runs are read
    ):
        with pytest.raises(ValueError, match=rf"r: cannot change {key}: a resumed comparison keeps its settings"):
            settings_module.extend_on_resume(saved, [override], where="r")
    gpu = {"name": "my GPU", "per_step": 2.0, "per_generated": 0.01, "per_trained": 0.02, "trained_per_step": 8}
    costed, _ = settings_module.extend_on_resume(saved, [{"cost_models": [gpu]}], where="r")  # changes no run
    assert costed.cost_models == [gpu]
    untuned = resolve_compare(None, [{"seeds": [0]}])
    with pytest.raises(ValueError, match="cannot change lr_grid, tuning_seeds"):
        settings_module.extend_on_resume(untuned, [{"lr_grid": [1e-5], "tuning_seeds": [7]}], where="r")


def test_resume_refuses_a_subset_of_arms(tmp_path):
    result = runner.invoke(app, ["compare", "--resume", str(tmp_path), "--arm", "grpo"])
    assert result.exit_code == 2
    assert "drop --config, --output-dir and --arm" in result.output


def test_tuning_warnings_name_arms_tuned_at_either_end():
    def rates(grid: list[float], chosen: dict[str, float]) -> dict:
        return {"grid": grid, "arms": {name: {"chosen": rate, "machines": ["m"]} for name, rate in chosen.items()}}

    warnings = compare_tuning.tuning_warnings(rates([4e-5, 1e-5, 2e-5], {"a": 4e-5, "b": 2e-5, "c": 1e-5}))
    assert [w.split(",")[0] for w in warnings] == [
        "a: its chosen learning rate 4e-05 is the highest of lr_grid ['1e-05'",
        "c: its chosen learning rate 1e-05 is the lowest of lr_grid ['1e-05'",
    ]
    assert "so a lower one may do better" in warnings[1]
    assert compare_tuning.tuning_warnings(rates([1e-5], {"a": 1e-5})) == []
    assert compare_tuning.tuning_warnings(None) == []


def test_tuning_records_steps_and_machines_and_warns_when_arms_were_tuned_on_different_machines():
    settings = resolve_compare(None, [{"lr_grid": [1e-5, 2e-5, 4e-5], "tuning_seeds": [7, 8], "seeds": [0]}])

    def tuned(machine, steps: list[int]) -> dict[float, list[dict]]:
        """Every rate's two tuning runs, the middle rate best; the runs reach `steps` (one per seed)."""
        accuracy = {1e-5: 0.3, 2e-5: 0.6, 4e-5: 0.4}
        by_rate = {}
        for rate, a in accuracy.items():
            runs = [{**synthetic_run([0, 10, 20], [0.2, a, a], 8, 4), "machine": machine} for _ in steps]
            for run, last in zip(runs, steps, strict=True):
                run["eval"][-1]["step"] = last
            by_rate[rate] = runs
        return by_rate

    same = compare_tuning.choose_learning_rates(settings, {"grpo": tuned(EPYC, [30, 36]), "pods": tuned(EPYC, [9, 9])})
    epyc, xeon = "AMD EPYC (family 26 model 2), AVX-512, 2 cores", "Intel Xeon (family 6 model 143), AVX-512, 2 cores"
    assert same["arms"]["grpo"]["steps"] == {"1e-05": 33.0, "2e-05": 33.0, "4e-05": 33.0}
    assert same["arms"]["pods"]["machines"] == [epyc]
    assert compare_tuning.tuning_warnings(same) == []

    apart = compare_tuning.choose_learning_rates(
        settings, {"grpo": tuned(EPYC, [30, 36]), "grpo-pool": tuned(EPYC, [8, 8]), "pods": tuned(XEON, [50, 52])}
    )
    assert {arm["chosen"] for arm in apart["arms"].values()} == {2e-5}
    assert compare_tuning.tuning_warnings(apart) == [
        f"The tuning runs ran on different machines (grpo, grpo-pool on {epyc}; pods on {xeon}). The window is "
        "seconds of training, so a faster CPU fits more steps into it and can move an arm's best rate (the steps "
        "each rate reached are in the tuning table): the arms were not tuned alike."
    ]
    markdown = compare_report._learning_rates_markdown(apart)
    assert "| pods | 27.5 / 51 | **50.0** / 51 | 35.0 / 51 | 2e-05 |" in markdown
    assert f"Tuned on: grpo, grpo-pool: {epyc}; pods: {xeon}." in markdown


def test_plan_names_each_arms_learning_rate_and_counts_the_runs():
    fixed = resolve_compare(None, [{"seeds": [0, 1], "trainer": {"learning_rate": 3e-4}}], only=["grpo", "pods"])
    tuned = resolve_compare(
        None, [{"seeds": [0, 1], "lr_grid": [1e-4, 2e-4], "tuning_seeds": [100]}], only=["grpo", "pods"]
    )
    for settings, rate, caption in (
        (fixed, "0.0003", "4 runs, one after another"),
        (tuned, "best of 0.0001, 0.0002", "4 tuning runs (seeds [100]), then 4 runs, one after another"),
    ):
        table = plan_table(settings)
        cells = [list(column.cells) for column in table.columns]
        assert cells[0] == ["grpo", "pods"] and cells[6] == [rate, rate] and table.caption == caption
        assert (cells[1], cells[2], cells[4]) == (["4", "16"], ["4", "4"], ["64", "64"])


def test_tuning_seeds_must_be_new_and_rates_untouched_by_arms():
    with pytest.raises(ValueError, match="overlap seeds"):
        resolve_compare(None, [{"lr_grid": [1e-5], "tuning_seeds": [0], "seeds": [0, 1]}])
    with pytest.raises(ValueError, match="needs tuning_seeds"):
        resolve_compare(None, [{"lr_grid": [1e-5]}])
    with pytest.raises(ValueError, match=r"set trainer\.learning_rate"):
        resolve_compare(
            None, [{"lr_grid": [1e-5], "tuning_seeds": [9], "arms": {"pods": {"trainer": {"learning_rate": 1e-4}}}}]
        )


def test_status_shows_finished_runs_the_best_rates_so_far_and_what_is_left(tmp_path, monkeypatch):
    from pods_rl.compare.status import RunProgress, comparison_progress, progress_tables

    monkeypatch.setattr(compare_runner, "_train_in_subprocess", fake_pods_train([]))
    grid = {"lr_grid": [1e-5, 2e-5, 4e-5], "tuning_seeds": [7], "seeds": [0, 1], "n": 4, "m": 2, "prompts_per_step": 2}
    out = tmp_path / "cmp"
    compare_runner.run_comparison(
        resolve_compare(None, [grid], only=["grpo", "pods"]), out, console=Console(quiet=True)
    )
    # As a sitting stopped after pods's tuning leaves it: grpo at 4e-5 and every reported run still to train.
    pending = [
        out / "tuning" / "grpo" / "lr-4e-05" / "seed-7",
        *(out / arm / f"seed-{s}" for arm in ("grpo", "pods") for s in (0, 1)),
    ]
    for run_dir in pending:
        (run_dir / "summary.json").unlink()

    progress = comparison_progress(out)
    assert [(run.label, run.finished) for run in progress.runs] == [
        *(
            (f"tuning {arm} lr {rate:g} seed 7", (arm, rate) != ("grpo", 4e-5))
            for arm in ("grpo", "pods")
            for rate in grid["lr_grid"]
        ),
        ("grpo seed 0", False),
        ("pods seed 0", False),
        ("grpo seed 1", False),
        ("pods seed 1", False),
    ]
    # grpo 2/2 at 1e-5: 4 rollouts generated and trained a step, evaluations 0.1, 0.3, 0.3 at 0, 10, 20 s taking
    # 2, 3, 4 s; the window (0.1 + 0.3) / 2 x 10 + 0.3 x 10 over 20 s.
    first = progress.runs[0]
    assert (first.steps, first.peak_accuracy) == (2, 0.3)
    assert (first.generate_seconds, first.update_seconds) == pytest.approx((0.1 * 4 + 0.5, 0.2 * 4 + 1.0))
    assert (first.window_accuracy, first.busy_seconds) == pytest.approx((0.25, 20 + 2 + 3 + 4))
    assert progress.runs[-1] == RunProgress("pods seed 1", finished=False)
    assert {name: best["chosen"] for name, best in progress.best_rates.items()} == {"grpo": 2e-5, "pods": 4e-5}
    assert progress.rates_tuned == {"grpo": 2, "pods": 3}
    # pods's choice is final and the grid's highest rate; grpo's is not final yet, so it is not judged.
    assert progress.warnings == [
        "pods: its chosen learning rate 4e-05 is the highest of lr_grid ['1e-05', '2e-05', '4e-05'], so a higher one "
        "may do better; widen the grid for every arm and resume (pods compare --resume <folder> --set "
        "'lr_grid=[...]') before reading the arms as tuned."
    ]
    assert progress.seconds_left == pytest.approx(5 * 29)  # five pending runs at the finished ones' 29 s each

    console = Console(width=200, record=True, file=io.StringIO())
    for table in progress_tables(progress):
        console.print(table)
    text = console.export_text()
    assert "5 of 10 runs finished; left: about 2 min of training and evaluation" in text
    assert "ran on not recorded (5 runs)" in text  # the fake runs record no machine
    assert _cells(text, "tuning grpo lr 1e-05 seed 7") == ["2", "0.9", "1.8", "25.0", "30.0", "0.5"]
    assert _cells(text, "pods seed 1") == ["pending", "", "", "", "", ""]
    assert _cells(text, "pods") == ["17.5", "40.0", "55.0", "4e-05"]
    assert _cells(text, "grpo") == ["25.0", "47.5", "", "2e-05 (2 of 3 rates)"]

    shown = runner.invoke(app, ["compare", "--status", str(out)])
    assert shown.exit_code == 0, shown.output
    assert "5 of 10 runs finished" in " ".join(shown.output.split())
    assert "warning: pods: its chosen learning rate 4e-05 is the highest" in " ".join(shown.output.split())
    mixed = runner.invoke(app, ["compare", "--status", str(out), "--arm", "grpo"])
    assert mixed.exit_code != 0
    assert "--status takes a comparison folder and nothing else: give it alone." in mixed.output


def test_report_writes_an_interim_comparison_of_the_seeds_whose_every_arm_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_runner, "_train_in_subprocess", fake_pods_train([]))
    grid = {"lr_grid": [1e-5, 2e-5], "tuning_seeds": [7], "seeds": [0, 1, 2], "n": 4, "m": 2, "prompts_per_step": 2}
    out = tmp_path / "cmp"
    compare_runner.run_comparison(
        resolve_compare(None, [grid], only=["grpo", "pods"]), out, console=Console(quiet=True)
    )
    full = json.loads((out / "comparison.json").read_text())
    quiet = Console(quiet=True)
    # With every seed finished, --report writes what the run wrote.
    compare_runner.report_comparison(out, console=quiet)
    assert json.loads((out / "comparison.json").read_text()) == full
    assert full["seeds_left"] == [] and not full["warnings"][0].startswith("Interim")

    (out / "pods" / "seed-1" / "summary.json").unlink()  # seed 1's pods run is unfinished: seeds 0 and 2 report
    interim = compare_runner.report_comparison(out, console=quiet)
    assert interim["settings"]["seeds"] == [0, 2] and interim["seeds_left"] == [1]
    assert interim["arms"]["pods"]["runs"] == ["pods/seed-0", "pods/seed-2"]
    assert len(interim["arms"]["pods"]["vs_baseline"]["speedup_per_seed"]) == 2
    assert interim["warnings"][0] == (
        "Interim report: 2 of the 3 planned seeds finished every arm (seeds 0, 2); seed 1 is left, and every figure "
        "across seeds may move when they have run."
    )
    assert interim["learning_rates"] == full["learning_rates"]
    markdown = (out / "comparison.md").read_text()
    assert markdown.startswith("# Comparison: tiny on arithmetic (interim: 2 of 3 seeds)\n")
    assert "seeds [0, 2]" in markdown

    shown = runner.invoke(app, ["compare", "--report", str(out)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines()[-1] == interim["summary"][-1]
    assert interim["summary"][0].startswith("pods vs grpo: time to target 0.80x (95% interval 0-∞x)")
    assert interim["summary"][0] in shown.output.splitlines()
    mixed = runner.invoke(app, ["compare", "--report", str(out), "--status", str(out)])
    assert mixed.exit_code != 0 and "--status takes a comparison folder and nothing else" in mixed.output

    for seed in (0, 2):
        (out / "grpo" / f"seed-{seed}" / "summary.json").unlink()
    with pytest.raises(ValueError, match=r"no seed has finished every arm yet; `pods compare --resume"):
        compare_runner.report_comparison(out, console=quiet)
    (out / "tuning" / "grpo" / "lr-2e-05" / "seed-7" / "summary.json").unlink()
    with pytest.raises(ValueError, match=r"1 of 4 tuning runs have not finished, so the learning rates are not"):
        compare_runner.report_comparison(out, console=quiet)


def _cells(text: str, label: str) -> list[str]:
    """The other cells of the table row whose first cell is `label`."""
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│┃").split("│")]
        if cells[0] == label:
            return cells[1:]
    raise AssertionError(f"no row {label!r} in:\n{text}")


def test_a_vllm_comparison_is_read_where_vllm_is_missing_but_resumed_only_with_it(tmp_path, monkeypatch):
    import pods_rl.versions

    monkeypatch.setattr(compare_runner, "_train_in_subprocess", fake_pods_train([]))
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: True)
    shape = {"lr_grid": [1e-5], "tuning_seeds": [7], "seeds": [0], "n": 4, "m": 2, "prompts_per_step": 2}
    shape["trainer"] = {"use_vllm": True}
    out = tmp_path / "cmp"
    compare_runner.run_comparison(
        resolve_compare(None, [shape], only=["grpo", "pods"]), out, console=Console(quiet=True)
    )
    written = (out / "comparison.md").read_text()

    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: False)
    (out / "comparison.md").unlink()
    reported = runner.invoke(app, ["compare", "--report", str(out)])
    assert reported.exit_code == 0, reported.output
    assert (out / "comparison.md").read_text() == written
    assert runner.invoke(app, ["compare", "--status", str(out)]).exit_code == 0
    resumed = runner.invoke(app, ["compare", "--resume", str(out)])
    assert resumed.exit_code != 0
    assert "trainer.use_vllm=True needs vLLM, which this environment lacks" in " ".join(resumed.output.split())


def test_allocation_arms_run_end_to_end_from_the_shipped_config(tiny_model_dir, tmp_path):
    """Two arms of configs/compare-allocation-tiny.yaml (GRPO, PODS from the history; screening is run in the
    trainer tests), three steps each: the allocation's rollouts are what the comparison counts and prices."""
    out = tmp_path / "cmp"
    args = ["compare", "--config", str(CONFIGS / "compare-allocation-tiny.yaml"), "--model", str(tiny_model_dir)]
    args += ["--output-dir", str(out), "--arm", "grpo", "--arm", "pods-history", "--seed", "0", "-n", "4", "-m", "2"]
    args += ["--prompts-per-step", "2", "--time-budget", "600", *QUICK, "--set", "target_accuracy=0.01"]
    args += ["--set", "lr_grid=null", "--set", "tuning_seeds=null"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    arms = json.loads((out / "comparison.json").read_text())["arms"]
    config = yaml.safe_load((out / "pods-history" / "seed-0" / "config.yaml").read_text())["trainer"]
    assert (config["rollout_allocation"], config["max_rollouts_per_prompt"]) == ("history", 32)
    # 2 prompts of 2..32 rollouts adding up to the default budget, n = 4 per prompt: 8 a step, 2 x 2 rows trained.
    assert arms["pods-history"]["per_step"]["rollouts_generated"] == 8
    assert arms["pods-history"]["totals"]["rollouts_trained"] == 3 * 4
    assert arms["pods-history"]["dynamic_sampling"]["generation_rounds"] >= 1


# ---------------------------------------------------------------- a comparison clocked by steps

STEP_CLOCK = {"time_budget": None, "trainer": {"max_steps": 10}, "eval": {"every_steps": 5}}


def _clocked_run(seconds: list[float], accuracy: list[float], generated: int, machine: dict) -> dict:
    """Evaluations at steps 0, 5 and 10 taken at `seconds` of training; phase times `machine`'s speed x the
    synthetic ones (the Xeon here is twice as fast)."""
    run = synthetic_run(seconds, accuracy, generated, 8)
    for evaluation, step in zip(run["eval"], (0, 5, 10), strict=True):
        evaluation["step"] = step
    speed = 2.0 if machine is XEON else 1.0
    for step in run["step"]:
        for key in [k for k in step if k.startswith("pods/time_")]:
            step[key] /= speed
    return {**run, "machine": machine}


def test_a_comparison_clocked_by_steps_tests_steps_and_the_window_over_steps_and_projects_seconds_per_machine(
    tmp_path,
):
    settings = resolve_compare(None, [{**STEP_CLOCK, "n": 16, "m": 4, "prompts_per_step": 2, "seeds": [0, 1, 2]}])
    settings.arms = {name: settings.arms[name] for name in ("grpo", "pods")}
    assert settings.clock == "steps" and settings.base["eval"]["every_seconds"] is None
    machines = (EPYC, EPYC, XEON)  # seed 2 ran in a later sitting, on another CPU
    records = {
        # GRPO: 10 s a step; PODS generates 4x the rollouts, 20 s a step, and learns faster per step.
        "grpo": [_clocked_run([0, 50, 100], [0.2, 0.4, 0.6], 8, machine) for machine in machines],
        "pods": [
            _clocked_run([0, 100, 200], [0.2, middle, 0.6], 32, machine)
            for middle, machine in zip((0.6, 0.56, 0.64), machines, strict=True)
        ],
    }
    comparison = summarize(settings, records)
    assert comparison["clock"] == "steps"
    versus = comparison["arms"]["pods"]["vs_baseline"]
    # The window is the 10 steps: grpo's mean (0.3 x 5 + 0.5 x 5) / 10 = 0.4, pods's 0.5, 0.48, 0.52. Over seconds
    # (a window of 100 s, pods's first 5 steps) the differences would be 0, -0.02 and +0.02.
    assert versus["mean_accuracy_window"] == [10, 10, 10]
    assert versus["mean_accuracy_difference_per_seed"] == pytest.approx([0.1, 0.08, 0.12])
    # The target: the plateau is grpo's mean over its last quarter of steps (7.5-10): 0.55, so 0.2 + 0.75 x 0.35.
    assert comparison["target"]["accuracy"] == pytest.approx(0.4625)
    grpo_steps = [t["crossing"] for t in comparison["arms"]["grpo"]["steps_to_target"]]
    assert grpo_steps == pytest.approx([6.5625] * 3)  # 5 + 5 x 0.0625 / 0.2
    # One primary test per arm, the steps to target (the window is secondary); the time to target, in seconds of two
    # CPUs, is not tested.
    assert comparison["method"]["family"]["tests"] == 1
    assert comparison["method"]["family"]["measures"] == ["steps_to_target"]
    assert comparison["method"]["family"]["secondary"] == ["mean_accuracy"]
    assert versus["verdicts"]["time_to_target"] == "not tested"
    assert versus["adjusted_p_values"]["time_to_target"] is None
    assert versus["adjusted_p_values"]["steps_to_target"] is not None
    # Seconds per step measured per machine: grpo 3.99 s and pods 6.654 s on the EPYC, half on the Xeon.
    projections = versus["projections"]
    epyc, xeon = "AMD EPYC (family 26 model 2), AVX-512, 2 cores", "Intel Xeon (family 6 model 143), AVX-512, 2 cores"
    assert [name for name in projections if name.startswith("measured")] == [
        f"measured on {epyc}",
        f"measured on {xeon}",
    ]
    steps = versus["steps_to_target"]
    for label in (epyc, xeon):
        row = projections[f"measured on {label}"]
        assert row["step_cost_ratio"] == pytest.approx(6.654 / 3.99)
        assert row["estimate"] == pytest.approx(steps["estimate"] / row["step_cost_ratio"])
    assert comparison["arms"]["pods"]["seconds_per_step_by_machine"] == pytest.approx({epyc: 6.654, xeon: 3.327})
    assert [w for w in comparison["warnings"] if "machines" in w] == [
        f"The runs ran on 2 machines ({epyc}: 4 runs; {xeon}: 2 runs). The comparison is clocked by steps, so its "
        "tests (steps to target, the window mean over steps) hold across them; its times to target in seconds mix "
        "those CPUs and are not tested: read the projections, one per machine that ran both arms."
    ]
    assert comparison["arms"]["grpo"]["curve"]["step"] == [0, 5, 10]
    summary = comparison["summary"][0]
    assert summary.startswith("pods vs grpo: steps to target ")
    assert (
        "time to target in measured seconds" in summary and "(not tested: see the projections per machine)" in summary
    )
    assert (
        "Verdicts: one primary question per arm, steps to target, at the 5% level after Holm's adjustment over the 1 "
        "arm(s)' primary tests; mean accuracy is secondary" in comparison["summary"][-1]
    )
    markdown = comparison_markdown(comparison)
    assert "10 steps per run, evaluation every 5 steps" in markdown
    assert "(clocked by steps: the window and the verdicts count steps)" in markdown
    assert "| not tested |" in markdown
    write_comparison(tmp_path, comparison)  # the picture against steps
    assert (tmp_path / "comparison.png").stat().st_size > 0
    # benchmarks/arm_vs_arms.py reads the clock too: the window over steps, steps primary, time not tested.
    script = Path(__file__).parents[2] / "benchmarks" / "arm_vs_arms.py"
    shown = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "--arm", "pods"], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    row = next(line for line in shown.stdout.splitlines() if line.startswith("| grpo | ")).strip("| ").split(" | ")
    assert row[2] == "not tested"
    assert row[3] == speedup_text(versus["steps_to_target"])
    assert row[5] == difference_text(versus["mean_accuracy_difference"])
    assert row[7] == "+10.0, +8.0, +12.0"  # over seconds: +0.0, -2.0, +2.0
    assert "one primary question per arm, steps to target" in shown.stdout


def test_a_step_clocked_comparison_evaluates_by_steps():
    with pytest.raises(ValueError, match=r"clocked by steps .* evaluates every eval.every_steps steps"):
        resolve_compare(None, [{"time_budget": None, "trainer": {"max_steps": 10}}])
    with pytest.raises(ValueError, match="every_seconds 30"):
        resolve_compare(None, [{**STEP_CLOCK, "eval": {"every_steps": 5, "every_seconds": 30.0}}])
    assert resolve_compare(None, []).clock == "seconds"


def test_tuning_by_steps_scores_the_window_over_steps():
    """Two rates whose runs reach the same accuracies at the same steps but in different seconds: by seconds the
    faster-per-second run would differ; by steps they score by steps alone, and machines do not warn."""
    settings = resolve_compare(None, [{**STEP_CLOCK, "lr_grid": [1e-5, 2e-5], "tuning_seeds": [7], "seeds": [0]}])
    # 1e-5 rises early in steps but late in seconds; 2e-5 the other way round.
    early_in_steps = _clocked_run([0, 90, 100], [0.2, 0.6, 0.6], 8, EPYC)
    late_in_steps = {**_clocked_run([0, 10, 100], [0.2, 0.2, 0.6], 8, XEON)}
    chosen = compare_tuning.choose_learning_rates(settings, {"grpo": {1e-5: [early_in_steps], 2e-5: [late_in_steps]}})
    grpo = chosen["arms"]["grpo"]
    assert grpo["mean_accuracy"] == pytest.approx({"1e-05": 0.5, "2e-05": 0.3})  # over steps 0-10
    assert grpo["chosen"] == 1e-5 and chosen["clock"] == "steps"
    warnings = compare_tuning.tuning_warnings(chosen)  # the chosen rate is the grid's lowest: that warning only
    assert len(warnings) == 1 and "lowest of lr_grid" in warnings[0]  # two machines, but the same steps per run
    by_seconds = compare_tuning.window_accuracy(early_in_steps["eval"], "accuracy")
    assert by_seconds == pytest.approx((0.4 * 90 + 0.6 * 10) / 100)


def test_a_baseline_that_degrades_gets_verdicts(tmp_path):
    """Issue 64: a baseline that ends below its start had no target and an empty `verdicts`, though the arm was
    clearly better. Now the target is 75% of the arm's gain from the baseline's start, the steps to target and the
    window mean are tested, and both are resolved."""
    settings = resolve_compare(
        None, [{"n": 8, "m": 2, "prompts_per_step": 2, "seeds": [0, 1, 2, 3, 4, 5]}], only=["grpo", "pods"]
    )
    times = [0, 10, 20, 30, 40]
    records = {
        "grpo": [synthetic_run(times, [0.4, 0.35, 0.3, 0.3 - 0.01 * s, 0.25], 4, 4) for s in range(6)],
        "pods": [synthetic_run(times, [0.4, 0.6 + 0.01 * s, 0.8, 0.8, 0.8], 16, 4) for s in range(6)],
    }
    comparison = summarize(settings, records)
    assert comparison["target"]["of"] == "pods" and comparison["target"]["accuracy"] == pytest.approx(0.7)
    assert comparison["verdicts"]["pods"] == {
        "time_to_target": "faster",
        "steps_to_target": "faster",
        "mean_accuracy": "higher",
    }
    versus = comparison["arms"]["pods"]["vs_baseline"]
    assert versus["time_to_target"]["high"] is None  # the baseline never reaches it: open above
    assert "75% of pods's gain from grpo's start (40.0% -> 80.0%): 70.0%" in comparison["summary"][-1]
    assert any("The baseline 'grpo' gained nothing" in warning for warning in comparison["warnings"])
    # No arm gains: no target, no times; the window mean is still tested (here as the primary question).
    flat = {name: [synthetic_run(times, [0.4, 0.35, 0.3, 0.3, 0.25], 4, 4) for _ in range(6)] for name in records}
    flat["pods"] = [synthetic_run(times, [0.4, 0.38, 0.36, 0.34 + 0.001 * s, 0.33], 16, 4) for s in range(6)]
    settings.primary = "mean_accuracy"
    nothing = summarize(settings, flat)
    versus = nothing["arms"]["pods"]["vs_baseline"]
    assert nothing["target"] is None and versus["time_to_target"] is None
    assert versus["roles"]["mean_accuracy"] == "primary" and nothing["verdicts"]["pods"]["mean_accuracy"] == "higher"
    assert nothing["verdicts"]["pods"]["time_to_target"] == "not resolved"
    assert nothing["summary"][0].startswith("pods vs grpo: no target (no arm gained), no times to target; mean")
    write_comparison(tmp_path, nothing)  # the report without a target renders
    assert "| pods | - | - |" in (tmp_path / "comparison.md").read_text()


def test_the_primary_question_is_a_setting_checked_against_the_clock():
    assert resolve_compare(None, []).primary_measure == "time_to_target"
    assert resolve_compare(None, [{"primary": "mean_accuracy"}]).primary_measure == "mean_accuracy"
    stepped = resolve_compare(None, [STEP_CLOCK])
    assert stepped.primary_measure == "steps_to_target"
    with pytest.raises(ValueError, match=r"primary must be one of \['steps_to_target', 'mean_accuracy'\]"):
        resolve_compare(None, [{**STEP_CLOCK, "primary": "time_to_target"}])
    with pytest.raises(ValueError, match="primary must be one of"):
        resolve_compare(None, [{"primary": "peak"}])


def test_the_dry_run_prints_the_power_of_its_design(monkeypatch):
    """The plan's power: the design's grid, horizon, questions and seeds, the primary question, the simulated power at
    1.5x and 2x and the seeds 80% would take, and what was assumed (the learning curve, unless power_curve says)."""
    from pods_rl.compare.power import design_of, design_power, power_lines

    settings = resolve_compare(None, [{"seeds": [0, 1, 2, 3, 4, 5]}], only=["grpo", "pods"])
    design, assumed = design_of(settings)
    assert (design.every, design.horizon, design.questions, design.seeds, design.step) == (30.0, 300.0, 200, 6, 0.1)
    assert assumed == ["learning curves from 40% to 80% (power_curve: {base, plateau} sets yours)"]
    stepped = resolve_compare(None, [STEP_CLOCK, {"power_curve": {"base": 0.2, "plateau": 0.5}}], only=["grpo", "pods"])
    design, assumed = design_of(stepped)
    assert (design.every, design.horizon, design.step, design.base, design.plateau, assumed) == (
        5.0,
        10.0,
        0.0,
        0.2,
        0.5,
        [],
    )
    monkeypatch.setattr("pods_rl.compare.power.COMPARISONS", 30)
    monkeypatch.setattr("pods_rl.compare.power.MOST_SEEDS", 12)
    result = design_power(settings)
    assert 0 <= result.power[1.5] <= result.power[2.0] <= 1
    lines = power_lines(result)
    assert lines[0].startswith("power of the primary verdict (time to target, 1 arm(s) against the baseline, Holm): ")
    assert "with 6 seeds per arm, evaluations every 30 s to 300 s, 200 questions" in lines[0]
    assert lines[1].startswith("seeds: 80% at 1.5x takes ") and lines[2].startswith("assumed: learning curves")
    with pytest.raises(ValueError, match="power_curve needs 0 <= base < plateau <= 1"):
        resolve_compare(None, [{"power_curve": {"base": 0.6, "plateau": 0.5}}])
    with pytest.raises(ValueError, match=r"power_curve\.reaches .* must be between 0 and 1, got 1\.0"):
        resolve_compare(None, [{"power_curve": {"reaches": 1.0}}])
    paced = resolve_compare(None, [STEP_CLOCK, {"power_curve": {"reaches": 0.99}}], only=["grpo", "pods"])
    assert design_of(paced)[0].reaches == 0.99
    # Sampled pass@1 over k samples a question: k draws a question in the simulated evaluation's noise.
    sampled = {"metric": "accuracy_sampled", "eval": {"sampled_k": 3}, "power_curve": {"base": 0.2}}
    design, assumed = design_of(resolve_compare(None, [STEP_CLOCK, sampled], only=["grpo", "pods"]))
    assert design.questions == 600
    assert assumed == ["sampled pass@1 over 3 samples a question: counted as 600 questions (draws) an evaluation"]


def test_an_unresolved_verdict_states_the_bound_its_interval_gives():
    """Where a measure is not resolved, the verdict says what its 95% confidence set still rules out: the hull of its
    pieces (holes included), one side, or neither."""
    from pods_rl.compare.measures import bound_text

    two_sided = {"estimate": 1.1, "low": 0.8, "high": 1.25, "accepted": [[0.8, 1.25]]}
    assert bound_text(two_sided, "steps_to_target") == "the interval bounds it within 0.80-1.25x"
    holes = {"estimate": 1.1, "low": 0.8, "high": 1.25, "accepted": [[0.5, 0.6], [0.8, 1.25], [1.4, 1.5]]}
    assert bound_text(holes, "steps_to_target") == "the interval bounds it within 0.50-1.50x"
    assert bound_text({"low": 0.7, "high": None}, "time_to_target") == "bounded below only: at least 0.70x"
    assert bound_text({"low": 0.0, "high": 3.0}, "time_to_target") == "bounded above only: at most 3.00x"
    assert bound_text({"low": 0.0, "high": None}, "time_to_target") == "the interval bounds it on neither side"
    assert bound_text({"low": None, "high": None}, "time_to_target") == "no interval, no bound"
    window = {"estimate": 0.01, "low": -0.03, "high": 0.045}
    assert bound_text(window, "mean_accuracy") == "the interval bounds it within -3.0 to +4.5 points"


def test_the_report_gives_the_power_as_planned_and_at_the_spread_its_runs_show(monkeypatch):
    """report_power: the planned design's power equals the simulation's at the settings' curve; each arm's measured
    power is the simulation's at the baseline's start and plateau and the pooled spread of log crossings (over the
    seeds that reached the target), and the report prints both."""
    import dataclasses
    import math

    import numpy as np

    from pods_rl.compare.power import crossing_spread, design_of, report_power, report_power_lines
    from pods_rl.compare.simulation import Truth, verdict_power

    settings = resolve_compare(
        None,
        [STEP_CLOCK, {"seeds": [0, 1, 2, 3], "power_curve": {"base": 0.2, "plateau": 0.6, "spread": 0.3}}],
        only=["grpo", "pods"],
    )

    def hit(crossing, censored=False):
        return {"below": None, "reached": None, "crossing": crossing, "censored": censored}

    grpo = [hit(4.0), hit(6.0), hit(9.0), hit(10.0, censored=True)]
    pods = [hit(2.0), hit(3.0), hit(3.5), hit(5.0)]
    assert crossing_spread(grpo) == (pytest.approx(float(np.std(np.log([4, 6, 9]), ddof=1))), 3)
    assert crossing_spread([hit(4.0), hit(0.0)]) == (None, 1)  # reached at the start: no log crossing
    comparison = {
        "clock": "steps",
        "target": {"accuracy": 0.4, "fraction": 0.75, "base": 0.25, "plateau": 0.45, "of": None},
        "arms": {"grpo": {"steps_to_target": grpo}, "pods": {"steps_to_target": pods}},
    }
    record = report_power(settings, comparison, comparisons=20)
    planned, _ = design_of(settings)
    assert record["planned"]["power"] == {
        f"{truth:g}x": verdict_power(planned, Truth(truth), 20, arms=1, primary="speedup").resolved
        for truth in (1.5, 2.0)
    }
    entry = record["measured"]["arms"]["pods"]
    pooled = math.sqrt((crossing_spread(grpo)[0] ** 2 + crossing_spread(pods)[0] ** 2) / 2)
    assert entry["pooled"] == pytest.approx(pooled) and entry["reached"] == {"grpo": 3, "pods": 4}
    # The runs' pace: grpo's median crossing (4, 6, 9, never: 7.5 steps of 10) on an exponential curve through 75% of
    # the gain there makes 1 - 0.25^(10 / 7.5) of it by the end.
    reaches = 1 - 0.25 ** (10 / 7.5)
    assert (record["measured"]["median_crossing"], record["measured"]["reaches"]) == (7.5, pytest.approx(reaches))
    runs_design = dataclasses.replace(planned, base=0.25, plateau=0.45, spread=pooled, reaches=reaches)
    assert entry["power"] == {
        f"{truth:g}x": verdict_power(runs_design, Truth(truth), 20, arms=1, primary="speedup").resolved
        for truth in (1.5, 2.0)
    }
    lines = report_power_lines(record)
    assert lines[0].startswith("Power of the primary verdict (steps to target, Holm over 1 arm(s), 4 seeds per arm;")
    assert (
        "As planned (curves from 20% to 60%, seeds' log time constants spread by 0.30, the median baseline run making "
        "90% of its gain by the end)" in lines[0]
    )
    assert lines[1] == (
        "Pace: the baseline's median run crossed the target at 7.5 of 10 (an exponential curve through it makes "
        f"{reaches:.2%} of its gain by the end); the powers below use it."
    )
    assert lines[2].startswith("pods: at the runs' curve (25% to 45%) and spread of log crossings (grpo ")
    assert f"pooled {pooled:.2f}" in lines[2]
    no_target = report_power(settings, {**comparison, "target": None}, comparisons=20)
    assert no_target["measured"] is None
    assert report_power_lines(no_target)[1] == "At what the runs show: no target, so no spread of crossings to measure."
    one = report_power(
        settings,
        {**comparison, "arms": {"grpo": {"steps_to_target": grpo[:1]}, "pods": {"steps_to_target": pods}}},
        comparisons=20,
    )
    assert one["measured"]["arms"]["pods"]["power"] is None
    assert "too few crossings to measure the power" in report_power_lines(one)[2]
    # A baseline whose median run never crossed keeps the planned pace, and says so.
    slow = [hit(4.0), hit(10.0, censored=True), hit(10.0, censored=True)]
    kept = report_power(
        settings,
        {**comparison, "arms": {"grpo": {"steps_to_target": slow}, "pods": {"steps_to_target": pods}}},
        comparisons=20,
    )
    assert (kept["measured"]["median_crossing"], kept["measured"]["reaches"]) == (None, 0.9)
    assert "did not cross the target; the powers below keep the planned pace" in report_power_lines(kept)[1]
    # An absolute target (target_accuracy, no fraction): its share of the baseline's gain, (0.4 - 0.25) / 0.2 = 0.75.
    absolute = {**comparison, "target": {**comparison["target"], "fraction": None}}
    assert report_power(settings, absolute, comparisons=20)["measured"]["reaches"] == pytest.approx(reaches)


def test_the_runs_pace_is_the_median_crossing_on_an_exponential_curve():
    """measured_reaches: the median over seeds (a censored run counts as never), then the exponential curve's share
    of its gain at the horizon; brute force against the curve 1 - exp(-t / tau) through the median crossing."""
    import math

    from pods_rl.compare.power import measured_reaches

    def hit(crossing, censored=False):
        return {"crossing": crossing, "censored": censored}

    median, reaches = measured_reaches([hit(20.0), hit(10.0), hit(30.0)], 0.75, 200.0)
    tau = 20.0 / math.log(4)  # 1 - exp(-20 / tau) = 0.75
    assert median == 20.0 and reaches == pytest.approx(1 - math.exp(-200.0 / tau))
    assert measured_reaches([hit(10.0), hit(30.0)], 0.5, 40.0) == (20.0, pytest.approx(0.75))
    assert measured_reaches([hit(10.0), hit(40.0, True), hit(40.0, True)], 0.75, 40.0) is None  # median never crossed
    assert measured_reaches([hit(0.0), hit(0.0), hit(5.0)], 0.75, 40.0) is None  # crossed at the start
    assert measured_reaches([hit(0.001)], 0.75, 1e6)[1] == 1 - 1e-9
    assert measured_reaches([], 0.75, 40.0) is None
