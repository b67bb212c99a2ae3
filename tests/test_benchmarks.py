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
