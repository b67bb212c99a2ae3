"""The scripts in examples/ run as a user runs them (a fresh process), on the tiny model, in a few steps."""

import re
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from support import launch_env

EXAMPLES = Path(__file__).parents[1] / "examples"


def test_custom_task_trains_pods_on_its_own_data_and_reward(tiny_model_dir, tmp_path):
    """examples/custom_task.py: plain PODSTrainer + PODSConfig on an in-code dataset and a plain reward function
    trains the model (its saved weights differ from the start) and reports held-out accuracy before and after."""
    out = tmp_path / "run"
    command = [sys.executable, str(EXAMPLES / "custom_task.py"), "--model", str(tiny_model_dir)]
    command += ["--max-steps", "2", "--output-dir", str(out)]
    done = subprocess.run(command, env=launch_env(), capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    reward, accuracy, saved = done.stdout.splitlines()[-3:]
    assert re.fullmatch(
        r"train reward \(mean over the pool\): \d\.\d\d at the first log -> \d\.\d\d at the last", reward
    ), reward
    assert re.fullmatch(r"held-out accuracy: \d+\.\d% -> \d+\.\d% in 2 steps", accuracy), accuracy
    assert saved == f"model saved in {out}/final"
    start, trained = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "final" / "model.safetensors")
    assert start.keys() == trained.keys()
    assert any(not torch.equal(start[name], trained[name]) for name in start)
