"""Held-out pass@1 accuracy: greedy, and/or sampled at a temperature and averaged over k samples.

Completions come from HF `generate` on the model, or from a vLLM engine holding the same weights (a run that
generates with vLLM evaluates on its engine: much faster). Both see the same prompts (the chat template, tokenized
without special tokens), stop at the tokenizer's EOS or the token limit, are decoded by the same tokenizer and graded
by the same reward, so they differ only where the engine's arithmetic does (vLLM's CPU engine runs in bf16).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from datasets import Dataset
from transformers import StoppingCriteriaList

RewardFunc = Callable[..., list[float]]
Progress = Callable[[int], None]  # completions generated so far in this evaluation


@dataclass(frozen=True)
class Decoding:
    """How one pass decodes: greedy (temperature None) or sampled at `temperature` with full top-p and top-k."""

    max_new_tokens: int
    temperature: float | None = None
    seed: int = 0  # of a sampled pass on vLLM (HF generate draws from torch's RNG, seeded by `evaluate`)

    def hf_kwargs(self) -> dict[str, Any]:
        if self.temperature is None:
            return {"max_new_tokens": self.max_new_tokens, "do_sample": False}
        return {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": True,
            "temperature": self.temperature,
            "top_p": 1.0,
            "top_k": 0,
        }

    def vllm_params(self, eos_token_id: int):
        from vllm import SamplingParams

        sampled = self.temperature is not None
        return SamplingParams(
            max_tokens=self.max_new_tokens,
            temperature=self.temperature if sampled else 0.0,
            top_p=1.0,
            top_k=0,
            seed=self.seed if sampled else None,
            stop_token_ids=[eos_token_id],
        )


class _FinishedRows:
    """A stopping criterion that never stops: it reports how many rows of the batch have ended (written their EOS),
    so that an evaluation done in one large batch shows progress before the batch ends."""

    def __init__(self, prompt_length: int, eos_token_id: int, report: Callable[[int], None]):
        self.prompt_length, self.eos_token_id, self.report = prompt_length, eos_token_id, report
        self.finished = 0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        finished = int((input_ids[:, self.prompt_length :] == self.eos_token_id).any(dim=1).sum())
        if finished != self.finished:
            self.finished = finished
            self.report(finished)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def _prompt_texts(tokenizer, prompts: list[list[dict]]) -> list[str]:
    return [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]


def _generate(
    model, tokenizer, prompts: list[list[dict]], decoding: Decoding, finished: Callable[[int], None]
) -> list[str]:
    """Batched left-padded generation of one completion per prompt; returns the decoded completions.

    `finished` receives the number of rows that have ended whenever it changes during generation.
    """
    texts = _prompt_texts(tokenizer, prompts)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # so that every row's completion starts at the same position
    try:
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    finally:
        tokenizer.padding_side = side
    prompt_length = inputs["input_ids"].shape[1]
    out = model.generate(
        **inputs,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        stopping_criteria=StoppingCriteriaList([_FinishedRows(prompt_length, tokenizer.eos_token_id, finished)]),
        **decoding.hf_kwargs(),
    )
    return tokenizer.batch_decode(out[:, prompt_length:], skip_special_tokens=True)


def _generate_vllm(
    engine, tokenizer, prompts: list[list[dict]], decoding: Decoding, finished: Callable[[int], None]
) -> list[str]:
    """One completion per prompt from a vLLM engine, tokenized and decoded as `_generate` does."""
    token_ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in _prompt_texts(tokenizer, prompts)]
    outputs = engine.generate(
        [{"prompt_token_ids": ids} for ids in token_ids],
        decoding.vllm_params(tokenizer.eos_token_id),
        use_tqdm=False,
    )
    finished(len(outputs))
    return tokenizer.batch_decode([list(o.outputs[0].token_ids) for o in outputs], skip_special_tokens=True)


Generate = Callable[[list[list[dict]], Decoding, Callable[[int], None]], list[str]]


def _reward_sum(
    generate: Generate,
    dataset: Dataset,
    counted: int,
    reward: RewardFunc,
    batch_size: int,
    decoding: Decoding,
    progress: Progress,
) -> float:
    """Sum of the rewards of one completion for each of the first `counted` rows (the rest only fill the batches).

    The reward sees the dataset's other columns (e.g. `answer`).
    """
    total = 0.0
    for start in range(0, len(dataset), batch_size):
        progress(start)
        rows = dataset[start : start + batch_size]
        completions = generate(rows["prompt"], decoding, lambda ended, start=start: progress(start + ended))
        extra = {k: v for k, v in rows.items() if k not in ("prompt", "completion")}
        rewards = reward(completions=[[{"role": "assistant", "content": c}] for c in completions], **extra)
        total += sum(rewards[: max(0, counted - start)])
    return total


def _shard(dataset: Dataset, index: int, count: int) -> tuple[Dataset, int]:
    """Process `index`'s contiguous share of `dataset` out of `count`, and how many of its rows count.

    Every share has the same length (the short ones are filled with copies of row 0 that are not counted), so all
    processes run the same number of generation batches: under ZeRO-3 or FSDP each forward pass is a collective.
    """
    size = -(-len(dataset) // count)
    rows = list(range(index * size, min((index + 1) * size, len(dataset))))
    return dataset.select(rows + [0] * (size - len(rows))), len(rows)


def _sum_over_processes(values: list[float], device: torch.device) -> list[float]:
    totals = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(totals)
    return totals.tolist()


def evaluate(
    model,
    tokenizer,
    dataset: Dataset,
    *,
    reward: RewardFunc | None = None,
    max_new_tokens: int = 64,
    batch_size: int = 64,
    greedy: bool = True,
    num_samples: int = 0,
    temperature: float = 1.0,
    seed: int = 0,
    sharded: bool = False,
    progress: Callable[[int, int], None] | None = None,
    engine: Any = None,
) -> dict[str, float | int]:
    """Pass@1 of `model` on a conversational `dataset` (`prompt` messages plus the reward's columns).

    `greedy` gives "accuracy" (greedy decoding); `num_samples=k > 0` gives "accuracy_sampled", the mean over
    k sampled completions per prompt at `temperature`, seeded so it repeats, without moving the global RNG.
    The reward defaults to the accuracy reward (1 if the answer is right, else 0): accuracy is its mean.
    The model is restored to its previous train/eval mode afterwards. `progress` receives (completions generated,
    completions to generate) before each batch, whenever a row of the batch ends, and at the end; on many
    processes, this process's count times the number of processes (every share has the same length).

    `sharded=True` is for runs on many processes (torch.distributed): every process must call it, each evaluates
    an equal share of `dataset`, and the reward sums are added up, so every process returns the result for the
    whole dataset. Greedy accuracy is then the same as on one process; the sampled draws differ.

    `engine`: a vLLM `LLM` holding `model`'s current weights, to generate with instead of `model.generate`.
    """
    if not greedy and num_samples <= 0:
        raise ValueError("nothing to evaluate: set greedy=True and/or num_samples > 0")
    if len(dataset) == 0:
        raise ValueError("dataset is empty")
    if reward is None:
        from pods_rl.rewards import accuracy as reward
    results: dict[str, float | int] = {"num_examples": len(dataset)}
    num_processes = dist.get_world_size() if sharded and dist.is_available() and dist.is_initialized() else 1
    part, counted = _shard(dataset, dist.get_rank(), num_processes) if num_processes > 1 else (dataset, len(dataset))
    passes = int(greedy) + num_samples
    to_generate = passes * len(dataset)
    done_passes = 0

    def report(done_in_pass: int) -> None:
        if progress is not None:
            done = (done_passes * len(part) + done_in_pass) * num_processes
            progress(min(done, to_generate), to_generate)

    generate: Generate = (
        functools.partial(_generate, model, tokenizer)
        if engine is None
        else functools.partial(_generate_vllm, engine, tokenizer)
    )
    sums: dict[str, float] = {}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if greedy:
                decoding = Decoding(max_new_tokens)
                sums["accuracy"] = _reward_sum(generate, part, counted, reward, batch_size, decoding, report)
                done_passes += 1
            if num_samples > 0:
                with torch.random.fork_rng(devices=[]):  # seeded here without moving the caller's RNG
                    torch.manual_seed(seed)
                    sampled = 0.0
                    for index in range(num_samples):
                        decoding = Decoding(max_new_tokens, temperature, seed=seed * num_samples + index)
                        sampled += _reward_sum(generate, part, counted, reward, batch_size, decoding, report)
                        done_passes += 1
                sums["accuracy_sampled"] = sampled / num_samples
                results["num_samples"] = num_samples
    finally:
        model.train(was_training)
    report(0)  # done_passes == passes: the whole evaluation
    if num_processes > 1:
        sums = dict(zip(sums, _sum_over_processes(list(sums.values()), model.device), strict=True))
    results.update({key: total / len(dataset) for key, total in sums.items()})
    return results
