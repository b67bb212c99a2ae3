"""One process per run folder (`pods_rl.run.lock`): a second `pods train` on a folder that a live process trains is
refused in one line and leaves its records alone; a lock whose process is gone is taken over with a warning."""

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.run.lock import HOST, RUN_LOCK, FolderLock

runner = CliRunner()
# A run that trains for minutes unless stopped, a checkpoint every 2 steps, and evaluates only at its end.
LONG_RUN = [
    "-n", "4", "-m", "2", "--max-steps", "1000",
    "--set", "trainer.per_device_train_batch_size=4",
    "--set", "trainer.max_completion_length=8",
    "--set", "trainer.save_steps=2",
    "--set", "trainer.report_to=[]",
    "--set", "task_options.num_train=16",
    "--set", "task_options.num_test=4",
    "--set", "eval.every_steps=null",
    "--set", "trainer.bf16=false",
]  # fmt: skip
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pods_rl.run.lock import FolderLock

    FolderLock(sys.argv[1]).acquire()
    print("held", flush=True)
    time.sleep(60)
    """
)


def dead_pid() -> int:
    """The id of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


def test_the_lock_holds_a_record_and_release_removes_it_and_the_folder_it_made(tmp_path):
    folder = tmp_path / "runs" / "new"
    lock = FolderLock(folder)
    assert lock.acquire() is None
    record = json.loads((folder / RUN_LOCK).read_text())
    assert record["pid"] == lock.record["pid"] and record["host"] == HOST and record["started"]
    lock.release()
    assert not folder.exists()  # a start that failed before writing anything leaves nothing behind

    folder.mkdir()
    (folder / "config.yaml").write_text("model: tiny\n")
    lock = FolderLock(folder)
    lock.acquire()
    lock.release()
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]


def test_a_folder_held_by_a_live_process_is_refused_naming_it(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        started = json.loads((tmp_path / RUN_LOCK).read_text())["started"]
        expected = (
            f"--resume {tmp_path}: process {holder.pid} on host {HOST} (since {started}) is training this run "
            f"folder; stop it first, or remove {tmp_path / RUN_LOCK} if no such process runs."
        )
        for probe in (FolderLock(tmp_path).check, FolderLock(tmp_path).acquire):
            with pytest.raises(ValueError) as refused:
                probe("--resume")
            assert str(refused.value) == expected
    finally:
        holder.kill()
        holder.wait()
    # Killed outright: the system dropped its flock, and its record names a process that is gone.
    lock = FolderLock(tmp_path)
    stale = lock.acquire("--resume")
    assert stale is not None and stale["pid"] == holder.pid
    assert lock.stale_message(stale) == (
        f"{tmp_path / RUN_LOCK} named process {holder.pid} on host {HOST} (since {started}), which is gone: its "
        "lock is taken over."
    )
    assert json.loads((tmp_path / RUN_LOCK).read_text())["pid"] == lock.record["pid"]
    lock.release()


def test_a_record_from_another_host_counts_as_held(tmp_path):
    """Its process cannot be checked from here (a shared filesystem): refused, with the way out."""
    record = {"pid": dead_pid(), "host": "elsewhere", "started": "2026-12-05 10:00:00"}
    (tmp_path / RUN_LOCK).write_text(json.dumps(record))
    with pytest.raises(ValueError, match=f"process {record['pid']} on host elsewhere .* remove {tmp_path / RUN_LOCK}"):
        FolderLock(tmp_path).acquire()
    (tmp_path / RUN_LOCK).write_text(json.dumps({**record, "host": HOST}))
    assert FolderLock(tmp_path).holder() is None  # on this host, and gone: stale


def test_a_second_pods_train_on_a_folder_in_training_is_refused_and_leaves_its_records(tiny_model_dir, tmp_path):
    """Two real processes: a `pods train` in training holds its folder; `--resume` and `--overwrite` of it are
    refused in one line naming it, before any model loads, and its metrics.jsonl keeps every record. Killed, its
    lock is stale: the next `--resume` takes it over with a warning and continues the run."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "pods_rl", "train", "--model", str(tiny_model_dir), "--output-dir", str(out)]
    first = subprocess.Popen([*command, *LONG_RUN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "checkpoint-2" / "trainer_state.json").exists():
            assert first.poll() is None, first.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.1)
        started = json.loads((out / RUN_LOCK).read_text())["started"]
        before = (out / "metrics.jsonl").read_text()
        holder = f"process {first.pid} on host {HOST} (since {started}) is training this run folder"
        # Short runs, should the lock let them in: a failure then ends in seconds.
        for option, args in (
            ("--resume", ["train", "--resume", str(out), "--max-steps", "3"]),
            ("--output-dir", ["train", "--model", str(tiny_model_dir), "--output-dir", str(out), "--overwrite"]),
        ):
            result = runner.invoke(app, [*args, *([] if option == "--resume" else [*LONG_RUN, "--max-steps", "2"])])
            assert result.exit_code == 2, result.output
            assert one_line(result.output) == (
                f"error: {option} {out}: {holder}; stop it first, or remove {out / RUN_LOCK} if no such process runs."
            )
        assert first.poll() is None  # still training
        assert (out / "metrics.jsonl").read_text().startswith(before)  # nothing truncated
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()

    newest = max(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    result = runner.invoke(app, ["train", "--resume", str(out), "--max-steps", str(newest + 1)])
    assert result.exit_code == 0, result.output
    warning = f"warning: {out / RUN_LOCK} named process {first.pid} on host {HOST} (since {started}), which is gone"
    assert sum(line.startswith(warning) for line in result.output.splitlines()) == 1, result.output
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if r["type"] == "step"] == list(range(1, newest + 2))
    assert not (out / RUN_LOCK).exists()  # released at the end
