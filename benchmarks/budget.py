"""The row budget (select_batch) and token-aware ties: their cost, and what they did in a `pods compare` run.

    python benchmarks/budget.py                          # selection time, and how select_batch spreads rows
    python benchmarks/budget.py runs/compare-budget      # plus per-arm tables of a finished comparison folder

The comparison tables give, per arm and averaged over seeds: held-out accuracy at every evaluated step, completion
tokens trained and generated per step, the share of prompt groups whose pool rewards are all equal (over thirds of
training), the share of groups that got no rows and the largest rows per group, and the logged seconds per step.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from pods_rl import select_batch, select_rollouts

PHASES = ("generate", "score", "select", "update")


def rewards_like_training(groups: int, n: int, generator: torch.Generator, *, format_reward: bool = True):
    """0/1 accuracy with a per-prompt success rate (a quarter of the prompts always right), plus a format reward."""
    rate = torch.rand(groups, 1, generator=generator)
    rate[: groups // 4] = 1.0
    accuracy = (torch.rand(groups, n, generator=generator) < rate).double()
    if not format_reward:
        return accuracy
    return accuracy + torch.randint(0, 5, (groups, n), generator=generator) * 0.025


def allocation_table(batches: int = 50) -> Table:
    """How select_batch spreads 64 rows over 16 prompts of 16 rollouts, with and without a small format reward."""
    table = Table("rewards", "groups all equal", "rows to them", "varied groups without rows", "rows per varied group",
                  title=f"select_batch(rewards, 64) on {batches} batches of 16 x 16, mean")  # fmt: skip
    for format_reward in (False, True):
        generator = torch.Generator().manual_seed(0)
        equal, to_equal, empty, rows = [], [], [], []
        for _ in range(batches):
            rewards = rewards_like_training(16, 16, generator, format_reward=format_reward)
            sizes = select_batch(rewards, 64).sum(dim=1)
            flat = rewards.amax(dim=1) == rewards.amin(dim=1)
            equal.append(flat.double().mean().item())
            to_equal.append(sizes[flat].sum().item())
            empty.append((sizes[~flat] == 0).double().mean().item())
            rows.extend(sizes[~flat].tolist())
        table.add_row(
            "0/1 accuracy + format (0..0.1)" if format_reward else "0/1 accuracy",
            f"{100 * mean(equal):.0f}%",
            f"{mean(to_equal):.1f}",
            f"{100 * mean(empty):.0f}%",
            f"{mean(rows):.1f} (max {max(rows)})",
        )
    return table


def median_ms(function, repeats: int = 11) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def timing_table() -> Table:
    table = Table("G", "n", "m", "budget", "select_rollouts (ms)", "+ lengths (ms)", "select_batch (ms)",
                  title="selection time per generation batch, float64 rewards, median of 11")  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    for groups, n, m in ((16, 16, 4), (64, 16, 4), (16, 64, 16), (64, 64, 16)):
        rewards = rewards_like_training(groups, n, generator)
        lengths = torch.randint(10, 500, (groups, n), generator=generator)
        budget = groups * m
        table.add_row(
            str(groups), str(n), str(m), str(budget),
            f"{median_ms(lambda: select_rollouts(rewards, m)):.2f}",  # noqa: B023
            f"{median_ms(lambda: select_rollouts(rewards, m, lengths=lengths)):.2f}",  # noqa: B023
            f"{median_ms(lambda: select_batch(rewards, budget, lengths=lengths)):.2f}",  # noqa: B023
        )  # fmt: skip
    return table


def load(run_dir: Path) -> tuple[list[dict], list[dict]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    return [r for r in records if r["type"] == "step"], [r for r in records if r["type"] == "eval"]


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def comparison_tables(folder: Path) -> list[Table]:
    arms = sorted(p for p in folder.iterdir() if p.is_dir())
    runs = {
        arm.name: [load(seed) for seed in sorted(arm.glob("seed-*")) if (seed / "summary.json").exists()]
        for arm in arms
    }
    runs = {name: seeds for name, seeds in runs.items() if seeds}
    eval_steps = sorted({e["step"] for seeds in runs.values() for _, evals in seeds for e in evals})
    accuracy = Table("arm", "seeds", *[f"step {s}" for s in eval_steps], title="held-out accuracy (%), mean (min-max)")
    usage = Table("arm", "tokens trained/step", "tokens generated/step", "zero-var groups 1st/2nd/3rd third",
                  "groups without rows", "max rows/group", "s/step", title="per-step means over all seeds")  # fmt: skip
    for name, seeds in runs.items():
        cells = []
        for step in eval_steps:
            values = [100 * e["accuracy"] for _, evals in seeds for e in evals if e["step"] == step]
            cells.append(f"{mean(values):.1f} ({min(values):.1f}-{max(values):.1f})" if values else "-")
        accuracy.add_row(name, str(len(seeds)), *cells)
        steps = [s for run_steps, _ in seeds for s in run_steps]
        last = max(s["step"] for s in steps)
        thirds = [
            mean(
                s["pods/zero_variance_groups_frac"]
                for s in steps
                if part * last / 3 < s["step"] <= (part + 1) * last / 3
            )
            for part in range(3)
        ]
        usage.add_row(
            name,
            f"{mean(s['pods/tokens_trained'] for s in steps):.0f}",
            f"{mean(s['pods/tokens_generated'] for s in steps):.0f}",
            " / ".join(f"{100 * t:.0f}%" for t in thirds),
            f"{100 * mean(s.get('pods/groups_without_rows_frac', 0.0) for s in steps):.0f}%",
            f"{mean(s.get('pods/rows_per_group_max', float('nan')) for s in steps):.1f}",
            f"{mean(sum(s[f'pods/time_{p}'] for p in PHASES) for s in steps):.2f}",
        )
    return [accuracy, usage]


def main() -> None:
    console = Console(width=160)
    console.print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    console.print(timing_table())
    console.print(allocation_table())
    for folder in sys.argv[1:]:
        for table in comparison_tables(Path(folder)):
            console.print(table)


if __name__ == "__main__":
    main()
