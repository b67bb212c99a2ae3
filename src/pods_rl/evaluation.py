"""Held-out pass@1 accuracy: greedy, and/or sampled at a temperature and averaged over k samples."""

from __future__ import annotations

from collections.abc import Callable

import torch
from datasets import Dataset

RewardFunc = Callable[..., list[float]]
Progress = Callable[[int], None]  # completions generated so far in this evaluation


def _generate(model, tokenizer, prompts: list[list[dict]], gen_kwargs: dict) -> list[str]:
    """Batched left-padded generation of one completion per prompt; returns the decoded completions."""
    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"  # so that every row's completion starts at the same position
    try:
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    finally:
        tokenizer.padding_side = side
    out = model.generate(
        **inputs, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **gen_kwargs
    )
    return tokenizer.batch_decode(out[:, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


def _mean_reward(
    model, tokenizer, dataset: Dataset, reward: RewardFunc, batch_size: int, gen_kwargs: dict, progress: Progress
) -> float:
    """Mean reward of one completion per row; the reward sees the dataset's other columns (e.g. `answer`)."""
    total = 0.0
    for start in range(0, len(dataset), batch_size):
        progress(start)
        rows = dataset[start : start + batch_size]
        completions = _generate(model, tokenizer, rows["prompt"], gen_kwargs)
        extra = {k: v for k, v in rows.items() if k not in ("prompt", "completion")}
        total += sum(reward(completions=[[{"role": "assistant", "content": c}] for c in completions], **extra))
    return total / len(dataset)


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
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, float | int]:
    """Pass@1 of `model` on a conversational `dataset` (`prompt` messages plus the reward's columns).

    `greedy` gives "accuracy" (greedy decoding); `num_samples=k > 0` gives "accuracy_sampled", the mean over
    k sampled completions per prompt at `temperature`, seeded so it repeats, without moving the global RNG.
    The reward defaults to the accuracy reward (1 if the answer is right, else 0): accuracy is its mean.
    The model is restored to its previous train/eval mode afterwards. `progress` receives (completions generated,
    completions to generate) before each batch and at the end.
    """
    if not greedy and num_samples <= 0:
        raise ValueError("nothing to evaluate: set greedy=True and/or num_samples > 0")
    if len(dataset) == 0:
        raise ValueError("dataset is empty")
    if reward is None:
        from pods_rl.rewards import accuracy as reward
    passes = int(greedy) + num_samples
    total = passes * len(dataset)
    done_passes = 0

    def report(done_in_pass: int) -> None:
        if progress is not None:
            progress(done_passes * len(dataset) + done_in_pass, total)

    results: dict[str, float | int] = {"num_examples": len(dataset)}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            if greedy:
                gen_kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False}
                results["accuracy"] = _mean_reward(model, tokenizer, dataset, reward, batch_size, gen_kwargs, report)
                done_passes += 1
            if num_samples > 0:
                gen_kwargs = {
                    "max_new_tokens": max_new_tokens,
                    "do_sample": True,
                    "temperature": temperature,
                    "top_p": 1.0,
                    "top_k": 0,
                }
                with torch.random.fork_rng(devices=[]):  # seeded here without moving the caller's RNG
                    torch.manual_seed(seed)
                    scores = []
                    for _ in range(num_samples):
                        scores.append(_mean_reward(model, tokenizer, dataset, reward, batch_size, gen_kwargs, report))
                        done_passes += 1
                results["accuracy_sampled"] = sum(scores) / num_samples
                results["num_samples"] = num_samples
    finally:
        model.train(was_training)
    report(0)  # done_passes == passes: the whole evaluation
    return results
