"""The paper's rewards as TRL reward functions: `f(completions, answer, **kwargs) -> list[float]`.

Summed with weights 1.0 each they give its non-binary reward: correctness (1.0 or 0.0) plus a small format
reward (up to 0.1) plus a tag reward (0.025 per tag). Completions may be conversational (a list of messages)
or plain strings. `format` shadows the builtin here on purpose: TRL logs each reward by `__name__`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pods_rl.grading import extract_answer, grade

FORMAT_REWARD = 0.1
FORMAT_PENALTY_PER_CHAR = 0.001
TAG_REWARD = 0.025
TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def completion_text(completion: str | Sequence[dict[str, Any]]) -> str:
    """The text of one completion: a plain string, or the contents of its chat messages joined."""
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] for m in completion if isinstance(m.get("content"), str))


def accuracy(completions: Sequence[Any], answer: Sequence[str], **kwargs: Any) -> list[float]:
    """1.0 when the extracted answer (<answer> block, else \\boxed{}, else last number) equals `answer`."""
    scores = []
    for completion, gold in zip(completions, answer, strict=True):
        predicted = extract_answer(completion_text(completion))
        scores.append(1.0 if predicted is not None and grade(predicted, str(gold)) else 0.0)
    return scores


def format(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """0.1 for `<think>...</think><answer>...</answer>`, less 0.001 per character outside it, floored at 0."""
    return [_format_score(completion_text(completion)) for completion in completions]


def tags(completions: Sequence[Any], **kwargs: Any) -> list[float]:
    """0.025 per tag that occurs exactly once and in order with the other such tags."""
    return [_tags_score(completion_text(completion)) for completion in completions]


REWARD_FUNCS = [accuracy, format, tags]
REWARD_WEIGHTS = [1.0, 1.0, 1.0]


def _format_score(text: str) -> float:
    # str.find rather than a lazy regex: linear time even on megabytes of repeated tags.
    text = text.strip()
    think = text.find("<think>")
    think_end = text.find("</think>", think) if think != -1 else -1
    if think_end == -1:
        return 0.0
    answer = think_end + len("</think>")
    while answer < len(text) and text[answer].isspace():
        answer += 1
    answer_end = text.find("</answer>", answer) if text.startswith("<answer>", answer) else -1
    if answer_end == -1:
        return 0.0
    outside = think + len(text) - (answer_end + len("</answer>"))
    return round(max(0.0, FORMAT_REWARD - FORMAT_PENALTY_PER_CHAR * outside), 6)


def _tags_score(text: str) -> float:
    once = {tag: text.find(tag) for tag in TAGS if text.count(tag) == 1}
    placed = sum(
        all((once[other] < once[tag]) == (j < i) for j, other in enumerate(TAGS) if other in once)
        for i, tag in enumerate(TAGS)
        if tag in once
    )
    return round(TAG_REWARD * placed, 6)
