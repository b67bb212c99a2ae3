"""`pods train --async` end to end: a real vLLM server process (vLLM's CPU build, `.venv-vllm`), TRL's asynchronous
GRPO with PODS's selection in its rollout worker, LoRA adapters sent to the server by path. `make test-vllm` runs
these; elsewhere they are skipped.

What is checked: every group the worker scored is re-selected from its recorded rewards by brute force (the kept
completions have the largest variance of any m of n, the advantages are GRPO's over them) and equals what was queued;
a group dynamic sampling dropped is never trained; staleness stays within its bound; SIGTERM stops the run after a
checkpoint and leaves no process behind (the server, its engine, TRL's rollout worker); `--resume` continues from
that checkpoint past the groups already trained or dropped.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None or importlib.util.find_spec("aiohttp") is None,
        reason="needs vLLM and aiohttp (`make vllm`'s environment)",
    ),
]

N, M = 4, 2
QUICK = ["--set", "task_options.num_test=4", "--set", "eval.every_steps=null", "--set", "eval.batch_size=4"]
SMALL = ["--set", "trainer.per_device_train_batch_size=8", "--set", "trainer.max_completion_length=16"]
# An engine started earlier in a pytest process sets (and holds) its rendezvous port: each process picks its own.
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE")


def environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key not in RENDEZVOUS}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from pods_rl.models.tiny import VLLM_RECIPE, build_tiny

    return build_tiny(dataclasses.replace(VLLM_RECIPE, sft_steps=3), cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """One vLLM server for the runs that are given its URL (each run names its adapters on its own)."""
    from pods_rl.run.async_train import SERVER_ENV_DEFAULTS, free_port
    from pods_rl.run.vllm_server import ServerProcess, ServerSpec

    spec = ServerSpec(
        model=str(model_dir), python=sys.executable, port=free_port(), max_model_len=128, lora_rank=8,
        max_loras=4, dtype="float32", extra_args=("--enforce-eager",),
    )  # fmt: skip
    log = tmp_path_factory.mktemp("server") / "server.log"
    with ServerProcess(spec.command(), {**SERVER_ENV_DEFAULTS, **spec.env(environment())}, spec.url, log) as process:
        yield process.url


def pods_train(model_dir: Path, out: Path, *options: str) -> list[str]:
    command = [sys.executable, "-m", "pods_rl", "train", "--async", "--model", str(model_dir), "--lora-r", "8"]
    return [*command, "-n", str(N), "-m", str(M), "--output-dir", str(out), *QUICK, *SMALL, *options]


def run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment(), timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def records(out: Path) -> list[dict]:
    from pods_rl.trainer.async_worker import read_group_records

    return read_group_records(out / "async_groups.jsonl")


def scores(record: dict, weights: list[float]) -> np.ndarray:
    values = np.array([[math.nan if v is None else v for v in row] for row in record["rewards"]], dtype=np.float64)
    return np.nansum(values * np.array(weights), axis=1)


def check_reselection(out: Path, m: int) -> list[dict]:
    """Each group kept m completions whose scores have the largest variance of any m (brute force), with GRPO's
    advantages over them (unbiased std + 1e-4); returns the records."""
    from pods_rl.rewards import REWARD_WEIGHTS

    recorded = records(out)
    assert recorded
    for record in recorded:
        if record["dropped"]:
            assert record["kept"] == [] and record["advantages"] == []
            continue
        values = scores(record, list(REWARD_WEIGHTS))
        kept = record["kept"]
        assert len(kept) == m and kept == sorted(set(kept))
        best = max(np.var(values[list(subset)]) for subset in itertools.combinations(range(len(values)), m))
        assert np.var(values[kept]) == pytest.approx(best, abs=1e-12)
        chosen = values[kept]
        expected = (chosen - chosen.mean()) / (chosen.std(ddof=1) + 1e-4)
        np.testing.assert_allclose(record["advantages"], expected, rtol=1e-9, atol=1e-12)
    return recorded


def alive_after(pids: set[int], grace: float) -> list[tuple[int, list[str]]]:
    """The processes of `pids` still running (not zombies) after up to `grace` seconds for them to finish exiting
    (a helper such as multiprocessing's resource tracker ends when it reads its users' end, just after them)."""
    import psutil

    deadline = time.monotonic() + grace
    while True:
        alive = []
        for pid in pids:
            try:
                process = psutil.Process(pid)
                if process.status() != psutil.STATUS_ZOMBIE:
                    alive.append((pid, process.cmdline()))
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_pods_run_queues_exactly_the_reselection(model_dir, server, tmp_path):
    out = tmp_path / "pods"
    console = run(pods_train(model_dir, out, "--max-steps", "3", "--set", f"asynchronous.server_url={server}"))
    assert "asynchronous" in console and f"report: {out / 'report.md'}" in console
    recorded = check_reselection(out, M)
    state = json.loads((out / "async_state.json").read_text())
    scored = {record["group"] for record in recorded}
    assert state["trained_groups"] and set(state["trained_groups"]) <= scored
    assert len(state["trained_groups"]) >= 3 * 8 // M  # at least a step's groups per step
    assert json.loads((out / "summary.json").read_text())["steps"] == 3
    stale = [record["sample/staleness_max"] for record in metrics(out) if "sample/staleness_max" in record]
    assert stale and max(stale) <= 2  # asynchronous.max_staleness's default
    assert (out / "final" / "adapter_config.json").exists()


def test_dynamic_sampling_stop_and_resume(model_dir, server, tmp_path):
    """GRPO 4/4 with dynamic sampling, its own server started by the run: dropped groups never trained; SIGTERM after
    the first checkpoint stops the run, its server and its worker; `--resume` (on the shared server) finishes it."""
    import psutil

    out = tmp_path / "ds"
    options = ["-m", str(N), "--set", "trainer.dynamic_sampling=true", "--set", "trainer.save_steps=1"]
    process = subprocess.Popen(
        [*pods_train(model_dir, out, "--max-steps", "6"), *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
    )  # fmt: skip
    seen: set[int] = set()
    deadline = time.monotonic() + 600
    while not (out / "checkpoint-1" / "async_state.json").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stdout.read()
        seen |= {child.pid for child in psutil.Process(process.pid).children(recursive=True)}
        time.sleep(0.5)
    seen |= {child.pid for child in psutil.Process(process.pid).children(recursive=True)}
    process.send_signal(signal.SIGTERM)
    console = process.communicate(timeout=300)[0]
    assert process.returncode == 128 + signal.SIGTERM, console
    assert "stopped by SIGTERM" in console
    assert len(seen) >= 3  # the server, its engine core, TRL's rollout worker (and their helpers)
    assert alive_after(seen, grace=20.0) == []

    first = check_reselection(out, N)
    dropped = {record["group"] for record in first if record["dropped"]}
    assert dropped, "the barely trained model's groups mostly score alike: some must be dropped"
    stopped_at = max(int(path.name.split("-")[1]) for path in out.glob("checkpoint-*"))
    state = json.loads((out / f"checkpoint-{stopped_at}" / "async_state.json").read_text())
    assert not set(state["trained_groups"]) & set(state["dropped_groups"])
    done = set(state["trained_groups"]) | set(state["dropped_groups"])
    position = json.loads((out / f"checkpoint-{stopped_at}" / "rollout_state.json").read_text())["prompt_index"]
    assert position == next(g for g in itertools.count() if g not in done)  # dropped groups count as done

    run([sys.executable, "-m", "pods_rl", "train", "--resume", str(out), "--set", f"asynchronous.server_url={server}"])
    assert json.loads((out / "summary.json").read_text())["steps"] == 6
    resumed = [record for record in check_reselection(out, N) if record["start"] == position]
    assert resumed, "the resumed worker starts at the checkpoint's position"
    final = json.loads((out / "async_state.json").read_text())
    assert final["start"] == position
    assert not set(final["trained_groups"]) & {r["group"] for r in resumed if r["dropped"]}


def test_compare_races_an_asynchronous_arm_priced_like_a_synchronous_one(model_dir, server, tmp_path):
    """`pods compare` with a synchronous GRPO arm and `pods-async` (given the shared server): both finish, and the
    report prices the asynchronous arm per step from the same logged phases (generation = the trainer's wait)."""
    import yaml

    config = tmp_path / "compare.yaml"
    settings = {
        "model": str(model_dir), "task": "arithmetic", "task_options": {"num_test": 4}, "lora": {"r": 8},
        "n": N, "m": M, "prompts_per_step": 4, "seeds": [0], "time_budget": None, "primary": "steps_to_target",
        "trainer": {"max_steps": 3, "save_strategy": "no", "max_completion_length": 16},
        "eval": {"every_steps": 1, "every_seconds": None, "batch_size": 4},
        "arms": {"grpo": {"n": "m"}, "pods-async": {"rule": "max_variance", "asynchronous": {"server_url": server}}},
    }  # fmt: skip
    config.write_text(yaml.safe_dump(settings))
    out = tmp_path / "compare"
    run([sys.executable, "-m", "pods_rl", "compare", "--config", str(config), "--output-dir", str(out)])
    report = json.loads((out / "comparison.json").read_text())
    pods, grpo = report["arms"]["pods-async"], report["arms"]["grpo"]
    assert pods["steps"]["per_seed"] == [3] and grpo["steps"]["per_seed"] == [3]
    assert pods["per_step"]["rollouts_trained"] == grpo["per_step"]["rollouts_trained"] == 4 * M
    assert pods["per_step"]["rollouts_generated"] > 0  # what the worker scored while each step trained
    assert pods["seconds_per_step"]["total"] > 0
    steps = [record for record in metrics(out / "pods-async" / "seed-0") if record["type"] == "step"]
    assert all(step["pods/time_generate"] == step["perf/rollout_wait_s"] for step in steps)
