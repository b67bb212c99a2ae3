"""Is this machine in the state its timings were taken in? Compute speed and the cost of a page fault, in 20 s.

A VM's host can change under a long comparison: on the 2-core Xeon of docs/performance.md a fork of the VM left
compute as fast as before and made every page fault cost 4-10 us, which doubled SmolLM2's update ("Page faults on
a forked VM"). Run this before a sitting of measurements and compare with the figures in the docs. Each fault
measure runs in its own process: with glibc's defaults, and keeping freed memory as `pods train` does
(pods_rl.memory), where only the first touch of each page faults.

    .venv/bin/python benchmarks/machine_check.py
    .venv/bin/python benchmarks/machine_check.py --mib 64 --repeats 2   # smaller and quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch
from rich.console import Console
from rich.table import Table

from pods_rl.memory import RETAINING

# Allocates `mib` MiB with malloc, writes one byte a page, frees it; `repeats` times. Prints seconds per page touched.
TOUCH_PAGES = """
import ctypes, json, sys, time
import numpy as np
mib, repeats = int(sys.argv[1]), int(sys.argv[2])
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (ctypes.c_void_p,)
size = mib * 2**20
start = time.perf_counter()
for _ in range(repeats):
    block = libc.malloc(size)
    np.frombuffer((ctypes.c_uint8 * size).from_address(block), dtype=np.uint8)[::4096] = 1
    libc.free(block)
print(json.dumps((time.perf_counter() - start) / (repeats * size // 4096)))
"""


def matmul_gflops(size: int = 2048, repeats: int = 20) -> float:
    """fp32 matrix products per second on this process's threads, in GFLOP/s (two warm-up products first)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    for _ in range(2):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return repeats * 2 * size**3 / (time.perf_counter() - start) / 1e9


def touch_seconds_per_page(mib: int, repeats: int, *, keep_freed: bool) -> float:
    """Seconds per page of allocating, touching and freeing `mib` MiB `repeats` times, in a fresh process."""
    environ = {k: v for k, v in os.environ.items() if k not in RETAINING}
    if keep_freed:
        environ.update(RETAINING)
    command = [sys.executable, "-c", TOUCH_PAGES, str(mib), str(repeats)]
    return json.loads(subprocess.run(command, env=environ, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=1024, help="size of the block allocated and touched")
    parser.add_argument("--repeats", type=int, default=3, help="allocate, touch and free this many times")
    args = parser.parse_args()
    table = Table(title=f"machine check: {torch.get_num_threads()} threads, {args.mib} MiB x {args.repeats}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("fp32 matmul 2048 (GFLOP/s)", f"{matmul_gflops():.0f}")
    for keep_freed, label in ((False, "glibc's defaults"), (True, "freed memory kept")):
        seconds = touch_seconds_per_page(args.mib, args.repeats, keep_freed=keep_freed)
        table.add_row(f"allocate, touch, free: us a page ({label})", f"{seconds * 1e6:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
