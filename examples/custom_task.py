"""PODS on your own data and reward function, with plain `PODSTrainer` and `PODSConfig` (TRL's GRPO API).

Three things are yours: the dataset (prompts, plus any column your reward reads), the rewards (plain functions),
and the model. Here they are sized for a laptop CPU and under a minute of training: sums of three one-digit
numbers, a reward of 1 for the right answer (and 0.1 for answering in the asked format), and pods-rl's built-in
tiny model (a 2-layer Llama built in code and warm-started on such sums the first time it is used, then cached).
Nothing is downloaded.

    python examples/custom_task.py                 # train, then print held-out accuracy before and after
    python examples/custom_task.py --max-steps 5   # a quick check

With your own model, pass `--model` a hub id or a folder (and your own system prompt below); on a GPU the same
script trains in bf16.
"""

import argparse
import random
import re

import torch
from datasets import Dataset

from pods_rl import PODSConfig, PODSTrainer
from pods_rl.models.tiny import TINY_SYSTEM_PROMPT, build_tiny
from pods_rl.versions import CHECKPOINTING_FIELD  # transformers 5.23 renamed gradient_checkpointing

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--model", help="a hub id or local folder (default: the built-in tiny model)")
parser.add_argument("--max-steps", type=int, default=60)
parser.add_argument("--output-dir", default="runs/custom-task")
options = parser.parse_args()

# 1. Your data: a `prompt` (chat messages) and the columns your reward needs (here `answer`). Any dataset works,
#    e.g. `load_dataset(...)` or `Dataset.from_list(rows)`. The system prompt is the format the tiny model was
#    warm-started on; with your own model write your own.
sums = [(a, b, c) for a in range(10) for b in range(10) for c in range(10)]
random.Random(0).shuffle(sums)


def to_dataset(triples: list[tuple[int, int, int]]) -> Dataset:
    return Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "system", "content": TINY_SYSTEM_PROMPT},
                    {"role": "user", "content": f"Compute {a}+{b}+{c}."},
                ],
                "answer": str(a + b + c),
            }
            for a, b, c in triples
        ]
    )


test_set, train_set = to_dataset(sums[:100]), to_dataset(sums[100:])


# 2. Your rewards: plain functions. TRL passes the completions and every dataset column by name, one value per
#    rollout; each returns one float per rollout (or None: "does not apply"). Their weighted sum is the reward.
def answer_of(completion) -> str | None:
    text = completion[0]["content"] if isinstance(completion, list) else completion  # chat messages or plain text
    found = re.search(r"<answer>\s*(.*?)\s*</answer>", text, re.DOTALL)
    return found.group(1) if found else None


def correct_answer(completions: list, answer: list[str], **kwargs) -> list[float]:
    """1.0 when the <answer> block holds the right number, else 0.0."""
    return [1.0 if answer_of(c) == expected else 0.0 for c, expected in zip(completions, answer, strict=True)]


def answer_format(completions: list, **kwargs) -> list[float]:
    """1.0 when the completion has an <answer> block at all (weighted 0.1 below: a hint, not the goal)."""
    return [0.0 if answer_of(c) is None else 1.0 for c in completions]


# 3. The model: a hub id, a local folder, or a model object.
model = options.model or str(build_tiny())

# PODS: generate n rollouts per prompt, train on the m of them whose rewards vary most.
n, m = 8, 4
prompts_per_step = 8
on_gpu = torch.cuda.is_available()
args = PODSConfig(
    output_dir=options.output_dir,
    num_generations=n,  # n: the pool generated per prompt (TRL's meaning)
    num_selected=m,  # m: the rollouts per prompt the update sees (max reward variance, the paper's rule)
    # The batch-size rule: `per_device_train_batch_size` counts *trained* rows (m per prompt), not prompts or
    # generated rollouts. So a step here is 32 / m = 8 prompts, 8 x n = 64 rollouts generated, 32 rows trained
    # (per process: under `accelerate launch` with k processes, k times that). Moving a GRPOConfig over unchanged
    # (its batch counted n rows per prompt) would make PODS generate n/m times more prompts per step: divide the
    # batch size by n/m to keep the same prompts (and the same generation).
    per_device_train_batch_size=prompts_per_step * m,
    max_steps=options.max_steps,
    learning_rate=1e-4,
    lr_scheduler_type="constant",
    max_completion_length=32,
    temperature=1.0,
    # TRL turns activation checkpointing on by default; on a small model it only slows generation and the update.
    **{CHECKPOINTING_FIELD: False},
    bf16=on_gpu,
    use_cpu=not on_gpu,
    reward_weights=[1.0, 0.1],  # one per reward function
    logging_steps=10,
    save_strategy="no",
    report_to="none",
    seed=0,
)
rewards = [correct_answer, answer_format]
trainer = PODSTrainer(model=model, reward_funcs=rewards, args=args, train_dataset=train_set)


@torch.no_grad()
def accuracy(dataset: Dataset) -> float:
    """Held-out greedy pass@1, graded by the same reward function."""
    tokenizer, policy = trainer.processing_class, trainer.model
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in dataset["prompt"]]
    tokenizer.padding_side = "left"  # generation continues every prompt from its last token
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(policy.device)
    generated = policy.generate(**batch, max_new_tokens=args.max_completion_length, do_sample=False)
    completions = tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return sum(correct_answer(completions, dataset["answer"])) / len(dataset)


before = accuracy(test_set)
trainer.train()
after = accuracy(test_set)
trainer.save_model(f"{options.output_dir}/final")
if trainer.accelerator.is_main_process:  # one report under `accelerate launch`
    logged = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    print(f"train reward (mean over the pool): {logged[0]:.2f} at the first log -> {logged[-1]:.2f} at the last")
    print(f"held-out accuracy: {100 * before:.1f}% -> {100 * after:.1f}% in {trainer.state.global_step} steps")
    print(f"model saved in {options.output_dir}/final")
