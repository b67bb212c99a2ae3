"""Stopping `pods compare` stops the `pods train` run it started, and no two processes train one comparison folder.

The comparison runs in a real process (signals need one); its `pods train` is a stand-in script that records the
signals it gets and, like `pods train`, saves and exits with 128 + the signal's number.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from compare_fakes import fake_pods_train
from rich.console import Console
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.compare import runner as compare_runner
from pods_rl.compare.settings import resolve_compare

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path

    run_dir = Path(sys.argv[1])
    run_dir.mkdir(parents=True, exist_ok=True)

    def stop(number, frame):
        with open(run_dir / "received", "a") as handle:
            handle.write(signal.Signals(number).name + "\\n")
        (run_dir / "saved").write_text("checkpoint")  # as pods train saves before it exits
        sys.exit(128 + number)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    (run_dir / "pinned").write_text(os.environ.get("PODS_RL_PINNED_MODELS", "unset"))
    (run_dir / "started").write_text("")
    time.sleep(60)
    """
)

PARENT = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from pods_rl.compare import runner

    out, child = Path(sys.argv[1]), sys.argv[2]
    runner._train_command = lambda config, run_dir: [sys.executable, child, str(run_dir)]

    class Settings:
        def to_dict(self):
            return {}

    out.mkdir()
    lock = runner.ComparisonLock(out)
    lock.acquire()
    try:  # as run_comparison does
        runner._train_in_subprocess(Settings(), out / "pods" / "seed-0", lock)
    except runner.ComparisonStopped as stopped:
        print(stopped, flush=True)
        sys.exit(128 + stopped.signal_number)
    finally:
        lock.release()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


@pytest.fixture
def comparison(tmp_path):
    """A comparison process whose run has started: (process, its run folder, the run's process id)."""
    (tmp_path / "child.py").write_text(CHILD)
    (tmp_path / "parent.py").write_text(PARENT)
    out = tmp_path / "cmp"
    process = subprocess.Popen(
        [sys.executable, str(tmp_path / "parent.py"), str(out), str(tmp_path / "child.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job: killpg reaches it and not pytest
    )
    run_dir = out / "pods" / "seed-0"
    try:
        _wait(lambda: (run_dir / "started").exists() or process.poll() is not None)
        assert process.poll() is None, process.stdout.read()
        _wait(lambda: json.loads((out / "compare.lock").read_text()).get("child") is not None)
        child = json.loads((out / "compare.lock").read_text())["child"]
        yield process, run_dir, child
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_comparison_is_passed_on_to_its_run_once(comparison, number):
    process, run_dir, child = comparison
    if number == signal.SIGINT:
        os.killpg(process.pid, number)  # Ctrl-C in a terminal: the whole foreground group
    else:
        process.send_signal(number)  # kill -TERM <compare pid>
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 128 + number, output
    assert f"stopped by {number.name}: the run in {run_dir} was passed the signal" in output
    # The run got the signal once (its own session keeps a terminal's Ctrl-C from reaching it twice), saved, and
    # is gone: nothing trains on, orphaned.
    assert (run_dir / "received").read_text() == f"{number.name}\n"
    assert (run_dir / "saved").exists()
    # The run's tiny model is the one pinned in the comparison's folder, whatever CPU it runs on.
    assert (run_dir / "pinned").read_text() == str(run_dir.parents[1] / "base-models")
    _wait(lambda: not _alive(child), 10)
    assert not (run_dir.parents[1] / "compare.lock").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_comparison_killed_outright_still_stops_its_run(comparison):
    process, run_dir, child = comparison
    process.kill()  # SIGKILL: no handler runs
    process.wait()
    _wait(lambda: (run_dir / "received").exists(), 10)
    assert (run_dir / "received").read_text() == "SIGTERM\n"
    _wait(lambda: not _alive(child), 10)


def test_resume_refuses_a_folder_another_live_process_trains(tmp_path, monkeypatch):
    monkeypatch.setattr(compare_runner, "_train_in_subprocess", fake_pods_train())
    out = tmp_path / "cmp"
    shape = {"seeds": [0], "lr_grid": [1e-5], "tuning_seeds": [7], "n": 4, "m": 2, "prompts_per_step": 2}
    settings = resolve_compare(None, [shape], only=["grpo", "pods"])
    compare_runner.run_comparison(settings, out, console=Console(quiet=True))
    assert not (out / "compare.lock").exists()  # released when the comparison ended

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for record in (
            {"pid": sleeper.pid, "child": None, "run": None},  # the comparison itself is alive
            {"pid": 2**22 + 1, "child": sleeper.pid, "run": str(out / "pods" / "seed-0")},  # its orphaned run is
        ):
            (out / "compare.lock").write_text(json.dumps({**record, "started": "2026-12-05 10:00:00"}))
            result = CliRunner().invoke(app, ["compare", "--resume", str(out)])
            assert result.exit_code == 2
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"error: --resume {out}: another comparison is training")
            assert f"process {record['pid']}" in lines[0] and "since 2026-12-05 10:00:00" in lines[0]
    finally:
        sleeper.kill()
        sleeper.wait()
    # Both processes gone: the lock is stale, taken over, and released at the end.
    result = CliRunner().invoke(app, ["compare", "--resume", str(out)])
    assert result.exit_code == 0, result.output
    assert "done earlier, kept" in result.output and not (out / "compare.lock").exists()
