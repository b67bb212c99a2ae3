"""Seconds per generated and per trained rollout, generating with HF `generate` vs vLLM (colocate), per model.

Each (model, backend) pair runs PODS for a few steps in its own process (one vLLM engine per process) and reports the
median phase times of the steps after the first (warm-up): generation per generated rollout, and the update (old-
policy log-probs, forward, backward, optimizer step and, with vLLM, the weight sync) per trained rollout. The tiny
model is its vLLM variant (2 heads of 32) with both backends.

    .venv-vllm/bin/python benchmarks/vllm_cost.py                    # every model and backend, then the table
    .venv-vllm/bin/python benchmarks/vllm_cost.py --model tiny --backend vllm --steps 8   # one row, as JSON
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from rich.console import Console
from rich.table import Table
from transformers import TrainerCallback

# model: (n, m, prompts per step, completion tokens, steps, task options)
SETUPS = {
    "tiny": (16, 4, 16, 32, 8, None),
    "smollm2-135m": (8, 2, 2, 64, 5, {"operands": [2], "digits": 1, "operators": "+", "num_train": 50, "num_test": 50}),
}
BACKENDS = ("hf", "vllm")


class _Recorder(TrainerCallback):
    def __init__(self):
        self.steps: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "pods/time_generate" in logs:
            self.steps.append(dict(logs))


def measure(model: str, backend: str, steps: int | None) -> dict:
    from measuring import measuring_config

    from pods_rl import PODSTrainer
    from pods_rl.models import model_path
    from pods_rl.models.tiny import TINY_TASK_OPTIONS
    from pods_rl.tasks import load_task

    n, m, prompts, tokens, default_steps, options = SETUPS[model]
    steps = steps or default_steps
    task = load_task("arithmetic", **(options or TINY_TASK_OPTIONS))
    recorder = _Recorder()
    with tempfile.TemporaryDirectory() as out:
        args = measuring_config(
            out,
            num_generations=n,
            num_selected=m,
            per_device_train_batch_size=prompts * m,
            max_completion_length=tokens,
            max_steps=steps,
            temperature=1.0,
            use_vllm=backend == "vllm",
            vllm_max_model_length=512,
            reward_weights=task.reward_weights,
        )
        start = time.perf_counter()
        trainer = PODSTrainer(
            model=model_path(model, vllm=True),  # the same model for both backends
            reward_funcs=task.reward_funcs,
            args=args,
            train_dataset=task.train,
        )
        setup = time.perf_counter() - start
        trainer.add_callback(recorder)
        trainer.train()
    timed = recorder.steps[1:]  # the first step warms up caches (and compiles, for vLLM)

    def median(key: str) -> float:
        return statistics.median(step[key] for step in timed)

    generate, update = median("pods/time_generate"), median("pods/time_update")
    return {
        "model": model,
        "backend": backend,
        "setup_s": setup,
        "steps_timed": len(timed),
        "generated": prompts * n,
        "trained": prompts * m,
        "generate_s": generate,
        "update_s": update,
        "step_s": sum(median(f"pods/time_{phase}") for phase in ("generate", "score", "select", "update")),
        "per_generated_s": generate / (prompts * n),
        "per_trained_s": update / (prompts * m),
        "completion_tokens": median("completions/mean_length"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=list(SETUPS))
    parser.add_argument("--backend", choices=BACKENDS)
    parser.add_argument("--steps", type=int)
    args = parser.parse_args()
    if args.model and args.backend:
        print(json.dumps(measure(args.model, args.backend, args.steps)))
        return
    rows = []
    for model in [args.model] if args.model else list(SETUPS):
        for backend in [args.backend] if args.backend else BACKENDS:
            command = [sys.executable, __file__, "--model", model, "--backend", backend]
            if args.steps:
                command += ["--steps", str(args.steps)]
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode:
                sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
            rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), file=sys.stderr)
    table = Table(title="PODS step costs: HF generate vs vLLM (medians of the steps after the first)")
    columns = ["model", "backend", "gen / trained rows", "generate (s)", "update (s)", "step (s)"]
    columns += ["s per generated", "s per trained", "trained / generated cost", "engine + model load (s)"]
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            row["model"],
            row["backend"],
            f"{row['generated']} / {row['trained']}",
            f"{row['generate_s']:.2f}",
            f"{row['update_s']:.2f}",
            f"{row['step_s']:.2f}",
            f"{row['per_generated_s']:.4f}",
            f"{row['per_trained_s']:.4f}",
            f"{row['per_trained_s'] / row['per_generated_s']:.2f}",
            f"{row['setup_s']:.0f}",
        )
    Console(width=200).print(table)  # the whole table, also in a log file


if __name__ == "__main__":
    main()
