"""The benchmark scripts run: the GPU check's dry mode takes the same code path (measuring_config, PODSTrainer, the
phase logs) on the CPU at a tiny shape."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_dry_run_reports_the_rollouts_of_both_runs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--steps", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        cells[0]: cells[1:5]
        for line in result.stdout.splitlines()
        if (cells := [c.strip() for c in re.split("[│|]", line) if c.strip()]) and cells[0] in ("GRPO", "PODS")
    }
    # run, n, m, generated, trained per step: 2 prompts, m = 4, PODS pools of n = 16
    assert rows == {"GRPO": ["4", "4", "8", "8"], "PODS": ["16", "4", "32", "8"]}
    entry = result.stdout.split("cost_models:", 1)[1]  # the step cost, to paste into a comparison's settings
    assert "source: benchmarks/gpu_check.py" in entry and "trained_per_step: 8}" in entry


def test_machine_check_reports_compute_and_both_page_fault_costs() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "machine_check.py"), "--mib", "16", "--repeats", "2"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        cells[0]: float(cells[1])
        for line in result.stdout.splitlines()
        if len(cells := [c.strip() for c in re.split("[│|]", line) if c.strip()]) == 2
        and re.fullmatch(r"[\d.]+", cells[1])
    }
    assert set(rows) == {
        "fp32 matmul 2048 (GFLOP/s)",
        "allocate, touch, free: us a page (glibc's defaults)",
        "allocate, touch, free: us a page (freed memory kept)",
    }
    assert all(value > 0 for value in rows.values())


def test_arm_vs_arms_measures_pods_against_each_arm_of_a_kept_comparison() -> None:
    """The kept 3-term comparison's PODS row against GRPO 4/4 is the report's own (its comparison.json)."""
    import json

    from pods_rl.compare.measures import difference_text, speedup_text

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    folder = ROOT / "benchmarks" / "results" / "smollm2-3term-epyc"
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "arm_vs_arms.py"), str(folder)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    table = [line.strip("| ").split(" | ") for line in result.stdout.splitlines() if line.startswith("| ")]
    rows = {cells[0]: cells[1:] for cells in table[1:]}
    assert list(rows) == ["grpo", "grpo-pool", "grpo-ds", "pods-ds"]  # every arm but pods, in the folder's order
    versus = json.loads((folder / "comparison.json").read_text())["arms"]["pods"]["vs_baseline"]
    assert rows["grpo"][0] == speedup_text(versus["time_to_target"])
    assert rows["grpo"][2] == speedup_text(versus["steps_to_target"])
    assert rows["grpo"][4] == difference_text(versus["mean_accuracy_difference"])
    assert rows["grpo"][6] == "+15.8, -0.1, -1.4, -2.0, +1.0, +5.0"  # the per-seed window differences
    assert (
        result.stdout.splitlines()[-1] == "Holm's adjustment over this table's 12 tests; intervals 95% per comparison."
    )


def test_compare_coverage_prints_every_case_and_the_power_table() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    script = str(ROOT / "benchmarks" / "compare_coverage.py")
    result = subprocess.run(
        [sys.executable, script, "--comparisons", "3", "--power-comparisons", "1"],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 4 * 2 * 4 + 3 * 3  # designs x questions x truths, then designs x seed counts
