"""`pods train` on two CPU processes (torchrun + gloo via accelerate), as on two GPUs: DDP and FSDP2."""

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support import config_launch, two_process_launch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

FSDP2_CPU = Path(__file__).parents[2] / "configs" / "accelerate" / "fsdp2-cpu.yaml"
# 2 steps of 4 trained rows per process (m = 2 of n = 4), evaluated at steps 0 and 2 on 8 held-out examples.
SMALL_RUN = ["-n", "4", "-m", "2", "--max-steps", "2", "--eval-every", "2"]
SMALL_RUN += ["--set", "trainer.per_device_train_batch_size=4", "--set", "task_options.num_train=64"]
SMALL_RUN += ["--set", "task_options.num_test=8", "--set", "trainer.max_completion_length=16"]
SMALL_RUN += ["--set", "trainer.report_to=[]"]


def run_launched(command: list[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[:3000] + "\n...\n" + result.stderr[-3000:]


def test_pods_train_on_two_processes(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    command = [*two_process_launch(), "-m", "pods_rl", "train"]
    command += ["--model", str(tiny_model_dir), "--output-dir", str(out), *SMALL_RUN]
    run_launched(command)
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
    # The main process held the folder's lock (the other one did not refuse it) and gave it back.
    assert not (out / "run.lock").exists()


def test_pods_train_under_fsdp2_then_resume(tiny_model_dir, tmp_path):
    """`pods train` under configs/accelerate/fsdp2-cpu.yaml: the model sharded over two processes trains m < n, the
    evaluation runs sharded, each checkpoint is sharded (one file per process) and merges to the whole model, final/
    holds the full weights, and `--resume` from checkpoint-1 repeats step 2 exactly."""
    out = tmp_path / "run"
    command = [*config_launch(FSDP2_CPU), "-m", "pods_rl", "train", "--model", str(tiny_model_dir)]
    command += ["--output-dir", str(out), *SMALL_RUN, "--set", "trainer.save_strategy=steps"]
    command += ["--set", "trainer.save_steps=1"]
    run_launched(command)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["type"] == "step"]
    assert [(r["step"], r["pods/rollouts_trained"], r["pods/rollouts_generated"]) for r in steps] == [
        (1, 8, 16),
        (2, 8, 16),
    ]
    assert [(r["step"], r["num_examples"]) for r in records if r["type"] == "eval"] == [(0, 8), (2, 8)]

    final = load_file(out / "final" / "model.safetensors")
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert {k: v.shape for k, v in final.items() if k in initial} == {k: v.shape for k, v in initial.items()}
    assert not all(torch.equal(final[k], initial[k]) for k in initial)  # trained
    checkpoint = out / "checkpoint-2" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in checkpoint.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    dcp_to_torch_save(checkpoint, tmp_path / "merged.pt")  # what `accelerate merge-weights` does
    merged = torch.load(tmp_path / "merged.pt", weights_only=True)["model"]
    assert merged.keys() == final.keys()
    assert all(torch.equal(merged[k], final[k]) for k in final)

    # Interrupted after checkpoint-1: resume trains step 2 again, to the same weights and step record.
    shutil.rmtree(out / "checkpoint-2")
    shutil.rmtree(out / "final")
    (out / "summary.json").unlink()
    run_launched([*config_launch(FSDP2_CPU), "-m", "pods_rl", "train", "--resume", str(out)])
    resumed = load_file(out / "final" / "model.safetensors")
    assert all(torch.equal(resumed[k], final[k]) for k in final)
    again = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in again if r["type"] == "step"] == [1, 2]
    assert [r["loss"] for r in again if r["type"] == "step"] == [r["loss"] for r in steps]
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_pods_train_with_fsdp_in_its_settings_shards(tiny_model_dir, tmp_path):
    """FSDP asked for in the settings (`trainer.fsdp`), under a plain two-process launch: the model is sharded as
    under the FSDP launch (one checkpoint file per process), not run as DDP (pods_rl/trainer/cpu_fsdp.py)."""
    out = tmp_path / "run"
    command = [*two_process_launch(), "-m", "pods_rl", "train", "--model", str(tiny_model_dir)]
    command += ["--output-dir", str(out), *SMALL_RUN, "--set", "trainer.fsdp=full_shard"]
    command += ["--set", "trainer.fsdp_config={state_dict_type: SHARDED_STATE_DICT}"]
    run_launched(command)
    checkpoint = out / "checkpoint-2" / "pytorch_model_fsdp_0"
    assert sorted(p.name for p in checkpoint.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert (out / "final" / "model.safetensors").is_file()


# FSDP1 cannot run on CPU processes (docs/reliability.md, "Distributed engines on CPU processes"): the exact cause.
FSDP1_ON_CPU = (
    "FSDP1 on CPU processes fails in torch's FullyShardedDataParallel with `ValueError: Inconsistent compute device "
    "and `device_id` on rank 1: cpu vs cpu:0` (accelerate passes its device cpu:0 as device_id; FSDP1 takes a CPU "
    "module's compute device from the current device, `cpu`)"
)
ON_GPUS = torch.cuda.is_available()
NEEDS_DEEPSPEED = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not installed (pip install deepspeed; on a CPU it also needs g++, see docs/reliability.md)",
)


@pytest.mark.parametrize(
    ("config", "changes"),
    [
        pytest.param(
            "fsdp.yaml", ["--fsdp_version", "1"], id="fsdp1", marks=pytest.mark.skipif(not ON_GPUS, reason=FSDP1_ON_CPU)
        ),
        pytest.param("zero2.yaml" if ON_GPUS else "zero2-cpu.yaml", [], id="zero2", marks=NEEDS_DEEPSPEED),
        pytest.param("zero3-multinode.yaml" if ON_GPUS else "zero3-cpu.yaml", [], id="zero3", marks=NEEDS_DEEPSPEED),
    ],
)
def test_pods_train_under_other_engines(config, changes, tiny_model_dir, tmp_path):
    """`pods train` under FSDP1 (GPUs only), ZeRO-2 and ZeRO-3 on two processes: the shipped GPU configs where there
    are GPUs (on one machine), else the CPU ones."""
    if ON_GPUS and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = tmp_path / "run"
    command = [*config_launch(FSDP2_CPU.with_name(config)), *changes, "--num_machines", "1", "--num_processes", "2"]
    command += ["--machine_rank", "0"]
    command += ["-m", "pods_rl", "train", "--model", str(tiny_model_dir), "--output-dir", str(out), *SMALL_RUN]
    run_launched(command)
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["pods/rollouts_trained"]) for r in steps if r["type"] == "step"] == [(1, 8), (2, 8)]
    assert [(r["step"], r["num_examples"]) for r in steps if r["type"] == "eval"] == [(0, 8), (2, 8)]
    final = load_file(out / "final" / "model.safetensors")
    initial = load_file(tiny_model_dir / "model.safetensors")
    assert {k: v.shape for k, v in final.items() if k in initial} == {k: v.shape for k, v in initial.items()}
    assert not all(torch.equal(final[k], initial[k]) for k in initial)  # trained
