"""The Task bundle shared by every task (datasets, prompt and rewards travel together) and its dataset format."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from datasets import Dataset

RewardFunc = Callable[..., list[float]]

# The paper's prompt for instruct models: reason inside <think>, answer inside <answer>.
SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The Assistant first thinks about the reasoning process and then provides the answer. "
    "Respond in the following format: <think>\n...\n</think>\n<answer>\n...\n</answer>"
)


@dataclass
class Task:
    """A named RLVR task: TRL-conversational datasets (`prompt` messages, `answer`) plus its verifiers."""

    name: str
    train: Dataset
    test: Dataset
    system_prompt: str
    reward_funcs: list[RewardFunc]
    reward_weights: list[float]
    options: dict = field(default_factory=dict)


def conversational_dataset(
    questions: Sequence[str], answers: Sequence[str], system_prompt: str, **columns: Sequence[Any]
) -> Dataset:
    """TRL's conversational format: `prompt` as system + user messages, `answer` as str, plus `columns`."""
    prompts = [
        [{"role": "system", "content": system_prompt}, {"role": "user", "content": question}] for question in questions
    ]
    return Dataset.from_dict({"prompt": prompts, "answer": [str(a) for a in answers], **columns})
