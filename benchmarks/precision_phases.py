"""fp32 against bf16 on this CPU, by phase: seconds of generate, score, select and update per PODS step, for the tiny
default and both SmolLM2 CPU presets, and what the start-up measurement of `pods train` predicts for each.

Each setting is a preset's step exactly as `pods train` builds it (its defaults on this machine, HF `generate`), run
for `--steps` steps in fp32 and in bf16 (autocast over fp32 weights, as `pods train` trains when it chooses bf16),
`--repeats` times with the precisions alternating; a phase's figure is the median over the steps after the first of
every run. The prediction is `pods_rl.run.step_costs.measure_step` on the same model and shape (generation and
update only, completions at full length), which decides a run's precision: where it disagrees with the steps on which
precision is faster, the start-up choice is wrong on this machine. A second table checks that bf16 leaves the model's
token distribution as it was: over greedy fp32 completions of held-out prompts, the mean and largest total variation
distance between the fp32 and the bf16 next-token distributions, and the share of prompts whose greedy completion is
the same under bf16.

    .venv/bin/python benchmarks/precision_phases.py                      # all three settings, 8 steps, 2 repeats
    .venv/bin/python benchmarks/precision_phases.py --settings tiny smollm2-sums --steps 8 --repeats 2

Timings need an otherwise idle machine; name the CPU (the first line prints it). `--quick` (a tiny shape) and
`--tiny-dir` are for checking that the script runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import warnings

import torch
from rich.table import Table
from transformers.trainer_callback import PrinterCallback
from transformers.utils.logging import disable_progress_bar

from pods_rl import PODSTrainer
from pods_rl.console import make_console
from pods_rl.defaults import default_run_settings
from pods_rl.machine import cpu_flags, describe_machine, machine_label
from pods_rl.precision import bf16_instructions
from pods_rl.run.settings import RunSettings
from pods_rl.run.step_costs import measure_step, step_shape, typical_prompt
from pods_rl.tasks import load_task
from pods_rl.trainer.trainer import PHASES
from pods_rl.versions import CHECKPOINTING_FIELD

SETTINGS = {"tiny": ("tiny", "arithmetic"), "smollm2-sums": ("smollm2-135m", "arithmetic"),
            "smollm2-3term": ("smollm2-135m", "arithmetic-3term")}  # fmt: skip
PRECISIONS = ("fp32", "bf16")
QUICK = {"trainer": {"num_generations": 4, "num_selected": 2, "per_device_train_batch_size": 4,
                     "max_completion_length": 8}, "task_options": {"num_train": 32, "num_test": 8}}  # fmt: skip
LEAN = {"logging_steps": 1, "report_to": "none", "save_strategy": "no", "disable_tqdm": True,
        CHECKPOINTING_FIELD: False, "use_vllm": False}  # fmt: skip


def run_settings(name: str, options: argparse.Namespace) -> RunSettings:
    """The setting's `pods train` settings on this machine, HF `generate`, shrunk by `--quick`."""
    model, task = SETTINGS[name]
    settings = default_run_settings(model, task)
    if options.quick:
        settings["trainer"].update(QUICK["trainer"])
        settings["task_options"].update(QUICK["task_options"])
    settings["trainer"] = {**settings["trainer"], "max_steps": options.steps, "use_vllm": False}
    return RunSettings.from_dict(settings)


def load(name: str, options: argparse.Namespace):
    from pods_rl.models import load_model

    model = SETTINGS[name][0]
    return load_model(options.tiny_dir if model == "tiny" and options.tiny_dir else model, dtype=torch.float32)


def phase_seconds(name: str, precision: str, options: argparse.Namespace) -> list[dict[str, float]]:
    """Each step's phase seconds of one fresh run."""
    settings = run_settings(name, options)
    task = load_task(settings.task, **settings.task_options)
    model, tokenizer = load(name, options)
    with tempfile.TemporaryDirectory() as out:
        args = settings.trainer_config(out, **LEAN, bf16=precision == "bf16")
        args.reward_weights = task.reward_weights
        trainer = PODSTrainer(
            model=model, reward_funcs=task.reward_funcs, args=args, train_dataset=task.train,
            processing_class=tokenizer,
        )  # fmt: skip
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return [
        {phase: entry[f"pods/time_{phase}"] for phase in PHASES}
        for entry in trainer.state.log_history
        if "pods/time_update" in entry
    ]


def predicted(name: str, options: argparse.Namespace) -> dict[str, float]:
    """What `pods train`'s start-up measurement predicts a step costs in each precision."""
    settings = run_settings(name, options)
    task = load_task(settings.task, **settings.task_options)
    model, tokenizer = load(name, options)
    with tempfile.TemporaryDirectory() as out:
        shape = step_shape(settings.trainer_config(out, **LEAN))
    costs = measure_step(
        model, typical_prompt(tokenizer, task.train), shape, PRECISIONS, pad_token_id=tokenizer.pad_token_id
    )
    return {precision: phases["generate"] + phases["update"] for precision, phases in costs.items()}


def distribution_check(name: str, options: argparse.Namespace, prompts: int, chunk: int = 8) -> dict[str, float]:
    """Total variation distance between fp32 and bf16 next-token distributions along greedy fp32 completions of
    held-out prompts (each position up to the completion's end), and the share of prompts whose greedy completion
    bf16 leaves unchanged."""
    settings = run_settings(name, options)
    task = load_task(settings.task, **settings.task_options)
    model, tokenizer = load(name, options)
    model.eval()
    tokenizer.padding_side = "left"
    rows = task.test.select(range(min(prompts, len(task.test))))["prompt"]
    greedy = dict(max_new_tokens=settings.trainer["max_completion_length"], do_sample=False,
                  pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    ends = torch.tensor(sorted({tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}))
    distances, same = [], 0
    for first in range(0, len(rows), chunk):
        texts = [
            tokenizer.apply_chat_template(row, add_generation_prompt=True, tokenize=False)
            for row in rows[first : first + chunk]
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        width = batch["input_ids"].shape[1]
        with torch.no_grad():
            fp32 = model.generate(**batch, **greedy)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                bf16 = model.generate(**batch, **greedy)
            mask = torch.cat([batch["attention_mask"], torch.ones_like(fp32[:, width:])], dim=1)
            probabilities = {}
            for precision in PRECISIONS:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                    logits = model(input_ids=fp32, attention_mask=mask).logits[:, width - 1 : -1]
                probabilities[precision] = logits.float().softmax(-1)
        completion = fp32[:, width:]
        is_end = torch.isin(completion, ends).long()
        generated = (is_end.cumsum(1) - is_end) == 0  # up to the first EOS or pad, that one included
        distance = 0.5 * (probabilities["fp32"] - probabilities["bf16"]).abs().sum(-1)
        distances.append(distance[generated])
        texts_fp32, texts_bf16 = (
            tokenizer.batch_decode(ids[:, width:], skip_special_tokens=True) for ids in (fp32, bf16)
        )
        same += sum(a == b for a, b in zip(texts_fp32, texts_bf16, strict=True))
    distance = torch.cat(distances)
    return {"mean": distance.mean().item(), "max": distance.max().item(), "same": same / len(rows),
            "prompts": len(rows)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    parser.add_argument("--steps", type=int, default=8, help="steps per run (the first is left out)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per setting and precision, alternating")
    parser.add_argument("--prompts", type=int, default=64, help="held-out prompts of the distribution check")
    parser.add_argument("--quick", action="store_true", help="a tiny shape: checks that the script runs")
    parser.add_argument("--tiny-dir", help="a tiny model folder to use instead of the built-in `tiny`")
    options = parser.parse_args()
    if options.steps < 2:
        parser.error("--steps must be at least 2: the first step is left out")
    warnings.filterwarnings("ignore")
    disable_progress_bar()  # the tables are the output
    console = make_console(stderr=False)
    flags = cpu_flags()
    console.print(
        f"machine: {machine_label(describe_machine())}; bf16 instructions: {bf16_instructions(flags) or 'none'}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"vector flags: {' '.join(sorted(f for f in flags if f.startswith(('avx512', 'amx'))))}"
    )
    phases = Table(
        "setting", "precision", *PHASES, "step", "bf16 speed-up", "start-up measurement predicts",
        title=f"seconds per PODS step by phase, median of steps 2-{options.steps} of {options.repeats} run(s) each",
    )  # fmt: skip
    check = Table("setting", "prompts", "mean TV distance", "largest TV distance", "greedy completions unchanged",
                  title="bf16 against fp32: next-token distributions along greedy fp32 completions")  # fmt: skip
    for name in options.settings:
        try:
            load(name, options)
        except (ModuleNotFoundError, FileNotFoundError) as error:
            console.print(f"{name}: skipped ({error})")
            continue
        steps: dict[str, list[dict[str, float]]] = {precision: [] for precision in PRECISIONS}
        for repeat in range(options.repeats):
            for precision in PRECISIONS if repeat % 2 == 0 else reversed(PRECISIONS):
                steps[precision] += phase_seconds(name, precision, options)[1:]
        medians = {
            precision: {phase: statistics.median(step[phase] for step in runs) for phase in PHASES}
            for precision, runs in steps.items()
        }
        totals = {precision: statistics.median(sum(s.values()) for s in runs) for precision, runs in steps.items()}
        prediction = predicted(name, options)
        for precision in PRECISIONS:
            speedup = f"{totals['fp32'] / totals['bf16']:.2f}x" if precision == "bf16" else ""
            by_phase = [f"{medians[precision][phase]:.3f}" for phase in PHASES]
            if precision == "bf16":
                by_phase = [
                    f"{value} ({medians['fp32'][phase] / max(medians['bf16'][phase], 1e-9):.2f}x)"
                    for value, phase in zip(by_phase, PHASES, strict=True)
                ]
            phases.add_row(name, precision, *by_phase, f"{totals[precision]:.3f}", speedup,
                           f"{prediction[precision]:.3f}")  # fmt: skip
        distances = distribution_check(name, options, options.prompts)
        check.add_row(name, str(distances["prompts"]), f"{distances['mean']:.4f}", f"{distances['max']:.4f}",
                      f"{100 * distances['same']:.0f}%")  # fmt: skip
    console.print(phases)
    console.print(check)


if __name__ == "__main__":
    main()
