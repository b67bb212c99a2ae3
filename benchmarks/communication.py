"""Bytes moved between processes by PODSTrainer, per step and per generated rollout, measured on 2 and 4 processes.

Launches real PODSTrainer runs on 2 and 4 CPU processes (`accelerate launch --multi_gpu`: torchrun + gloo) with a
tiny Llama built in code (random weights, completions forced to a fixed length) on the arithmetic task, in two
layouts: whole pools generated on each process (several prompts per process), and pools split across processes.
Inside every process, every torch.distributed collective that accelerate or TRL calls from Python is wrapped and
counted, and DDP's gradient all-reduce is counted by a communication hook; the operating system's TCP counters of
each process (`ss`, gloo runs over TCP) give the bytes that really crossed between processes, as a cross-check.

Counting convention, per process: what a collective delivers from the *other* processes: all-gather (P - 1)
shares, broadcast the tensor on the receivers, all-reduce 2 (P - 1) / P of the tensor (gloo's ring). Object
collectives (gather_object, broadcast_object_list) are counted at the tensor all-gathers they make, i.e. the
padded pickles, and attributed to the object collective. A step is the optimizer step's window
(on_step_begin to on_step_end), which holds generation, scoring, selection and the update; the first step is
warm-up and the table shows the mean of the others.

It measures whichever PODSTrainer is importable (`pods_rl` from PYTHONPATH), and labels the results with the
source's git commit and `--label`. Then it prints the per-process bytes per generation for 8 and 64 GPUs,
n = 64 and 1024-token completions, by formula: projections, not measurements.

    PYTHONPATH=src .venv/bin/python benchmarks/communication.py [--label "rows gathered"] [--steps 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

COMPLETION_TOKENS = 64
# name: PODSConfig fields. Whole pools: 16 rollouts per process = 2 pools of n = 8. Split: 8 per process = half of
# a pool of n = 16, so each pool spans 2 processes.
LAYOUTS = {
    "whole pools": {"num_generations": 8, "num_selected": 4, "per_device_train_batch_size": 8},
    "split pools": {"num_generations": 16, "num_selected": 4, "per_device_train_batch_size": 2},
}
GRADIENTS = "DDP gradient all-reduce"
# The table's columns of counted bytes (caller package and kind), in order; "tcp" is the operating system's count.
COUNTED = ("pods_rl objects", "pods_rl tensors", "trl objects", "trl tensors", GRADIENTS, "tcp")
OBJECT_COLLECTIVES = ("all_gather_object", "gather_object", "broadcast_object_list", "scatter_object_list")
# Projections (formula): prompts per generation per GPU, pool size, reward functions, token lengths.
PROJECTED_GPUS = (8, 64)
PROJECTED = {
    "prompts_per_gpu": 8, "n": 64, "m": 16, "reward_funcs": 3, "prompt_tokens": 256, "completion_tokens": 1024,
}  # fmt: skip


# ----------------------------------------------------------------------------------------------- inside a process
class CollectiveCounter:
    """Wraps torch.distributed's collectives (both namespaces) to add up the bytes received from other processes."""

    def __init__(self):
        import torch.distributed as dist

        self.dist = dist
        self.bytes: dict[str, float] = defaultdict(float)
        self._outer = threading.local()
        tensor_collectives = {
            "all_gather": lambda out, inp, *a, **k: _nbytes(out) - _nbytes(inp),
            "all_gather_into_tensor": lambda out, inp, *a, **k: _nbytes(out) - _nbytes(inp),
            "all_reduce": lambda tensor, *a, **k: _nbytes(tensor) * 2 * (self.world - 1) / self.world,
            "broadcast": lambda tensor, src=None, *a, **k: 0.0 if self._is_source(src, k) else _nbytes(tensor),
            "gather": lambda tensor, gather_list=None, *a, **k: (
                _nbytes(gather_list) - _nbytes(tensor) if gather_list else 0.0
            ),
            "reduce_scatter_tensor": lambda out, inp, *a, **k: _nbytes(inp) - _nbytes(out),
            "all_to_all_single": self._all_to_all_single,
            "all_to_all": lambda outs, ins, *a, **k: _nbytes(outs) - _nbytes(outs[self.rank]),
            "scatter": lambda tensor, scatter_list=None, src=None, *a, **k: (
                0.0 if self._is_source(src, k) else _nbytes(tensor)
            ),
            # Point to point (batch_isend_irecv calls these for each of its operations).
            "send": lambda *a, **k: 0.0,
            "isend": lambda *a, **k: 0.0,
            "recv": lambda tensor, *a, **k: _nbytes(tensor),
            "irecv": lambda tensor, *a, **k: _nbytes(tensor),
        }
        for name, received in tensor_collectives.items():
            self._wrap(name, received)
        for name in OBJECT_COLLECTIVES:
            self._wrap(name, None)

    @property
    def world(self) -> int:
        return self.dist.get_world_size()

    @property
    def rank(self) -> int:
        return self.dist.get_rank()

    def _all_to_all_single(self, out, inp, output_split_sizes=None, *args, **kwargs) -> float:
        """The output less this process's own block (rows along dim 0, equal blocks unless split sizes are given)."""
        rows = out.shape[0] if out.dim() else 0
        own_rows = output_split_sizes[self.rank] if output_split_sizes else rows // self.world
        return _nbytes(out) * (1 - own_rows / rows) if rows else 0.0

    def _is_source(self, src: int | None, kwargs: dict) -> bool:
        return self.rank == (src if src is not None else kwargs.get("group_src", 0))

    def _wrap(self, name: str, received) -> None:
        import torch.distributed.distributed_c10d as c10d

        original = getattr(c10d, name)

        kind = "objects" if name in OBJECT_COLLECTIVES else "tensors"

        @functools.wraps(original)
        def counted(*args, **kwargs):
            outer = getattr(self._outer, "name", None)
            if outer is None:  # the outermost collective: named by its caller's package and its kind
                self._outer.name = f"{_caller_package()} {kind}"
            try:
                if received is not None:
                    self.bytes[self._outer.name] += received(*args, **kwargs)
                return original(*args, **kwargs)
            finally:
                if outer is None:
                    self._outer.name = None

        setattr(c10d, name, counted)  # calls inside torch (all_gather_object -> all_gather) see this one
        setattr(self.dist, name, counted)  # calls through `torch.distributed.<name>` (accelerate, TRL)

    def count_ddp_gradients(self) -> None:
        """Every DDP model built from now on all-reduces its gradient buckets as DDP would, counted as gradients."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        from torch.nn.parallel import DistributedDataParallel

        original_init = DistributedDataParallel.__init__
        counter = self

        def init(ddp, *args, **kwargs):
            original_init(ddp, *args, **kwargs)

            def hook(state, bucket):
                counter._outer.name = GRADIENTS  # the all-reduce it makes is counted under this name
                try:
                    return allreduce_hook(state, bucket)
                finally:
                    counter._outer.name = None

            ddp.register_comm_hook(None, hook)

        DistributedDataParallel.__init__ = init


def _caller_package() -> str:
    """The top-level package of the code that called the collective, looking past torch and accelerate."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("torch.", "accelerate.", __name__)):
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?").split(".")[0] if frame is not None else "?"


def _nbytes(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, (list, tuple)):
        return float(sum(_nbytes(v) for v in value))
    return float(value.numel() * value.element_size())


def tcp_bytes_received(pid: int) -> int:
    """Bytes this process has received over its open TCP sockets (gloo's connections and the rendezvous store)."""
    lines = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout.splitlines()
    total, mine = 0, False
    for line in lines:
        if not line.startswith(("\t", " ")):
            mine = f"pid={pid}," in line
        elif mine:
            total += sum(int(f.split(":")[1]) for f in line.split() if f.startswith("bytes_received:"))
    return total


def worker(out: Path, steps: int) -> None:
    # Wrapped before anything imports a collective by name (`from torch.distributed import ...`).
    counter = CollectiveCounter()
    counter.count_ddp_gradients()
    import warnings

    from measuring import measuring_config
    from transformers import TrainerCallback
    from transformers.trainer_callback import PrinterCallback

    from pods_rl import PODSTrainer
    from pods_rl.models.tiny import TinyRecipe, build_model, build_tokenizer
    from pods_rl.tasks import load_task

    warnings.filterwarnings("ignore")
    recipe = TinyRecipe()
    tokenizer = build_tokenizer(recipe.vocab_size)
    task = load_task("arithmetic", num_train=256, num_test=8)

    class StepWindow(TrainerCallback):
        def __init__(self):
            self.records: list[dict] = []

        def on_step_begin(self, args, state, control, **kwargs):
            counter.bytes.clear()
            self.tcp = tcp_bytes_received(os.getpid())

        def on_step_end(self, args, state, control, **kwargs):
            record = dict(counter.bytes)
            record["tcp"] = tcp_bytes_received(os.getpid()) - self.tcp
            self.records.append(record)

    for layout, fields in LAYOUTS.items():
        with tempfile.TemporaryDirectory() as run_dir:
            args = measuring_config(
                run_dir,
                **fields,
                max_completion_length=COMPLETION_TOKENS,
                generation_kwargs={"min_new_tokens": COMPLETION_TOKENS},
                max_steps=steps,
                seed=0,
            )
            trainer = PODSTrainer(
                model=build_model(recipe, tokenizer),
                reward_funcs=task.reward_funcs,
                args=args,
                train_dataset=task.train,
                processing_class=tokenizer,
            )
            trainer.remove_callback(PrinterCallback)
            window = StepWindow()
            trainer.add_callback(window)
            trainer.train()
        logs = [log for log in trainer.state.log_history if "pods/rollouts_generated" in log]
        result = {
            "records": window.records,
            "generated": [log["pods/rollouts_generated"] for log in logs],
            "trained": [log["pods/rollouts_trained"] for log in logs],
            "reward_funcs": len(task.reward_funcs),
        }
        (out / f"{layout.replace(' ', '-')}-rank{counter.rank}.json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------------- the launcher
def launch(processes: int, out: Path, steps: int) -> None:
    accelerate = Path(sys.executable).with_name("accelerate")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(accelerate), "launch", "--multi_gpu", "--num_processes", str(processes), "--num_machines", "1",
               "--main_process_port", str(port), "--mixed_precision", "no", "--dynamo_backend", "no",
               __file__, "--worker", str(out), "--steps", str(steps)]  # fmt: skip
    result = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{processes}-process run failed:\n{result.stderr[-4000:]}")


def summarise(out: Path, processes: int, layout: str) -> dict:
    """Mean over steps 2.. of the bytes each process received, averaged over processes, by kind."""
    ranks = [json.loads((out / f"{layout.replace(' ', '-')}-rank{r}.json").read_text()) for r in range(processes)]
    kinds = sorted({kind for rank in ranks for record in rank["records"][1:] for kind in record})
    per_kind = {
        kind: statistics.mean(record.get(kind, 0.0) for rank in ranks for record in rank["records"][1:])
        for kind in kinds
    }
    return {
        "bytes": per_kind,
        "generated": ranks[0]["generated"][-1],
        "trained": ranks[0]["trained"][-1],
        "reward_funcs": ranks[0]["reward_funcs"],
    }


def synthetic_row(prompt_tokens: int, completion_tokens: int, with_logprobs: bool) -> dict:
    """One rollout row as PODSTrainer's row gather sends it (ids as lists, texts, the input dict)."""
    rng = random.Random(0)
    system = "Reason inside <think>...</think>, then answer inside <answer>...</answer>."
    prompt = [{"role": "system", "content": system}, {"role": "user", "content": "x" * (4 * prompt_tokens)}]
    row = {
        "prompt": prompt,
        "input": {"prompt": prompt, "answer": "42"},
        "prompt_ids": [rng.randrange(151_936) for _ in range(prompt_tokens)],
        "completion_ids": [rng.randrange(151_936) for _ in range(completion_tokens)],
        "completion": [{"role": "assistant", "content": "y" * (4 * completion_tokens)}],
        "tool_mask": None,
    }
    if with_logprobs:
        row["logprobs"] = [[-rng.random()] for _ in range(completion_tokens)]
    return row


def source_label() -> str:
    import pods_rl

    source = Path(pods_rl.__file__).resolve().parent
    git = ["git", "-C", str(source)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True).stdout.strip()
    return f"pods_rl from {source} at commit {commit or '?'}{' (uncommitted changes)' if dirty else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="", help="names the PODSTrainer design measured, in the output")
    parser.add_argument("--steps", type=int, default=3, help="steps per run; the first is warm-up (default 3)")
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker is not None:
        worker(options.worker, options.steps)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    label = source_label() + (f", {options.label}" if options.label else "")
    table = Table(title=f"Bytes received per process per step (mean over processes and steps 2-{options.steps})")
    columns = ["processes", "layout", "generated / step", "trained / step", "pods_rl: pickles", "pods_rl: tensors"]
    columns += ["TRL: pickles", "TRL: tensors", "DDP gradients", "TCP received", "per generated rollout"]
    columns += ["of it, pods_rl"]
    for column in columns:
        table.add_column(column, justify="right")
    for processes in options.processes:
        with tempfile.TemporaryDirectory() as tmp:
            launch(processes, Path(tmp), options.steps)
            for layout in LAYOUTS:
                r = summarise(Path(tmp), processes, layout)
                counted = {key: r["bytes"].get(key, 0.0) for key in COUNTED}
                unexpected = set(r["bytes"]) - set(COUNTED)
                if unexpected:  # a collective called from elsewhere: say so rather than drop it
                    console.print(f"[red]also counted[/] {processes} processes, {layout}: {unexpected}")
                per_rollout = processes / r["generated"]  # bytes per process per step -> all processes per rollout
                pods_rl = counted["pods_rl objects"] + counted["pods_rl tensors"]
                collectives = sum(v for k, v in counted.items() if k not in (GRADIENTS, "tcp"))
                table.add_row(
                    str(processes), layout, f"{r['generated']:.0f}", f"{r['trained']:.0f}",
                    *(_size(counted[key]) for key in COUNTED), _size(collectives * per_rollout),
                    _size(pods_rl * per_rollout),
                )  # fmt: skip
    console.print(label)
    console.print(table)
    console.print(
        f"Tiny model ({COMPLETION_TOKENS}-token completions, arithmetic prompts). pods_rl / TRL: collectives called "
        "from that package (TRL's include its reward gather and the gathers of its metrics and completion log). Per "
        "generated rollout: bytes received by all processes together, gradients excluded, divided by the rollouts "
        "generated in the step."
    )
    print_projections(console)


def print_projections(console) -> None:
    from rich.table import Table

    p = PROJECTED
    row = synthetic_row(p["prompt_tokens"], p["completion_tokens"], with_logprobs=False)
    sizes = {
        "HF generate": len(pickle.dumps([row])),
        "vLLM (log-probs)": len(pickle.dumps([synthetic_row(p["prompt_tokens"], p["completion_tokens"], True)])),
    }
    texts = len(pickle.dumps([row["prompt"]])) + len(pickle.dumps([row["completion"]]))  # TRL's completion log
    console.print(
        "\nPROJECTIONS (formula, not measured). Per process per generation, R = prompts x n rollouts and T = prompts "
        f"x m trained rows over P processes, F = {p['reward_funcs']} reward functions (float32):\n"
        "  old design (every row gathered to every process): (P - 1) / P x R x (row pickle + 4 F)\n"
        "  new design (rewards gathered, whole pools local):  (P - 1) / P x R x 4 F\n"
        "  TRL's completion log, in both designs and in GRPO: (P - 1) / P x T x (prompt and completion pickles)\n"
        f"Pickles measured on a synthetic row ({p['prompt_tokens']}-token prompt, {p['completion_tokens']}-token "
        "completion, ~4 characters per token): row "
        + ", ".join(f"{k} {_size(v)}" for k, v in sizes.items())
        + f"; prompt and completion texts {_size(texts)}"
    )
    table = Table(title=f"Projected bytes received per process per generation, n = {p['n']}, m = {p['m']}, "
                  f"{p['prompts_per_gpu']} prompts per GPU, {p['completion_tokens']}-token completions")  # fmt: skip
    columns = ["GPUs", "rollouts R", *(f"old, {k}" for k in sizes), "new (rewards only)", "old / new"]
    for column in [*columns, "TRL completion log (T rows)"]:
        table.add_column(column, justify="right")
    for gpus in PROJECTED_GPUS:
        prompts = gpus * p["prompts_per_gpu"]
        share = (gpus - 1) / gpus
        rewards = share * prompts * p["n"] * 4 * p["reward_funcs"]
        old = [share * prompts * p["n"] * size + rewards for size in sizes.values()]
        table.add_row(
            str(gpus), str(prompts * p["n"]), *(_size(v) for v in old), _size(rewards), f"{old[0] / rewards:.0f}x",
            _size(share * prompts * p["m"] * texts),
        )  # fmt: skip
    console.print(table)


def _size(value: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.{1 if unit == 'KB' else 3}f} {unit}"
        value /= 1000
    raise AssertionError


if __name__ == "__main__":
    main()
