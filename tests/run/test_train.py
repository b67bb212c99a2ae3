import dataclasses
import importlib.util
import json
import os
import re

import pytest
import torch
import yaml
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.machine import describe_machine, machine_label

runner = CliRunner()

QUICK = [
    "--set", "trainer.per_device_train_batch_size=8",
    "--set", "trainer.max_completion_length=24",
    "--set", "trainer.save_steps=2",
    "--set", "task_options.num_train=64",
    "--set", "task_options.num_test=16",
    "--set", "trainer.report_to=[tensorboard]",
]  # fmt: skip


def quick_train(model_dir, out, *extra: str):
    args = ["train", "--model", str(model_dir), "--output-dir", str(out), "-n", "4", "-m", "2"]
    return runner.invoke(app, [*args, "--max-steps", "4", "--eval-every", "2", *QUICK, *extra])


def records(out, kind):
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def test_train_writes_every_output(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    result = quick_train(tiny_model_dir, out)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    for key in ("base_accuracy", "final_accuracy", "peak_accuracy", "train_seconds", "steps"):
        assert key in summary
    assert summary["steps"] == 4
    assert 0 <= summary["base_accuracy"] <= 1 and summary["train_seconds"] > 0
    assert summary["machine"] == describe_machine()  # seconds are only comparable on one machine
    assert summary["precision"]["dtype"] in ("fp32", "bf16")  # and the precision they were taken in
    assert json.loads((out / "precision.json").read_text()) == summary["precision"]
    steps = records(out, "step")
    evals = records(out, "eval")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    assert [e["step"] for e in evals] == [0, 2, 4]
    assert all(f"pods/time_{phase}" in steps[0] for phase in ("generate", "score", "select", "update"))
    assert steps[-1]["train_seconds"] == pytest.approx(summary["train_seconds"])
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["trainer"]["num_selected"] == 2 and config["model"] == str(tiny_model_dir)
    assert (out / "final" / "model.safetensors").exists()
    assert (out / "checkpoint-4" / "model.safetensors").exists()
    assert (out / "accuracy.png").stat().st_size > 1000
    report = (out / "report.md").read_text()
    assert "final accuracy" in report and f"| machine | {machine_label(describe_machine())} |" in report
    assert list((out / "tensorboard").iterdir())
    # The console ends with one line (summary.json keeps every field), not a JSON dump.
    base, final, seconds = 100 * summary["base_accuracy"], 100 * summary["final_accuracy"], summary["train_seconds"]
    shown = f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"  # tests/run/test_report.py has both cases
    assert result.output.splitlines()[-1] == (
        f"done: {base:.1f}% -> {final:.1f}% ({final - base:+.1f} points) in {shown} s of training "
        f"({summary['precision']['dtype']}); report: {out / 'report.md'}"
    )
    assert '"base_accuracy"' not in result.output


def test_resume_applies_new_stopping_and_eval_settings(tiny_model_dir, tmp_path):
    """`--resume DIR --max-steps 5 --eval-every 3` extends a finished run, evaluates on the new schedule, and
    records the change in config.yaml."""
    out = tmp_path / "run"
    assert quick_train(tiny_model_dir, out, "--set", "trainer.max_steps=2").exit_code == 0
    result = runner.invoke(app, ["train", "--resume", str(out), "--max-steps", "5", "--eval-every", "3"])
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in records(out, "step")] == [1, 2, 3, 4, 5]
    assert [e["step"] for e in records(out, "eval")] == [0, 2, 3, 5]  # the end of each part, and the grid 3, 6, ...
    assert json.loads((out / "summary.json").read_text())["steps"] == 5
    text = (out / "config.yaml").read_text()
    config = yaml.safe_load(text)
    assert config["trainer"]["max_steps"] == 5 and config["eval"]["every_steps"] == 3
    note = text.splitlines()[0]
    assert note.startswith("# resumed at step 2 on ")
    assert note.endswith("with eval.every_steps: 2 -> 3, trainer.max_steps: 2 -> 5")


def test_overwrite_replaces_a_previous_run_and_the_console_stays_quiet(tiny_model_dir, tmp_path):
    """A default-like run over an earlier run: the old files are gone, and the console shows the plan, progress
    lines and results only: no warnings, no raw log dicts, no third-party progress bars. The log file has the rest."""
    out = tmp_path / "run"
    assert quick_train(tiny_model_dir, out, "--set", "trainer.max_steps=2").exit_code == 0
    (out / "checkpoint-2" / "marker").write_text("old run")
    result = quick_train(tiny_model_dir, out, "--overwrite")
    assert result.exit_code == 0, result.output
    assert not (out / "checkpoint-2" / "marker").exists()
    assert [r["step"] for r in records(out, "step")] == [1, 2, 3, 4]
    console = result.output
    for unwanted in ("Warning", "warn(", "{'loss'", "{'", "Writing model shards", "it/s]", "Traceback", "INFO"):
        assert unwanted not in console, unwanted
    lines = console.splitlines()
    assert lines[0].startswith(f"run: {tiny_model_dir} on arithmetic, PODS (max_variance), seed 0 -> {out}")
    assert lines[1].startswith("defaults: CPU-sized defaults")  # a model off the presets, on a CPU
    assert "per step: 4 prompts x n=4 = 16 rollouts of up to 24 tokens generated, m=2 per prompt = 8 rows" in lines[2]
    assert "until: 4 steps; evaluation: 16 held-out examples, greedy pass@1, every 2 steps" in lines[3]
    assert lines[5].startswith("precision: ")
    first = [line for line in lines if line.startswith("step 1 took ")]
    assert len(first) == 1 and first[0].endswith("; the first step includes start-up)")  # no estimate from it
    assert any(line.startswith("step 2 took ") and "min of training left at this pace" in line for line in lines)
    progress = [line for line in lines if line.startswith("training ")]
    counts = [line.split()[1] for line in progress]  # a slow step may repeat its line (the 30 s heartbeat)
    assert list(dict.fromkeys(counts)) == ["1/4", "2/4", "3/4", "4/4"] and counts == sorted(counts)
    assert sum(line.startswith("step ") and "held-out accuracy" in line for line in lines) == 3
    assert len(lines) - len(progress) < 30  # the plan (with precision and expected time), results, summary
    log = (out / "train.log").read_text()
    assert "INFO transformers" in log


def test_time_budget_progress_counts_time_not_the_step_limit(tiny_model_dir, tmp_path):
    """Under a time budget, with `pods compare`'s placeholder step limit, the console's progress counts seconds of
    training out of the budget, not steps out of a million."""
    out = tmp_path / "run"
    budget = ["--time-budget", "3", "--set", "trainer.max_steps=1000000", "--set", "eval.every_steps=1000"]
    result = quick_train(tiny_model_dir, out, *budget)
    assert result.exit_code == 0, result.output
    progress = [line for line in result.output.splitlines() if line.startswith("training ")]
    assert progress and all(re.fullmatch(r"\d:\d\d/0:03", line.split()[1]) for line in progress), progress
    minutes, seconds = progress[-1].split()[1].split("/")[0].split(":")
    assert 60 * int(minutes) + int(seconds) >= 3  # the last line: the step that crossed the budget
    assert json.loads((out / "summary.json").read_text())["train_seconds"] >= 3


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM (`make vllm`'s environment)")
def test_vllm_run_console_stays_quiet(tmp_path):
    """A short `pods train --vllm` in a fresh process (as a user runs it, so that vLLM is imported inside the run):
    the console shows the plan, progress and results; vLLM's import and engine messages (its loggers, Triton's
    notice, the C++ engine's NUMA warning) and its weight-loading bars go to train.log. `make test-vllm` runs it."""
    import subprocess
    import sys

    from pods_rl.models.tiny import VLLM_RECIPE, build_tiny

    model = build_tiny(dataclasses.replace(VLLM_RECIPE, sft_steps=3), cache_dir=tmp_path / "models")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "pods_rl", "train", "--vllm", "--model", str(model), "--output-dir", str(out)]
    options = ["-n", "4", "-m", "2", "--max-steps", "1", "--set", "eval.every_steps=null", *QUICK]
    options += ["--set", "task_options.num_test=4", "--set", "trainer.vllm_max_model_length=128"]
    # An engine started earlier in this pytest process set (and holds) its rendezvous port: let this run pick its own.
    rendezvous = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")
    env = {key: value for key, value in os.environ.items() if key not in rendezvous}
    done = subprocess.run([*command, *options], capture_output=True, text=True, check=False, env=env)
    console = done.stdout + done.stderr
    assert done.returncode == 0, console
    for unwanted in ("Triton", "NUMA", "Loading safetensors", "INFO", "WARNING", "Warning", "it/s]", "%|"):
        assert unwanted not in console, unwanted
    assert "generation: vLLM (colocate)" in console and f"report: {out / 'report.md'}" in console
    assert "INFO vllm." in (out / "train.log").read_text()


def test_config_file_and_overrides(tiny_model_dir, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"learning_rate": 5.0e-5, "num_generations": 8}, "seed": 3}))
    out = tmp_path / "run"
    result = quick_train(tiny_model_dir, out, "--config", str(config), "--set", "trainer.learning_rate=2e-4")
    assert result.exit_code == 0, result.output
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["trainer"]["learning_rate"] == 2e-4  # the command line wins over the file
    assert resolved["trainer"]["num_generations"] == 4  # the -n option wins over the file
    assert resolved["seed"] == 3


def test_eval_command(tiny_model_dir, tmp_path):
    out = tmp_path / "eval.json"
    result = runner.invoke(app, ["eval", "--model", str(tiny_model_dir), "--num-examples", "8", "--output", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["num_examples"] == 8 and 0 <= saved["accuracy"] <= 1


AVX2_PRECISION = (
    "precision: fp32 (AVX2 CPU without bf16 instructions (AMX-BF16, AVX512-BF16); --set trainer.bf16=true forces bf16)"
)


def cpu_with(monkeypatch, *flags: str) -> None:
    """The CPU's flags as the precision rule reads them."""
    import pods_rl.run.step_costs

    monkeypatch.setattr(pods_rl.run.step_costs, "cpu_flags", lambda: frozenset({"avx", "avx2", *flags}))


def test_dry_run_states_the_plan_and_touches_nothing(tmp_path, monkeypatch):
    import pods_rl.models

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    cpu_with(monkeypatch)
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "--dry-run", "--output-dir", str(out), "--time-budget", "600"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines == [
        f"run: tiny on arithmetic, PODS (max_variance), seed 0 -> {out}",
        "per step: 16 prompts x n=16 = 256 rollouts of up to 32 tokens generated, m=4 per prompt = 64 rows trained; "
        "learning rate 0.0001",
        "until: 250 steps or 600 s of training; evaluation: 200 held-out examples, greedy pass@1, every 50 steps",
        "generation: HF generate; evaluation: HF generate",
        AVX2_PRECISION,
    ]
    assert not out.exists()
    dynamic = ["--set", "trainer.dynamic_sampling=true", "--set", "trainer.max_generation_rounds=4"]
    result = runner.invoke(app, ["train", "--dry-run", "--output-dir", str(out), *dynamic])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        "run: tiny on arithmetic, PODS (max_variance) with dynamic sampling (up to 4 generation rounds of these per "
        f"step), seed 0 -> {out}"
    )


AVX512_REASON = "AVX-512 CPU: vLLM's CPU build measured 1.3x faster per step there; --no-vllm turns it off"
AVX2_REASON = "AVX2 CPU without AVX-512: vLLM's CPU build measured 2.2x slower per step there; --vllm forces it"


@pytest.mark.parametrize(
    ("gpu", "vllm", "flags", "options", "generation"),
    [
        (False, False, "avx512f", [], "HF generate"),
        (True, False, "avx512f", [], None),
        (False, True, "avx512f", [], f"vLLM (colocate) ({AVX512_REASON})"),
        (False, True, "avx512f", ["--no-vllm"], "HF generate"),
        (False, True, "avx2", [], f"HF generate ({AVX2_REASON})"),
        (False, True, "avx2", ["--vllm"], "vLLM (colocate)"),
    ],
    ids=["cpu", "gpu", "avx512 vllm", "avx512 --no-vllm", "avx2 vllm", "avx2 --vllm"],
)
def test_dry_run_of_smollm2_names_the_cpu_preset(tmp_path, monkeypatch, gpu, vllm, flags, options, generation):
    """`pods train --model smollm2-135m` on a CPU plans the CPU preset and says so, generating with vLLM where it is
    installed and the CPU has AVX-512 (and saying why) unless told otherwise; on a GPU, the generic sizes."""
    import pods_rl.defaults
    import pods_rl.models
    import pods_rl.versions

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(pods_rl.defaults, "accelerator_available", lambda: gpu)
    monkeypatch.setattr(pods_rl.defaults, "vllm_installed", lambda: vllm)
    monkeypatch.setattr(pods_rl.defaults, "cpu_flags", lambda: frozenset({"avx", "avx2", flags}))
    monkeypatch.setattr(pods_rl.versions, "vllm_installed", lambda: vllm)
    cpu_with(monkeypatch, flags)
    out = tmp_path / "run"
    command = ["train", "--model", "smollm2-135m", "--dry-run", "--output-dir", str(out), *options]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    if gpu:
        assert not any(line.startswith("defaults:") for line in lines)
        assert "4 prompts x n=16 = 64 rollouts of up to 512 tokens" in lines[1]
        return
    assert lines == [
        f"run: smollm2-135m on arithmetic, PODS (max_variance), seed 0 -> {out}",
        "defaults: the CPU preset of smollm2-135m on arithmetic (no accelerator found); your settings override it",
        "per step: 2 prompts x n=8 = 16 rollouts of up to 64 tokens generated, m=2 per prompt = 4 rows trained; "
        "learning rate 2e-05",
        "until: 50 steps; evaluation: 50 held-out examples, greedy pass@1, every 25 steps",
        f"generation: {generation}; evaluation: "
        + ("on the same vLLM engine" if generation.startswith("vLLM") else "HF generate"),
        f"precision: fp32 ({'AVX-512' if flags == 'avx512f' else 'AVX2'} CPU without bf16 instructions (AMX-BF16, "
        "AVX512-BF16); --set trainer.bf16=true forces bf16)",
    ]
    assert not out.exists()


@pytest.mark.slow
def test_dynamic_sampling_metrics_land_in_the_step_records(tiny_model_dir, tmp_path):
    """`--set trainer.dynamic_sampling=true`: every step record carries what the rounds generated, and the
    generated-rollout count that `pods compare` and the cost model read counts every round."""
    out = tmp_path / "run"
    result = quick_train(tiny_model_dir, out, "--set", "trainer.dynamic_sampling=true")
    assert result.exit_code == 0, result.output
    steps = records(out, "step")
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    prompts_per_round = 8 // 2  # 8 trained rows, m = 2
    for step in steps:
        rounds = step["pods/generation_rounds"]
        assert rounds in (1, 2, 3)  # max_generation_rounds defaults to 3
        assert step["pods/prompts_generated"] == rounds * prompts_per_round
        assert step["pods/rollouts_generated"] == rounds * prompts_per_round * 4
        assert step["pods/rollouts_trained"] == 8
        assert step["pods/rollouts_per_trained_row"] == step["pods/rollouts_generated"] / 8
        assert 0 <= step["pods/groups_dropped_frac"] <= 1


def test_dry_run_of_smollm2_on_three_term_sums_names_that_preset(tmp_path, monkeypatch):
    import pods_rl.defaults
    import pods_rl.models

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(pods_rl.defaults, "accelerator_available", lambda: False)
    monkeypatch.setattr(pods_rl.defaults, "vllm_installed", lambda: False)
    out = tmp_path / "run"
    command = ["train", "--model", "smollm2-135m", "--task", "arithmetic-3term", "--dry-run", "--output-dir", str(out)]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1] == (
        "defaults: the CPU preset of smollm2-135m on arithmetic-3term (no accelerator found); your settings override it"
    )
    assert lines[2] == (
        "per step: 4 prompts x n=16 = 64 rollouts of up to 64 tokens generated, m=4 per prompt = 16 rows trained; "
        "learning rate 1e-05"
    )
    assert lines[3] == "until: 30 steps; evaluation: 200 held-out examples, greedy pass@1, every 10 steps"


def test_dry_run_off_the_presets_on_a_cpu_plans_cpu_sized_steps_and_their_time(tmp_path, monkeypatch):
    """Any model and task without a preset gets CPU-sized defaults on a CPU, and the plan says so; once its step was
    measured on this machine, the plan gives the time of a step and of the run, and warns when that is hours."""
    import pods_rl.defaults
    import pods_rl.models
    import pods_rl.run.step_costs

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(pods_rl.defaults, "accelerator_available", lambda: False)
    cpu_with(monkeypatch, "avx512f", "avx512_bf16")
    out = tmp_path / "run"
    command = ["train", "--model", "smollm2-135m", "--task", "reasoning-gym:chain_sum", "--dry-run"]
    command += ["--output-dir", str(out)]
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"run: smollm2-135m on reasoning-gym:chain_sum, PODS (max_variance), seed 0 -> {out}",
        "defaults: CPU-sized defaults (rollouts, completion length, steps, evaluation) for smollm2-135m on "
        "reasoning-gym:chain_sum (no accelerator found); your settings override them",
        "per step: 2 prompts x n=8 = 16 rollouts of up to 128 tokens generated, m=2 per prompt = 4 rows trained; "
        "learning rate 5e-06",
        "until: 50 steps; evaluation: 50 held-out examples, greedy pass@1, every 25 steps",
        "generation: HF generate; evaluation: HF generate",
        "precision: fp32 or bf16, measured once the model has loaded (AVX512-BF16 CPU; a few seconds, once per "
        "machine, model and step shape)",
    ]
    measured = {"fp32": {"generate": 30.0, "update": 10.0}, "bf16": {"generate": 24.0, "update": 6.0}}
    monkeypatch.setattr(pods_rl.run.step_costs, "cached_costs", lambda key: measured)
    result = runner.invoke(app, [*command, "--max-steps", "1000"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[5:] == [
        "precision: bf16 autocast over fp32 weights (AVX512-BF16 CPU: a step measured 40.00 s in fp32, 30.00 s in "
        "bf16 for this model and shape, 1.33x; --set trainer.bf16=false forces fp32)",
        "expected: about 30.0 s a step at most (generating 16 rollouts of up to 128 tokens 24.0 s, updating on 4 rows "
        "6.0 s, in bf16; completions at full length), about 8.3 hours for 1000 steps; evaluation not counted",
        "warning: at the measured pace this run trains for about 8.3 hours: fewer steps (--max-steps), a "
        "--time-budget or a shorter trainer.max_completion_length make it shorter",
    ]
    assert not out.exists()


def test_a_dry_run_shows_a_measured_precision_only_for_the_setting_measured(tmp_path, monkeypatch):
    """The start-up measurement holds for the task options and LoRA adapter it was taken with: after the plain run's
    measurement, a dry run with other task options or with LoRA plans a measurement of its own."""
    import pods_rl.models
    import pods_rl.run.step_costs

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    cpu_with(monkeypatch, "avx512f", "avx512_bf16")
    keys = []
    cached_costs = pods_rl.run.step_costs.cached_costs
    monkeypatch.setattr(pods_rl.run.step_costs, "cached_costs", lambda key: keys.append(key) or cached_costs(key))
    command = ["train", "--dry-run", "--output-dir", str(tmp_path / "run")]
    assert runner.invoke(app, command).exit_code == 0
    measured = {"fp32": {"generate": 1.5, "update": 0.5}, "bf16": {"generate": 0.5, "update": 0.5}}
    pods_rl.run.step_costs.save_costs(keys[-1], measured)  # what the plain run measured
    bf16 = (
        "precision: bf16 autocast over fp32 weights (AVX512-BF16 CPU: a step measured 2.00 s in fp32, 1.00 s in bf16 "
        "for this model and shape, 2.00x; --set trainer.bf16=false forces fp32)"
    )
    to_measure = (
        "precision: fp32 or bf16, measured once the model has loaded (AVX512-BF16 CPU; a few seconds, once per "
        "machine, model and step shape)"
    )
    for options, expected in [
        ([], bf16),
        (["--set", "task_options.digits=3"], to_measure),
        (["--lora-r", "8"], to_measure),
    ]:
        result = runner.invoke(app, [*command, *options])
        assert result.exit_code == 0, result.output
        assert [line for line in result.output.splitlines() if line.startswith("precision:")] == [expected], options


def test_a_dry_run_warns_of_bf16_forced_on_a_cpu_without_bf16_instructions(tmp_path, monkeypatch):
    """bf16 on a CPU without AMX-BF16 or AVX512-BF16 runs emulated, slower than fp32: forced there, it gets a warning
    line; forced where the CPU has the instructions, none."""
    import pods_rl.models

    monkeypatch.setattr(pods_rl.models, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    command = ["train", "--dry-run", "--output-dir", str(tmp_path / "run"), "--set", "trainer.bf16=true"]
    forced = "precision: bf16 autocast over fp32 weights (trainer.bf16=true)"
    cpu_with(monkeypatch)
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[4:] == [
        forced,
        "warning: this CPU has no bf16 instructions (AMX-BF16, AVX512-BF16): torch emulates bf16 on it, slower than "
        "fp32; --set trainer.bf16=false forces fp32",
    ]
    cpu_with(monkeypatch, "avx512f", "avx512_bf16")
    result = runner.invoke(app, command)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[4:] == [forced]


def test_bf16_where_measured_faster_evaluates_in_fp32_and_a_resumed_run_keeps_its_precision(
    tiny_model_dir, tmp_path, monkeypatch
):
    """On a CPU with bf16 instructions whose measured step is faster in bf16, the run trains in bf16 (no measurement
    when the cache holds the step), evaluates in fp32, records its precision in summary.json and precision.json; resumed
    after the cache changed its mind, it keeps bf16."""
    import pods_rl.evaluation
    import pods_rl.run.step_costs
    from pods_rl.trainer import PODSTrainer

    cpu_with(monkeypatch, "avx512f", "avx512_bf16")
    measured = {"fp32": {"generate": 1.5, "update": 0.5}, "bf16": {"generate": 0.5, "update": 0.5}}
    monkeypatch.setattr(pods_rl.run.step_costs, "cached_costs", lambda key: measured)
    monkeypatch.setattr(pods_rl.run.step_costs, "measure_step", lambda *a, **k: pytest.fail("measured again"))
    trained_in, evaluated_under_autocast = [], []
    autocast = PODSTrainer._generation_autocast

    def spy_generation(self):
        trained_in.append(self.args.bf16)
        return autocast(self)

    evaluate = pods_rl.evaluation.evaluate

    def spy_evaluate(model, *args, **kwargs):
        hook = model.model.layers[0].mlp.register_forward_pre_hook(
            lambda *_: evaluated_under_autocast.append(torch.is_autocast_enabled("cpu"))
        )
        try:
            return evaluate(model, *args, **kwargs)
        finally:
            hook.remove()

    monkeypatch.setattr(PODSTrainer, "_generation_autocast", spy_generation)
    monkeypatch.setattr(pods_rl.evaluation, "evaluate", spy_evaluate)
    out = tmp_path / "run"
    result = quick_train(tiny_model_dir, out, "--set", "trainer.max_steps=2")
    assert result.exit_code == 0, result.output
    reason = (
        "AVX512-BF16 CPU: a step measured 2.00 s in fp32, 1.00 s in bf16 for this model and shape, 2.00x; "
        "--set trainer.bf16=false forces fp32"
    )
    assert f"precision: bf16 autocast over fp32 weights ({reason})" in result.output.splitlines()
    assert trained_in == [True, True]
    assert evaluated_under_autocast and not any(evaluated_under_autocast)
    record = {"dtype": "bf16", "reason": reason, "step_seconds": {"fp32": 2.0, "bf16": 1.0}, "measured": measured}
    assert json.loads((out / "summary.json").read_text())["precision"] == record
    assert json.loads((out / "precision.json").read_text()) == record

    measured = {"fp32": measured["bf16"], "bf16": measured["fp32"]}  # now fp32 would be chosen
    trained_in.clear()
    result = runner.invoke(app, ["train", "--resume", str(out), "--max-steps", "3"])
    assert result.exit_code == 0, result.output
    resumed = f"precision: bf16 autocast over fp32 weights (as the run started: {reason})"
    assert resumed in result.output.splitlines()
    assert trained_in == [True]
    assert json.loads((out / "summary.json").read_text())["precision"]["dtype"] == "bf16"
