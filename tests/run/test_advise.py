"""`pods advise`: the run's settings resolved as `pods train` resolves them, passes counted on the trainer's weighted
rewards, bad input refused in one line before anything heavy loads, and a run on the tiny model that writes
advice.json with every documented field."""

import json
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from pods_rl.advice.forecast import METHODS, Setup, forecast
from pods_rl.cli import _cli_overrides, app
from pods_rl.compare.cost_model import REFERENCE_COSTS, StepCost
from pods_rl.run.advise import plan_advice, read_cost_model, sample_passes
from pods_rl.run.settings import SettingsError

runner = CliRunner()
HEAVY_MODULES = ("torch", "transformers", "trl", "datasets", "reasoning_gym", "vllm", "peft")


class ScriptedTrainer:
    """A trainer whose `_generate_rows` generates nothing: the first `passes` rollouts of a prompt (its row's field)
    score 1 x 0.4 + 0.5 x 0.3 = 0.55 on two reward functions (a pass at 0.5), the rest 0.4 + 0.5 x 0.1 = 0.45, and a
    prompt marked `unscorable` gets no score at all (NaN, as TRL stores a reward function's None)."""

    def __init__(self):
        self.reward_weights = torch.tensor([1.0, 0.5])
        self.model = torch.nn.Linear(1, 1).eval()
        self.calls = []

    def _generate_rows(self, inputs, per_prompt):
        self.calls.append((len(inputs), per_prompt))
        rewards = []
        for start in range(0, len(inputs), per_prompt):
            row = inputs[start]
            for index in range(per_prompt):
                if row.get("unscorable"):
                    rewards.append([float("nan")] * 2)
                else:
                    rewards.append([0.4, 0.3] if index < row["passes"] else [0.4, 0.1])
        return {"completion_ids": [[1, 2, 3]] * len(inputs)}, torch.tensor(rewards), {}


def test_passes_are_counted_on_the_weighted_rewards_in_batches_of_whole_prompts():
    trainer = ScriptedTrainer()
    rows = [{"passes": s} for s in (0, 1, 3, 4)] + [{"passes": 4, "unscorable": True}]
    sampled = sample_passes(trainer, rows, samples=4, threshold=0.5, call_rows=10)
    assert sampled["successes"] == [0, 1, 3, 4, 0]  # an unscorable rollout fails
    assert sampled["unscorable"] == 4 and sampled["rollouts"] == 20 and sampled["tokens"] == 60
    assert trainer.calls == [(8, 4), (8, 4), (4, 4)]  # 2 prompts of 4 rollouts a call (10 // 4)
    assert sampled["value_counts"] == [[4], [1, 3], [3, 1], [4], [4]]  # the distinct weighted rewards' multiplicities
    assert trainer.model.training  # TRL generates `num_generations` per prompt in training mode
    # The threshold is what decides: at 0.56 nothing passes, at 0.45 everything scorable does.
    assert sample_passes(ScriptedTrainer(), rows, 4, 0.56, 10)["successes"] == [0] * 5
    assert sample_passes(ScriptedTrainer(), rows, 4, 0.45, 10)["successes"] == [4, 4, 4, 4, 0]


def plan(*options: str, **named):
    """`pods advise`'s plan for these command-line options (the default model: the tiny preset)."""
    return plan_advice(
        None,
        _cli_overrides(set=list(options)),
        prompts=named.get("prompts"),
        samples=named.get("samples"),
        output_dir=named.get("output_dir"),
        cost_model=named.get("cost_model"),
    )


def test_the_plan_holds_the_runs_settings_and_the_forecasts_defaults(tmp_path):
    """The tiny preset (n = 16, m = 4, 64 rows a step, completions of 32 tokens) under --set, as `pods train` has it;
    P = 32 and K = max(n, 16) by default; the trainer's own dynamic-sampling and allocation settings."""
    made = plan("trainer.temperature=0.7", "trainer.max_generation_rounds=5", output_dir=tmp_path / "a")
    assert made.settings.trainer["temperature"] == 0.7 and made.settings.trainer["max_completion_length"] == 32
    assert (made.prompts, made.samples, made.success_threshold) == (32, 16, 0.5)
    assert made.setup() == Setup(n=16, m=4, prompts_per_step=16, max_generation_rounds=5)
    assert made.setup().screen == 4  # m, as the shipped allocation comparisons screen
    screened = plan("trainer.rollout_allocation=screen", "trainer.screen_size=3", output_dir=tmp_path / "b")
    assert screened.setup().screen == 3
    history = plan(
        "trainer.rollout_allocation=history",
        "trainer.success_threshold=0.8",
        "trainer.history_exploration=0.3",
        output_dir=tmp_path / "c",
    )
    assert history.success_threshold == 0.8 and history.setup().history_exploration == 0.3
    assert plan(output_dir=tmp_path / "d", samples=40, prompts=5).samples == 40
    assert str(plan().output_dir).startswith("runs/") and str(plan().output_dir).endswith("-arithmetic-tiny-advise")


def test_a_folder_of_other_files_is_refused_and_a_forecasts_folder_is_reused(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(SettingsError, match=r"holds files but no forecast \(no advice\.json\)"):
        plan(output_dir=other)
    (tmp_path / "again").mkdir()
    (tmp_path / "again" / "advice.json").write_text("{}")
    assert plan(output_dir=tmp_path / "again").output_dir == tmp_path / "again"


def test_a_cost_model_reads_from_a_file_or_by_name(tmp_path):
    printed = tmp_path / "gpu.yaml"  # what benchmarks/gpu_check.py prints
    printed.write_text(
        "cost_models:  # for compare.yaml: pods compare projects its steps to target onto this step cost\n"
        "  - {name: 'my GPU', source: benchmarks/gpu_check.py, per_step: 7.8, per_generated: 0.0049, "
        "per_trained: 0.0078, trained_per_step: 64}\n"
    )
    assert read_cost_model(str(printed)) == StepCost("my GPU", "benchmarks/gpu_check.py", 7.8, 0.0049, 0.0078, 64)
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"name": "x", "per_step": 1, "per_generated": 0.1, "trained_per_step": 8}))
    assert read_cost_model(str(single)).per_trained is None
    assert read_cost_model("H200 (0.5B)") == REFERENCE_COSTS[0]
    two = tmp_path / "two.yaml"
    two.write_text(printed.read_text() + "  - {name: b, per_step: 1, per_generated: 0.1, trained_per_step: 8}\n")
    with pytest.raises(SettingsError, match="holds 2 step costs"):
        read_cost_model(str(two))


BAD_INPUT = {
    "m > n": (["-n", "4", "-m", "5"], "trainer.num_selected (m) must satisfy 2 <= m <= num_generations (n=4), got 5"),
    "m = n": (["-n", "4", "-m", "4"], "pods advise compares training on m of n rollouts with GRPO m/m: give m < n"),
    "samples < n": (["--samples", "8"], "--samples (8) must be at least n = 16"),
    "no prompts": (["--prompts", "0"], "--prompts must be at least 1, got 0."),
    "unknown task": (["--task", "chess"], "task: unknown task 'chess'; available: arithmetic"),
    "unknown model": (["--model", "no-such-model"], "Unknown model 'no-such-model': use a built-in model"),
    "mistyped --set": (["--set", "trainer.temprature=0.5"], "unknown key trainer.temprature (did you mean"),
    "--set without a value": (["--set", "trainer.beta"], "Override 'trainer.beta' must look like KEY=VALUE"),
    "fractional successes": (
        ["--set", "trainer.rollout_allocation=history", "--set", "trainer.success_threshold=null"],
        "pods advise counts passes: trainer.success_threshold must be a number",
    ),
    "missing cost model": (
        ["--cost-model", "no/such/costs.yaml"],
        "--cost-model no/such/costs.yaml: no such file, nor a built-in step cost ('H200 (0.5B)', 'paper (L40S)').",
    ),
    "malformed cost model": (["--cost-model", "{bad}"], "is not a step cost"),
}


def test_bad_input_fails_in_one_line_before_anything_heavy(tmp_path):
    """Every case in one fresh interpreter: exit status 2, one line starting `error:`, no folder made, and none of
    torch, transformers, TRL, datasets, reasoning-gym, vLLM or peft imported (so no model was built)."""
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text("{name: only-a-name}\n")
    cases = {
        name: [a.replace("{bad}", str(bad_file)) for a in args]
        + ["--output-dir", str(tmp_path / name.replace(" ", "-"))]
        for name, (args, _) in BAD_INPUT.items()
    }
    code = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from pods_rl.cli import app\n"
        f"cases = {cases!r}\n"
        "results = {name: (r.exit_code, r.output) for name, args in cases.items() "
        "for r in [CliRunner().invoke(app, ['advise', *args])]}\n"
        f"print(json.dumps([results, sorted(m for m in {HEAVY_MODULES!r} if m in sys.modules)]))\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "WORLD_SIZE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    results, imported = json.loads(done.stdout)
    assert imported == []
    for name, (_, message) in BAD_INPUT.items():
        status, output = results[name]
        lines = [line for line in output.splitlines() if line.strip()]
        assert status == 2 and lines[0].startswith("error: ") and "Traceback" not in output, (name, output)
        assert message in " ".join(output.split()), (name, output)
        assert not (tmp_path / name.replace(" ", "-")).exists()


def test_advise_on_the_tiny_model_writes_the_forecast(tiny_model_dir, tmp_path):
    """A few prompts of the tiny model: advice.json holds the documented fields, its prompts are the first the run's
    sampler yields for the seed, and its figures are the forecast of its own counts at its own step cost."""
    from pods_rl.tasks import load_task

    out = tmp_path / "advice"
    options = ["--set", "task_options.num_train=40", "--set", "task_options.num_test=4"]
    options += ["--set", "trainer.max_completion_length=12"]
    args = ["advise", "--model", str(tiny_model_dir), "--task", "arithmetic", "-n", "4", "-m", "2"]
    result = runner.invoke(app, [*args, "--prompts", "3", "--samples", "8", "--output-dir", str(out), *options])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "advice.json").read_text())
    assert {"model", "task", "setup", "pass", "sample", "cost", "signal", "methods", "ranking", "advice"} <= set(record)
    assert record["setup"]["n"] == 4 and record["setup"]["m"] == 2 and record["setup"]["prompts_per_step"] == 2
    assert record["pass"]["success_threshold"] == 0.5
    assert record["pass"]["reward_functions"] == ["accuracy", "format", "tags"]
    sample = record["sample"]
    assert sample["prompts"] == 3 and sample["samples_per_prompt"] == 8
    assert all(0 <= s <= 8 for s in sample["successes"]) and len(sample["successes"]) == 3
    train = load_task("arithmetic", num_train=40, num_test=4).train
    first = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:3].tolist()
    assert sample["questions"] == [train[i]["prompt"][-1]["content"] for i in first]
    cost = StepCost(**record["cost"])
    assert cost.name == "this machine" and cost.per_generated > 0 and cost.per_trained > 0 and cost.per_step == 0
    assert [m["name"] for m in record["methods"]] == list(METHODS)
    assert sorted(record["ranking"]) == sorted(METHODS)
    expected = forecast(sample["successes"], [8] * 3, Setup(n=4, m=2, prompts_per_step=2), cost)
    for method, again in zip(record["methods"], expected, strict=True):
        for field in ("generated", "trained", "informative_share", "signal", "seconds_per_step", "signal_per_second"):
            assert method[field] == pytest.approx(getattr(again, field.replace("_per_step", ""))), field
        assert set(method["versus_grpo"]) >= {"break_even_share", "forecast_step_share", "interval_95"}
    assert record["advice"].startswith("On this machine")
    assert "written:" in result.output and "advice:" in result.output
