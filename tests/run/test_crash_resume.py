"""Crash safety: a run killed at any moment (SIGKILL), or stopped by SIGTERM, resumes to what an uninterrupted run
of the same seed produces: the same metrics records, parameters, optimizer and scheduler state."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import without_wall_times
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.run.train import last_checkpoint

runner = CliRunner()
MAX_STEPS = 6
RUN = [
    "-n", "4", "-m", "2", "--max-steps", str(MAX_STEPS), "--eval-every", "2",
    "--set", "trainer.per_device_train_batch_size=4",
    "--set", "trainer.max_completion_length=16",
    "--set", "trainer.save_steps=2",
    "--set", "trainer.save_total_limit=2",
    "--set", "trainer.report_to=[]",
    "--set", "task_options.num_train=8",  # 2 prompts a step: 4 steps an epoch, so resumes cross an epoch's end
    "--set", "task_options.num_test=8",
    # One precision for every run: the reference (a module fixture) and each test keep separate start-up
    # measurements, and on a busy CPU with bf16 instructions two measurements can choose differently.
    "--set", "trainer.bf16=false",
]  # fmt: skip
# `pods train`, stalled inside the staging write of one checkpoint (after the model and optimizer were written),
# so that the test can kill it exactly there.
STALLED_CHECKPOINT = """
import sys, time
from pathlib import Path
from pods_rl.cli import app
from pods_rl.trainer import PODSTrainer
step, marker = int(sys.argv.pop(1)), Path(sys.argv.pop(1))
save_rng_state = PODSTrainer._save_rng_state
def stalled(self, output_dir):
    save_rng_state(self, output_dir)
    if self.state.global_step == step:
        marker.touch()
        time.sleep(600)
PODSTrainer._save_rng_state = stalled
app()
"""


def train_args(model_dir: Path, out: Path) -> list[str]:
    return ["train", "--model", str(model_dir), "--output-dir", str(out), *RUN]


def start(args: list[str], *prefix: str) -> subprocess.Popen:
    command = [sys.executable, *(prefix or ("-m", "pods_rl")), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, process.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def logged_steps(out: Path) -> list[int]:
    """Steps of the step records written so far (a line being written is skipped)."""
    path = out / "metrics.jsonl"
    steps = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["type"] == "step":
            steps.append(record["step"])
    return steps


def comparable_records(out: Path) -> dict[tuple[str, int], dict]:
    """metrics.jsonl by (type, step), without timing fields; fails on a duplicated record."""
    records = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        key = (record["type"], record["step"])
        assert key not in records, f"duplicated record {key}"
        records[key] = without_wall_times(record)
    return records


def assert_same_as(reference: Path, out: Path) -> None:
    """Same records, final parameters, optimizer and scheduler state as the uninterrupted reference run."""
    assert json.loads((out / "summary.json").read_text())["steps"] == MAX_STEPS
    records = comparable_records(out)
    assert sorted(key for key in records if key[0] == "step") == [("step", s) for s in range(1, MAX_STEPS + 1)]
    assert records == comparable_records(reference)
    final = load_file(out / "final" / "model.safetensors")
    expected = load_file(reference / "final" / "model.safetensors")
    assert final.keys() == expected.keys()
    for name in final:
        torch.testing.assert_close(final[name], expected[name], rtol=0, atol=0, msg=name)
    checkpoint = f"checkpoint-{MAX_STEPS}"
    for state in ("optimizer.pt", "scheduler.pt"):
        loaded = torch.load(out / checkpoint / state, weights_only=True)
        torch.testing.assert_close(loaded, torch.load(reference / checkpoint / state, weights_only=True))
    assert not list(out.glob("_tmp-*"))


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory) -> Path:
    """The uninterrupted run every interrupted one must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "run"
    result = runner.invoke(app, train_args(tiny_model_dir, out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]  # save_total_limit
    return out


def test_sigkill_during_checkpoint_write_and_mid_run(tiny_model_dir, reference, tmp_path):
    out, marker = tmp_path / "run", tmp_path / "stalled"
    process = start(train_args(tiny_model_dir, out), "-c", STALLED_CHECKPOINT, "4", str(marker))
    wait_for(marker.exists, process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert (out / "_tmp-checkpoint-4").exists() and not (out / "checkpoint-4").exists()
    assert last_checkpoint(out) == out / "checkpoint-2"

    process = start(["train", "--resume", str(out)])  # from checkpoint-2; killed again mid-run, after step 5
    wait_for(lambda: 5 in logged_steps(out), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "_tmp-checkpoint-4").exists()  # the stale staging folder was removed on resume
    assert last_checkpoint(out) == out / "checkpoint-4"

    result = runner.invoke(app, ["train", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert_same_as(reference, out)


def test_sigterm_saves_a_checkpoint_and_exits(tiny_model_dir, reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    process = start(train_args(tiny_model_dir, out))
    wait_for(lambda: 3 in logged_steps(out), process)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped by SIGTERM" in output
    step = logged_steps(out)[-1]  # the step it was in when the signal came
    assert 3 <= step < MAX_STEPS and last_checkpoint(out) == out / f"checkpoint-{step}"
    assert not (out / "summary.json").exists()

    loads = []  # every pickle read on resume must refuse anything but tensors and plain data
    torch_load = torch.load

    def recording_load(*args, **kwargs):
        loads.append((Path(args[0]).name, kwargs.get("weights_only")))
        return torch_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", recording_load)
    result = runner.invoke(app, ["train", "--resume", str(out)])
    monkeypatch.undo()
    assert result.exit_code == 0, result.output
    assert {name for name, _ in loads} >= {"optimizer.pt", "scheduler.pt", "rng_state.pth"}
    assert all(weights_only is True for _, weights_only in loads), loads
    assert_same_as(reference, out)


def test_incomplete_checkpoints_are_never_resumed_from(tmp_path):
    for name in ("checkpoint-2", "checkpoint-4", "_tmp-checkpoint-8"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-6").mkdir()  # no trainer_state.json: not written by a complete save
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-4"
