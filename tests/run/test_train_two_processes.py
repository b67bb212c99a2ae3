"""`pods train` on two CPU processes (torchrun + gloo via accelerate), as on two GPUs."""

import json
import os
import subprocess

from support import two_process_launch


def test_pods_train_on_two_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    command = [*two_process_launch(), "-m", "pods_rl", "train"]
    command += ["--model", str(tiny_model_dir), "--output-dir", str(out), "-n", "4", "-m", "2", "--max-steps", "2"]
    command += ["--eval-every", "2", "--set", "trainer.per_device_train_batch_size=4"]
    command += ["--set", "task_options.num_train=64", "--set", "task_options.num_test=8"]
    command += ["--set", "trainer.max_completion_length=16", "--set", "trainer.report_to=[]"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[:3000] + "\n...\n" + result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step_records = [r for r in steps if r["type"] == "step"]
    assert [r["step"] for r in step_records] == [1, 2]  # written once, by the main process
    # Two processes, 4 trained rows each: 8 rows = 4 prompts of m = 2, from pools of n = 4.
    assert step_records[0]["pods/rollouts_trained"] == 8
    assert step_records[0]["pods/rollouts_generated"] == 16
    # At step 0 and at the end, over the whole held-out set (each process its half: see tests/test_evaluation.py).
    evaluations = [r for r in steps if r["type"] == "eval"]
    assert [(r["step"], r["num_examples"]) for r in evaluations] == [(0, 8), (2, 8)]
