"""GPU check: seconds per generated and per trained rollout, and phase times of GRPO (n = m) vs PODS (n -> m) steps.

Runs PODSTrainer (TRL's HF-generate path, no vLLM) on one GPU with a Llama built in code at the shape of a
~0.5B model (Qwen2.5-0.5B: hidden 896, 24 layers, 14 heads / 2 KV heads, MLP 4864, vocabulary 151,936, tied
embeddings; random weights: cost does not depend on the values). Prompts are random token strings of a fixed
length and completions are forced to full length (`min_new_tokens`), so every row costs the same and GRPO and
PODS steps compare like for like: the same prompts per step and the same m trained rows per prompt, PODS
generating n = 4m per prompt. GRPO is PODSTrainer with m = n (the same code path, nothing removed). Each run's
first step is warm-up; the table shows medians over the others of PODSTrainer's `pods/time_*` phases (GPU
synchronised at step boundaries) and the peak GPU memory.

    python benchmarks/gpu_check.py              # one GPU: 119 s on an H200 (docs/benchmarks/gpu.md)
    python benchmarks/gpu_check.py --dry-run    # the same code path on CPU at a tiny shape, well under a minute

It imports only torch, tokenizers, transformers, accelerate, trl, datasets, rich and pods_rl's trainer: no task, no
math-verify, no reasoning-gym; its reward is a function of the completion's tokens defined here.

Carrying the missing wheels to a GPU machine without internet (one with torch, transformers 5.17, accelerate 1.15,
peft, pandas, pyarrow 25, xxhash, rich; not trl, datasets or their dill and multiprocess). On a machine with
internet, in the repository root (`.whl/` is git-ignored):

    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
        --platform manylinux2014_x86_64 -d .whl trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19

(pods-rl accepts the machine's transformers 5.17; `pods train` there also needs math-verify==0.9.0,
latex2sympy2_extended==1.11.0, antlr4-python3-runtime==4.13.2, pydantic with its pydantic_core, annotated-types
and typing-inspection, and reasoning-gym for its tasks.) Copy the repository with `.whl/` to the GPU machine, then:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    PYTHONPATH=/tmp/site:$PWD/src python3 benchmarks/gpu_check.py

datasets 5.2 asks for pyarrow >= 24; on an older pyarrow add its manylinux wheel to the download.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.metadata
import random
import statistics
import tempfile
import time
import warnings

import torch
from datasets import Dataset
from measuring import measuring_config
from rich.console import Console
from rich.table import Table
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_callback import PrinterCallback

from pods_rl import PODSTrainer

SPECIAL = ["<pad>", "<eos>", "<unk>"]
PHASES = ("generate", "score", "select", "update")


@dataclasses.dataclass(frozen=True)
class Shape:
    """The model and the batch: everything the check's cost depends on."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    prompt_tokens: int
    completion_tokens: int
    prompts_per_step: int
    m: int
    n_pods: int


REAL = Shape(
    151_936, 896, 24, 14, 2, 4864, prompt_tokens=256, completion_tokens=512, prompts_per_step=8, m=8, n_pods=32
)
DRY = Shape(1024, 64, 2, 4, 2, 128, prompt_tokens=16, completion_tokens=16, prompts_per_step=2, m=4, n_pods=16)


def word_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A tokenizer of `vocab_size` words `w3`, `w4`, ... (one token each), so any sampled id decodes."""
    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), vocab_size)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def random_llama(shape: Shape, tokenizer: PreTrainedTokenizerFast, device: torch.device) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_kv_heads,
        max_position_embeddings=shape.prompt_tokens + shape.completion_tokens,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    with device:
        model = LlamaForCausalLM(config)
    return model.to(torch.bfloat16) if device.type == "cuda" else model


def prompts(shape: Shape, count: int) -> Dataset:
    """Plain-text prompts of exactly `prompt_tokens` random words."""
    rng = random.Random(0)
    words = range(len(SPECIAL), shape.vocab_size)
    return Dataset.from_dict(
        {"prompt": [" ".join(f"w{rng.choice(words)}" for _ in range(shape.prompt_tokens)) for _ in range(count)]}
    )


def even_word_fraction(completions: list[str], **kwargs) -> list[float]:
    """A cheap reward with spread across a pool: the fraction of the completion's words with an even id."""
    rewards = []
    for text in completions:
        ids = [int(word[1:]) for word in text.split() if word[1:].isdigit()]
        rewards.append(sum(i % 2 == 0 for i in ids) / max(len(ids), 1))
    return rewards


class CudaSync(TrainerCallback):
    """Waits for the GPU at step boundaries, so that each step's queued kernels count in that step's phases."""

    def on_step_begin(self, args, state, control, **kwargs):
        torch.cuda.synchronize()

    def on_step_end(self, args, state, control, **kwargs):
        torch.cuda.synchronize()


def run(shape: Shape, n: int, steps: int, device: torch.device, tokenizer: PreTrainedTokenizerFast) -> dict[str, float]:
    """Median phase seconds of PODSTrainer steps with pools of n and m trained rows per prompt."""
    model = random_llama(shape, tokenizer, device)
    rows = shape.prompts_per_step * shape.m  # trained rows per step, the same for GRPO and PODS
    micro_batch = min(rows, 16)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory() as out:
        args = measuring_config(
            out,
            gpu=device.type == "cuda",
            num_generations=n,
            num_selected=shape.m,
            per_device_train_batch_size=micro_batch,
            gradient_accumulation_steps=rows // micro_batch,
            max_completion_length=shape.completion_tokens,
            generation_kwargs={"min_new_tokens": shape.completion_tokens},  # no early EOS: every row costs the same
            temperature=1.0,
            beta=0.0,
            max_steps=steps,
            learning_rate=1e-6,
            seed=0,
        )
        trainer = PODSTrainer(
            model=model,
            reward_funcs=even_word_fraction,
            args=args,
            train_dataset=prompts(shape, shape.prompts_per_step * steps),
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)  # the table is the output
        if device.type == "cuda":
            trainer.callback_handler.callbacks.insert(0, CudaSync())  # before the phase clock reads its time
        trainer.train()
    logs = [log for log in trainer.state.log_history if "pods/time_generate" in log][1:]  # the first is warm-up
    result = {phase: statistics.median(log[f"pods/time_{phase}"] for log in logs) for phase in PHASES}
    result["step"] = sum(result[phase] for phase in PHASES)
    result["generated"] = logs[-1]["pods/rollouts_generated"]
    result["trained"] = logs[-1]["pods/rollouts_trained"]
    result["memory_gib"] = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
    result["params"] = sum(p.numel() for p in model.parameters())
    del trainer, model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shape: checks the code path in seconds")
    parser.add_argument("--steps", type=int, default=4, help="steps per run; the first is warm-up (default 4)")
    options = parser.parse_args()
    if options.steps < 2:
        parser.error("--steps must be at least 2 (the first step is warm-up)")
    warnings.filterwarnings("ignore")
    if options.dry_run:
        device, shape = torch.device("cpu"), DRY
    elif torch.cuda.is_available():
        device, shape = torch.device("cuda"), REAL
    else:
        parser.error("no GPU found: run on a GPU machine, or use --dry-run")
    console = Console(width=200)  # the whole table, also in a log file
    versions = ", ".join(f"{name} {importlib.metadata.version(name)}" for name in ("torch", "transformers", "trl"))
    where = (
        torch.cuda.get_device_name() if device.type == "cuda" else "CPU, dry run (code path only: times mean nothing)"
    )
    console.print(f"{where}; {versions}; shape {shape}")

    started = time.perf_counter()
    tokenizer = word_tokenizer(shape.vocab_size)
    results = {
        "GRPO": run(shape, shape.m, options.steps, device, tokenizer),
        "PODS": run(shape, shape.n_pods, options.steps, device, tokenizer),
    }
    grpo = results["GRPO"]
    table = Table(
        title=(
            f"{grpo['params'] / 1e6:.1f}M-parameter Llama, {shape.prompt_tokens}-token prompts, "
            f"{shape.completion_tokens}-token completions, {shape.prompts_per_step} prompts per step, "
            f"median of steps 2-{options.steps}"
        )
    )
    columns = ["run", "n", "m", "generated", "trained", *(f"{p} (s)" for p in PHASES), "step (s)"]
    columns += ["s / generated", "s / trained", "peak GiB"]
    for column in columns:
        table.add_column(column, justify="right")
    for name, r in results.items():
        n = shape.m if name == "GRPO" else shape.n_pods
        table.add_row(
            name, str(n), str(shape.m), f"{r['generated']:.0f}", f"{r['trained']:.0f}",
            *(f"{r[p]:.3f}" for p in PHASES), f"{r['step']:.3f}",
            f"{r['generate'] / r['generated']:.5f}", f"{r['update'] / r['trained']:.5f}", f"{r['memory_gib']:.1f}",
        )  # fmt: skip
    console.print(table)
    pods = results["PODS"]
    console.print(
        f"PODS / GRPO: step {pods['step'] / grpo['step']:.2f}x, generate {pods['generate'] / grpo['generate']:.2f}x "
        f"for {shape.n_pods // shape.m}x the rollouts, update {pods['update'] / grpo['update']:.2f}x for the same "
        f"trained rows. s / generated = generate time per generated rollout; s / trained = update time per trained "
        f"rollout. Total {time.perf_counter() - started:.0f} s."
    )
    console.print(cost_model_entry(results, where))


def cost_model_entry(results: dict[str, dict], where: str) -> str:
    """This machine's step cost as a `cost_models` entry of a comparison's settings (compare.yaml), onto which `pods
    compare` projects each arm's steps to target: generate + score + select fitted as a line through GRPO's and
    PODS's rollouts generated, the update taken as proportional to the rows trained (both runs train the same)."""
    grpo, pods = results["GRPO"], results["PODS"]
    generation = {name: sum(r[p] for p in PHASES if p != "update") for name, r in results.items()}
    per_generated = (generation["PODS"] - generation["GRPO"]) / (pods["generated"] - grpo["generated"])
    per_step = generation["GRPO"] - per_generated * grpo["generated"]
    per_trained = (grpo["update"] + pods["update"]) / 2 / grpo["trained"]
    return (
        "cost_models:  # for compare.yaml: pods compare projects its steps to target onto this step cost\n"
        f"  - {{name: {where!r}, source: benchmarks/gpu_check.py, per_step: {per_step:.4f}, "
        f"per_generated: {per_generated:.6f}, per_trained: {per_trained:.6f}, trained_per_step: {grpo['trained']:.0f}}}"
    )


if __name__ == "__main__":
    main()
