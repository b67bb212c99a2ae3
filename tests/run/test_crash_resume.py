"""Crash safety: a run killed at any moment (SIGKILL), or stopped by SIGTERM, resumes to what an uninterrupted run
of the same seed produces: the same metrics records, parameters, optimizer and scheduler state."""

import json
import os
import shutil
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

import pods_rl.models
from pods_rl.cli import app
from pods_rl.run.checkpoints import damage, resume_point
from pods_rl.run.lock import HOST, RUN_LOCK

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
    assert resume_point(out) == (out / "checkpoint-2", None)  # the staging folder is no candidate

    process = start(["train", "--resume", str(out)])  # from checkpoint-2; killed again mid-run, after step 5
    wait_for(lambda: 5 in logged_steps(out), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / "_tmp-checkpoint-4").exists()  # the stale staging folder was removed on resume
    assert resume_point(out) == (out / "checkpoint-4", None)

    # Killed outright, the run left its lock behind, naming a process that is gone: taken over with a warning.
    assert json.loads((out / RUN_LOCK).read_text())["pid"] == process.pid
    result = runner.invoke(app, ["train", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    stale = f"warning: {out / RUN_LOCK} named process {process.pid} on host {HOST} (since "
    assert sum(line.startswith(stale) for line in result.output.splitlines()) == 1, result.output
    assert_same_as(reference, out)
    assert not (out / RUN_LOCK).exists()


def test_sigterm_saves_a_checkpoint_and_exits(tiny_model_dir, reference, tmp_path, monkeypatch):
    out = tmp_path / "run"
    process = start(train_args(tiny_model_dir, out))
    wait_for(lambda: 3 in logged_steps(out), process)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
    assert "stopped by SIGTERM" in output
    step = logged_steps(out)[-1]  # the step it was in when the signal came
    assert 3 <= step < MAX_STEPS and resume_point(out) == (out / f"checkpoint-{step}", None)
    assert not (out / RUN_LOCK).exists()  # stopped cleanly: the lock was given back
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


def copy_of(reference: Path, tmp_path: Path) -> Path:
    """A copy of the reference run, to damage."""
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    return out


def truncate(path: Path, size: int | None = None) -> None:
    """Cut the file at `size` bytes (half of it by default): a copy that stopped, a disk that filled."""
    os.truncate(path, path.stat().st_size // 2 if size is None else size)


DAMAGES = {
    "truncated weights": (
        lambda c: truncate(c / "model.safetensors", 1000),
        "model.safetensors: not safetensors (Error while deserializing header: invalid header length)",
    ),
    "weights cut in their data": (
        lambda c: truncate(c / "model.safetensors"),
        "model.safetensors: not safetensors (Error while deserializing header: incomplete metadata, file not fully "
        "covered)",
    ),
    "garbage data state": (
        lambda c: (c / "pods_data_state.json").write_bytes(b"\x00\x9c garbage"),
        "pods_data_state.json: not JSON ('utf-8' codec can't decode byte 0x9c in position 1: invalid start byte)",
    ),
    "data state without its position": (
        lambda c: (c / "pods_data_state.json").write_text('{"epoch": 1}'),
        "pods_data_state.json: lacks position",
    ),
    "truncated optimizer": (
        lambda c: truncate(c / "optimizer.pt"),
        "optimizer.pt: not a complete torch archive (File is not a zip file)",
    ),
    "missing scheduler": (lambda c: (c / "scheduler.pt").unlink(), "scheduler.pt is missing"),
    "no trainer state (an incomplete copy)": (
        lambda c: (c / "trainer_state.json").unlink(),
        "trainer_state.json is missing",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGES))
def test_a_damaged_checkpoint_is_named_with_the_file_and_what_is_wrong(reference, tmp_path, case):
    """Each damage in the newest checkpoint: the check names the file, `--resume` takes the checkpoint before it."""
    out = copy_of(reference, tmp_path)
    assert damage(out / "checkpoint-6") is None and damage(out / "checkpoint-4") is None
    damage_it, problem = DAMAGES[case]
    damage_it(out / "checkpoint-6")
    assert damage(out / "checkpoint-6") == problem
    assert resume_point(out) == (
        out / "checkpoint-4",
        f"checkpoint-6 ({problem}) is damaged: resuming from checkpoint-4, so steps 5-6 are trained again.",
    )


@pytest.mark.parametrize("case", ["truncated weights"])
def test_resume_falls_back_past_a_damaged_checkpoint_to_the_same_run(reference, tmp_path, case):
    """Damage in the newest checkpoint (it was a traceback): one warning line, the resume continues from the
    checkpoint before, drops the records after it and ends as the uninterrupted run did. One damage trains here (the
    issue's); every damage's detection and fallback point is checked above without training."""
    out = copy_of(reference, tmp_path)
    damage_it, problem = DAMAGES[case]
    damage_it(out / "checkpoint-6")
    result = runner.invoke(app, ["train", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: checkpoint-6 ({problem}) is damaged: resuming from checkpoint-4, so steps 5-6 are trained again."
    ]
    assert_same_as(reference, out)  # records 5 and 6 once each; checkpoint-6 written again, whole


def test_resume_refuses_in_one_line_when_no_checkpoint_is_intact(reference, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(pods_rl.models, "load_model", fail)
    out = copy_of(reference, tmp_path)
    truncate(out / "checkpoint-6" / "optimizer.pt")
    (out / "checkpoint-4" / "pods_data_state.json").write_text("{not json")
    metrics = (out / "metrics.jsonl").read_text()
    result = runner.invoke(app, ["train", "--resume", str(out)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: --resume {out}: no checkpoint is intact (checkpoint-6: optimizer.pt: not a complete torch archive "
        "(File is not a zip file); checkpoint-4: pods_data_state.json: not JSON (Expecting property name enclosed in "
        f"double quotes: line 1 column 2 (char 1))); start the run again with `pods train --config {out}/config.yaml "
        f"--output-dir {out} --overwrite`, which replaces its records."
    ]
    assert (out / "metrics.jsonl").read_text() == metrics
    assert not (out / RUN_LOCK).exists()


def test_staging_folders_are_never_resumed_from(reference, tmp_path):
    """A staging folder (a save that was killed) is no candidate, however complete it looks."""
    out = copy_of(reference, tmp_path)
    shutil.copytree(out / "checkpoint-6", out / "_tmp-checkpoint-8" / "checkpoint-8")
    shutil.copytree(out / "checkpoint-6", out / "_tmp-checkpoint-10")
    assert resume_point(out) == (out / "checkpoint-6", None)


def test_an_asynchronous_checkpoint_needs_trls_rollout_position_and_the_groups_it_trained(tmp_path):
    """An asynchronous run's checkpoint holds TRL's rollout position and `async_state.json`, not the synchronous
    trainer's data and sampler state: each is required (and its keys) when, and only when, the run is asynchronous."""
    from safetensors.torch import save_file

    checkpoint = tmp_path / "run" / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 3, "stateful_callbacks": {}}))
    save_file({"w": torch.zeros(2)}, str(checkpoint / "adapter_model.safetensors"))
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        torch.save({"x": 1}, checkpoint / name)
    (checkpoint / "rollout_state.json").write_text(json.dumps({"prompt_index": 9, "model_version": 4}))
    (checkpoint / "async_state.json").write_text(json.dumps({"start": 0, "trained_groups": [], "dropped_groups": []}))
    assert damage(checkpoint, asynchronous=True) is None
    assert damage(checkpoint) == "pods_data_state.json is missing"
    assert resume_point(tmp_path / "run", asynchronous=True) == (checkpoint, None)
    (checkpoint / "rollout_state.json").write_text(json.dumps({"model_version": 4}))
    assert damage(checkpoint, asynchronous=True) == "rollout_state.json: lacks prompt_index"
    (checkpoint / "async_state.json").unlink()
    assert damage(checkpoint, asynchronous=True) == "async_state.json is missing"
