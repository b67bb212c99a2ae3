"""Asynchronous against synchronous training on this machine: per step, the time the trainer waited for samples and
the time generation sat idle (issue 67 item 6; docs/async.md#what-it-buys).

    .venv-vllm/bin/python benchmarks/async_waits.py [--steps 20] [--methods grpo pods] [--modes sync async]

Each (method, mode) is one `pods train` run of the tiny model (its vLLM shape, LoRA r 8, 16 prompts and 64 trained
rows a step, completions up to 32 tokens): GRPO 4/4 and PODS 16 -> 4; synchronous with vLLM in the process
(`--vllm`: generate, then update, in turn) and asynchronous (`--async`: a vLLM server beside the trainer).

- Synchronous: the trainer waits while its engine generates and the rewards are scored (`pods/time_generate` +
  `pods/time_score`); generation idles while the trainer selects and updates (`pods/time_select` +
  `pods/time_update`).
- Asynchronous: the trainer's wait is TRL's `perf/rollout_wait_s`; the server's idle time is sampled every 0.1 s
  from its `/metrics` (no request running), split by step with the run's metrics file; the weight sync (LoRA
  adapter saved, loaded by the server, generation paused meanwhile) is TRL's `perf/weight_sync_s`.

The first `--warmup` steps (start-up) are left out; each figure is the median over the rest. Run it on an otherwise
idle machine, one run at a time (it does that itself).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

METHODS = {"grpo": (4, 4), "pods": (16, 4)}
MODES = ("sync", "async")
PROMPTS, TOKENS = 16, 32
COMMON = [
    "--lora-r", "8", "--set", "task_options.num_test=4", "--set", "eval.every_steps=null",
    "--set", f"trainer.per_device_train_batch_size={PROMPTS * 4}", "--set", f"trainer.max_completion_length={TOKENS}",
    "--set", "trainer.save_strategy=no",
]  # fmt: skip


class IdlePoller(threading.Thread):
    """Polls a vLLM server's /metrics: (time, steps logged so far, requests running) every `every` seconds."""

    def __init__(self, url: str, metrics_file: Path, every: float = 0.1):
        super().__init__(daemon=True)
        self.url, self.metrics_file, self.every = url, metrics_file, every
        self.samples: list[tuple[float, int, float]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                text = urllib.request.urlopen(f"{self.url}/metrics", timeout=2).read().decode()
            except OSError:
                time.sleep(self.every)
                continue
            running = sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("vllm:num_requests_running")
            )
            self.samples.append((time.monotonic(), steps_logged(self.metrics_file), running))
            time.sleep(self.every)


def steps_logged(metrics_file: Path) -> int:
    if not metrics_file.exists():
        return 0
    return sum('"type": "step"' in line for line in metrics_file.read_text().splitlines())


def step_records(out: Path) -> list[dict]:
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if record.get("type") == "step"]


def run_sync(model: str, n: int, m: int, steps: int, out: Path) -> list[dict]:
    command = [sys.executable, "-m", "pods_rl", "train", "--vllm", "--model", model, "-n", str(n), "-m", str(m)]
    subprocess.run([*command, "--max-steps", str(steps), *COMMON, "--output-dir", str(out)], check=True,
                   capture_output=True)  # fmt: skip
    rows = []
    for record in step_records(out):
        wait = record["pods/time_generate"] + record["pods/time_score"]
        idle = record["pods/time_select"] + record["pods/time_update"]
        rows.append({"step": record["step"], "wait": wait, "idle": idle, "sync": 0.0})
    return rows


def run_async(model: str, n: int, m: int, steps: int, out: Path) -> list[dict]:
    from pods_rl.run.async_train import SERVER_ENV_DEFAULTS, free_port
    from pods_rl.run.vllm_server import ServerProcess, ServerSpec

    spec = ServerSpec(model=model, python=sys.executable, port=free_port(), max_model_len=128, lora_rank=8,
                      max_loras=4, dtype="float32", extra_args=("--enforce-eager",))  # fmt: skip
    env = {**SERVER_ENV_DEFAULTS, **spec.env()}
    out.mkdir(parents=True, exist_ok=True)
    with ServerProcess(spec.command(), env, spec.url, out.parent / f"{out.name}-server.log") as server:
        poller = IdlePoller(server.url, out / "metrics.jsonl")
        poller.start()
        command = [sys.executable, "-m", "pods_rl", "train", "--async", "--model", model, "-n", str(n), "-m", str(m)]
        command += ["--max-steps", str(steps), *COMMON, "--set", f"asynchronous.server_url={server.url}"]
        subprocess.run([*command, "--output-dir", str(out)], check=True, capture_output=True)
        poller.done.set()
        poller.join()
    rows = []
    for record in step_records(out):
        during = [(t, running) for t, logged, running in poller.samples if logged == record["step"] - 1]
        idle = None
        if len(during) >= 2:
            span = during[-1][0] - during[0][0]
            idle = span * sum(running == 0 for _, running in during) / len(during)
        sync = record.get("perf/weight_sync_s") or 0.0  # every step: weight_sync_steps is 1
        rows.append({"step": record["step"], "wait": record["perf/rollout_wait_s"], "idle": idle, "sync": sync})
    return rows


def measure(method: str, mode: str, steps: int, warmup: int, model: str) -> dict:
    n, m = METHODS[method]
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / f"{method}-{mode}"
        start = time.monotonic()
        rows = (run_sync if mode == "sync" else run_async)(model, n, m, steps, out)
        wall = time.monotonic() - start
        records = step_records(out)
    seconds = [b["train_seconds"] - a["train_seconds"] for a, b in itertools.pairwise(records)]
    timed = rows[warmup:]
    idle = [row["idle"] for row in timed if row["idle"] is not None]
    return {
        "method": method,
        "mode": mode,
        "n": n,
        "m": m,
        "steps_timed": len(timed),
        "step_s": statistics.median(seconds[warmup - 1 :]),
        "wait_s": statistics.median(row["wait"] for row in timed),
        "idle_s": statistics.median(idle) if idle else None,
        "weight_sync_s": statistics.median(row["sync"] for row in timed),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--model", help="a vLLM-shaped model folder (default: the built-in tiny model's)")
    args = parser.parse_args()
    if args.steps <= args.warmup + 1:
        sys.exit(f"error: --steps ({args.steps}) must exceed --warmup + 1 ({args.warmup + 1})")
    from pods_rl.models import model_path

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    model = args.model or model_path("tiny", vllm=True)
    rows = []
    for method in args.methods:
        for mode in args.modes:
            rows.append(measure(method, mode, args.steps, args.warmup, model))
            print(json.dumps(rows[-1]), file=sys.stderr)
    table = Table(title=f"Per step, medians of steps {args.warmup + 1}-{args.steps} (seconds)")
    for column in ("method", "n -> m", "mode", "step", "trainer waited", "generation idle", "weight sync"):
        table.add_column(column)
    for row in rows:
        idle = "-" if row["idle_s"] is None else f"{row['idle_s']:.2f}"
        table.add_row(row["method"], f"{row['n']} -> {row['m']}", row["mode"], f"{row['step_s']:.2f}",
                      f"{row['wait_s']:.2f}", idle, f"{row['weight_sync_s']:.2f}")  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
