import json

import pytest
import yaml
from typer.testing import CliRunner

from pods_rl.cli import app

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
    assert "final accuracy" in (out / "report.md").read_text()
    assert list((out / "tensorboard").iterdir())


def test_resume_continues_step_count(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    assert quick_train(tiny_model_dir, out, "--set", "trainer.max_steps=2").exit_code == 0
    # Extend the finished run: raise max_steps in its config, then resume from checkpoint-2.
    config = yaml.safe_load((out / "config.yaml").read_text())
    config["trainer"]["max_steps"] = 4
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    result = runner.invoke(app, ["train", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert [r["step"] for r in records(out, "step")] == [1, 2, 3, 4]
    assert [e["step"] for e in records(out, "eval")] == [0, 2, 4]
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


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
