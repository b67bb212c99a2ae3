"""The drop-in's overhead: PODSTrainer with m = n (plain GRPO through PODS's code path) against stock
`trl.GRPOTrainer`, on the same config, data, initial weights and seed.

For each model, `--pairs` interleaved pairs of runs (GRPO then PODS, then PODS then GRPO, ...) of `--steps` steps each,
every run a fresh trainer on a fresh copy of the model: seconds per optimizer step (wall time from the step's start
to its end, the median over the steps after the first, which carries the start-up), per run, the median of each
trainer's runs, their ratio (PODS / GRPO, within 3% expected), and whether the two trainers' losses were identical
step for step (they train the same rows with the same advantages; PODS computes them in float64, TRL in float32, so
the losses may differ by float rounding, about 1e-7).

    .venv/bin/python benchmarks/dropin_overhead.py                  # tiny (30 steps) and SmolLM2-135M (6), 3 pairs
    .venv/bin/python benchmarks/dropin_overhead.py --models tiny --steps 30 --pairs 3

The steps: tiny, the tiny default's with m = n = 16 (4 prompts x 16 rollouts of up to 32 tokens, all 64 trained);
SmolLM2, its CPU preset's with m = n = 8 (2 prompts x 8 rollouts of up to 64 tokens, all 16 trained). Timings need an
otherwise idle machine. `--quick` (a tiny shape, for checking that the script runs) and `--tiny-dir` (a tiny model
folder instead of the built-in one) are for tests.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from typing import Any

from measuring import measuring_config
from rich.table import Table
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.utils.logging import disable_progress_bar
from trl import GRPOConfig, GRPOTrainer

from pods_rl import PODSTrainer
from pods_rl.console import make_console
from pods_rl.machine import describe_machine, machine_label
from pods_rl.tasks import load_task
from pods_rl.versions import CHECKPOINTING_FIELD

# Per model: the task options and the step (PODS's preset sizes with m = n).
SETUPS: dict[str, dict[str, Any]] = {
    "tiny": {
        "steps": 30,
        "task": {"operands": [3], "digits": 1, "operators": "+", "num_train": 800, "num_test": 200},
        "trainer": {"num_generations": 16, "per_device_train_batch_size": 64, "max_completion_length": 32,
                    "learning_rate": 1e-4, "temperature": 1.0},
    },
    "smollm2": {
        "steps": 6,  # about 20 s each on 2 cores: 3 pairs take about 15 minutes
        "task": {"operands": [2], "digits": 1, "operators": "+", "num_train": 50, "num_test": 50},
        "trainer": {"num_generations": 8, "per_device_train_batch_size": 16, "max_completion_length": 64,
                    "learning_rate": 2e-5, "temperature": 1.0},
    },
}  # fmt: skip
QUICK = {"num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 8}


class StepClock(TrainerCallback):
    """Wall seconds of each optimizer step, from its start to its end (generation included)."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(time.perf_counter() - self._start)


def steps(model: str, options: argparse.Namespace) -> int:
    return options.steps or SETUPS[model]["steps"]


def load(model: str, tiny_dir: str | None):
    import torch

    from pods_rl.models import load_model

    name = tiny_dir if model == "tiny" and tiny_dir else {"tiny": "tiny", "smollm2": "smollm2-135m"}[model]
    return load_model(name, dtype=torch.float32)


def one_run(model: str, trainer_name: str, options: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Seconds of each step and the loss of each step of one fresh run."""
    setup = SETUPS[model]
    fields = {**setup["trainer"], **(QUICK if options.quick else {}), "max_steps": steps(model, options)}
    fields.update(bf16=options.bf16, seed=options.seed)
    task_options = {**setup["task"], **({"num_train": 32, "num_test": 8} if options.quick else {})}
    if model == "tiny":
        from pods_rl.models.tiny import TINY_SYSTEM_PROMPT

        task_options["system_prompt"] = TINY_SYSTEM_PROMPT
    task = load_task("arithmetic", **task_options)
    network, tokenizer = load(model, options.tiny_dir)
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        if trainer_name == "PODS":
            args, trainer_class = measuring_config(out, num_selected=fields["num_generations"], **fields), PODSTrainer
        else:
            lean = {"use_cpu": True, CHECKPOINTING_FIELD: False, "logging_steps": 1, "report_to": "none",
                    "save_strategy": "no", "disable_tqdm": True}  # fmt: skip  # measuring_config's, for GRPOConfig
            args, trainer_class = GRPOConfig(output_dir=out, **lean, **fields), GRPOTrainer
        args.reward_weights = task.reward_weights
        trainer = trainer_class(
            model=network, reward_funcs=task.reward_funcs, args=args, train_dataset=task.train,
            processing_class=tokenizer, callbacks=[clock],
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return clock.seconds, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    parser.add_argument("--steps", type=int, help="steps per run, the first left out (default: 30 tiny, 6 SmolLM2)")
    parser.add_argument("--pairs", type=int, default=3, help="interleaved GRPO/PODS pairs per model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bf16", action="store_true", help="train both in bf16 autocast (default fp32)")
    parser.add_argument("--quick", action="store_true", help="a tiny shape: checks that the script runs")
    parser.add_argument("--tiny-dir", help="a tiny model folder to use instead of the built-in `tiny`")
    options = parser.parse_args()
    if options.steps is not None and options.steps < 2:
        parser.error("--steps must be at least 2: the first step is left out")
    warnings.filterwarnings("ignore")
    disable_progress_bar()  # the tables are the output
    console = make_console(stderr=False)
    console.print(f"machine: {machine_label(describe_machine())}; {'bf16' if options.bf16 else 'fp32'}")
    table = Table(
        "model", "trainer", "s/step per run", "median s/step", "PODS / GRPO", "losses",
        title="PODSTrainer (m = n) vs trl.GRPOTrainer: median seconds a step over the steps after the first",
    )  # fmt: skip
    for model in options.models:
        try:
            load(model, options.tiny_dir)
        except (ModuleNotFoundError, FileNotFoundError) as error:
            console.print(f"{model}: skipped ({error})")
            continue
        runs: dict[str, list[float]] = {"GRPO": [], "PODS": []}
        losses: dict[str, list[list[float]]] = {"GRPO": [], "PODS": []}
        for pair in range(options.pairs):
            for name in ("GRPO", "PODS") if pair % 2 == 0 else ("PODS", "GRPO"):
                seconds, run_losses = one_run(model, name, options)
                runs[name].append(statistics.median(seconds[1:]))
                losses[name].append(run_losses)
        medians = {name: statistics.median(values) for name, values in runs.items()}
        difference = max(
            (abs(a - b) for grpo, pods in zip(losses["GRPO"], losses["PODS"], strict=True)
             for a, b in zip(grpo, pods, strict=True)),
            default=0.0,
        )  # fmt: skip
        same = (
            "identical"
            if difference == 0
            else f"equal to {difference:.1g} (rounding)"
            if difference < 1e-5
            else f"differ by up to {difference:.2g}"
        )
        for name in ("GRPO", "PODS"):
            ratio = f"{medians['PODS'] / medians['GRPO']:.3f}x" if name == "PODS" else ""
            table.add_row(
                model, name, ", ".join(f"{s:.4f}" for s in runs[name]), f"{medians[name]:.4f}", ratio,
                same if name == "PODS" else "",
            )  # fmt: skip
    console.print(table)


if __name__ == "__main__":
    main()
