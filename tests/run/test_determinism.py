"""Two CPU runs of the default settings with the same seed give the same metrics, record for record."""

import json
from pathlib import Path

from support import without_wall_times
from typer.testing import CliRunner

from pods_rl.cli import app

runner = CliRunner()
# The default run (selection rule, n, m, learning rate...), shortened: two steps of 4 prompts, a smaller evaluation.
SHORT = [
    "--max-steps", "2", "--eval-every", "1",
    "--set", "trainer.per_device_train_batch_size=16",
    "--set", "trainer.max_completion_length=24",
    "--set", "task_options.num_train=64",
    "--set", "eval.num_examples=16",
    "--set", "trainer.report_to=[]",
]  # fmt: skip


def records_without_timing(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [without_wall_times(record) for record in records]


def test_same_seed_same_metrics(tiny_model_dir, tmp_path):
    runs = []
    for name in ("first", "second"):
        out = tmp_path / name
        result = runner.invoke(app, ["train", "--model", str(tiny_model_dir), "--output-dir", str(out), *SHORT])
        assert result.exit_code == 0, result.output
        runs.append(records_without_timing(out))
    first, second = runs
    assert [(r["type"], r["step"]) for r in first] == [("eval", 0), ("eval", 1), ("step", 1), ("eval", 2), ("step", 2)]
    assert first == second
