"""Time select_rollouts (max_variance) against a plain torch.sort and a per-group Python split scan.

The Python reference is the authors' approach: a loop over groups and over the m + 1 candidate splits,
recomputing each candidate's variance with torch. Run: .venv/bin/python benchmarks/selection.py
(--threads N sets torch's intra-op threads; the default keeps torch's own choice).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from rich.console import Console
from rich.table import Table

from pods_rl import select_rollouts

GROUPS = 1024
POOL_SIZES = (16, 64, 256, 1024)
REPEATS = 21
REFERENCE_GROUPS = 128  # the Python reference is timed on this many groups and scaled to GROUPS
REFERENCE_REPEATS = 3


def python_reference(rewards: torch.Tensor, m: int) -> torch.Tensor:
    """Per-group loop: sort, then the population variance of each split (k highest + m - k lowest)."""
    n = rewards.shape[1]
    chosen = []
    for row in rewards:
        values, order = torch.sort(row, descending=True)
        best_k, best_variance = 0, -1.0
        for k in range(m + 1):
            variance = torch.cat([values[:k], values[n - (m - k) :]]).var(correction=0).item()
            if variance > best_variance:
                best_k, best_variance = k, variance
        chosen.append(torch.cat([order[:best_k], order[n - (m - best_k) :]]).sort().values)
    return torch.stack(chosen)


def median_seconds(function: Callable[[], object], repeats: int) -> float:
    function()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(first: Callable[[], object], second: Callable[[], object]) -> tuple[float, float]:
    """Median times of two functions timed alternately, so that both see the same background load."""
    first(), second()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(REPEATS):
        for function, bucket in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            function()
            bucket.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def rewards_for(n: int, generator: torch.Generator) -> torch.Tensor:
    """Float32 rewards shaped like the paper's: a 0/1 accuracy reward plus a small continuous format one."""
    correct = (torch.rand(GROUPS, n, generator=generator) < 0.5).float()
    return correct + 0.1 * torch.rand(GROUPS, n, generator=generator)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    threads = parser.parse_args().threads
    if threads is not None:
        torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    table = Table(
        title=f"select_rollouts(rule='max_variance'), G = {GROUPS} groups, m = n/4, float32, "
        f"{torch.get_num_threads()} threads",
        caption=f"Median of {REPEATS} runs (select and sort timed alternately). The Python reference is "
        f"timed on {REFERENCE_GROUPS} groups (median of {REFERENCE_REPEATS}) and scaled linearly to {GROUPS}.",
    )
    for column in ("n", "m", "select (ms)", "torch.sort (ms)", "select / sort", "Python ref (ms)", "speedup"):
        table.add_column(column, justify="right")
    for n in POOL_SIZES:
        m = n // 4
        rewards = rewards_for(n, generator)
        subset = rewards[:REFERENCE_GROUPS]
        selected, expected = select_rollouts(subset, m), python_reference(subset, m)
        variances = (subset.double().gather(1, index).var(dim=1) for index in (selected, expected))
        torch.testing.assert_close(*variances, rtol=1e-9, atol=1e-12)  # both find the optimum
        select_time, sort_time = interleaved_medians(
            lambda rewards=rewards, m=m: select_rollouts(rewards, m),
            lambda rewards=rewards: torch.sort(rewards, dim=1),
        )
        reference_time = median_seconds(lambda subset=subset, m=m: python_reference(subset, m), REFERENCE_REPEATS)
        reference_time *= GROUPS / REFERENCE_GROUPS
        table.add_row(
            str(n),
            str(m),
            f"{select_time * 1e3:.3f}",
            f"{sort_time * 1e3:.3f}",
            f"{select_time / sort_time:.2f}",
            f"{reference_time * 1e3:.0f}",
            f"{reference_time / select_time:.0f}x",
        )
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
