"""Update cost vs m: PODS removes unselected rollouts before the update, so update time should scale with m/n.

For each model and m in {n, n/2, n/4, n/8} at n = 32, trains a few PODS steps on one prompt per step with
completions forced to full length (so every row costs the same), and reports the median `pods/time_update`
(old/reference log-probs if any, forward, backward and optimizer step) and its ratio to m = n.

    .venv/bin/python benchmarks/update_cost.py [--steps 6]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import warnings

from measuring import measuring_config
from rich.console import Console
from rich.table import Table
from transformers.trainer_callback import PrinterCallback

from pods_rl import PODSTrainer
from pods_rl.models.tiny import TinyRecipe, build_model, build_tokenizer
from pods_rl.tasks import load_task

MODELS = {
    "tiny": TinyRecipe(),
    "wide": dataclasses.replace(TinyRecipe(), hidden_size=256, intermediate_size=1024, num_layers=4),
}
POOL = 32
COMPLETION_TOKENS = 64


def digit_count(completions, **kwargs) -> list[float]:
    """A cheap reward with spread, so selection has variance to pick from."""
    return [float(sum(ch.isdigit() for ch in c[0]["content"])) for c in completions]


def median_update_seconds(recipe: TinyRecipe, selected: int, steps: int) -> tuple[float, int]:
    tokenizer = build_tokenizer(recipe.vocab_size)
    model = build_model(recipe, tokenizer)
    task = load_task("arithmetic", num_train=256, num_test=16)
    with tempfile.TemporaryDirectory() as out:
        args = measuring_config(
            out,
            num_generations=POOL,
            num_selected=selected,
            per_device_train_batch_size=selected,  # one prompt per step
            max_completion_length=COMPLETION_TOKENS,
            generation_kwargs={"min_new_tokens": COMPLETION_TOKENS},  # every row costs the same
            max_steps=steps,
        )
        trainer = PODSTrainer(
            model=model, reward_funcs=digit_count, args=args, train_dataset=task.train, processing_class=tokenizer
        )
        trainer.remove_callback(PrinterCallback)  # the table is the output
        trainer.train()
    times = [log["pods/time_update"] for log in trainer.state.log_history if "pods/time_update" in log]
    return statistics.median(times[1:]), sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="steps per setting (the first is warm-up)")
    steps = parser.parse_args().steps
    warnings.filterwarnings("ignore")
    table = Table(title=f"PODS update time per generation batch, n = {POOL}, {COMPLETION_TOKENS}-token completions")
    for column in ("model", "params", "m", "rows trained", "update (s)", "ratio to m = n", "ideal m/n"):
        table.add_column(column, justify="right")
    for name, recipe in MODELS.items():
        baseline = None
        for selected in (POOL, POOL // 2, POOL // 4, POOL // 8):
            seconds, params = median_update_seconds(recipe, selected, steps)
            baseline = baseline or seconds
            table.add_row(
                name, f"{params / 1e6:.2f}M", str(selected), str(selected), f"{seconds:.4f}",
                f"{seconds / baseline:.3f}", f"{selected / POOL:.3f}",
            )  # fmt: skip
    Console().print(table)


if __name__ == "__main__":
    main()
