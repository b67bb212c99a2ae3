"""reasoning-gym datasets as tasks, generated offline and scored by each dataset's own `score_answer`.

Each row keeps its reasoning-gym entry (question, answer, metadata) JSON-serialised in `rg_entry`; TRL
hands that column to the accuracy reward, which rebuilds the entry and calls the dataset's scorer on the
extracted answer, in the grading worker (see `pods_rl.grading.score_reasoning_gym`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from datasets import Dataset

from pods_rl import rewards
from pods_rl.grading import extract_answer, score_reasoning_gym
from pods_rl.tasks.base import SYSTEM_PROMPT, RewardFunc, Task, conversational_dataset
from pods_rl.tasks.names import GYM_PREFIX, check_task_name

ENTRY_COLUMN = "rg_entry"
# reasoning-gym seeds item i with seed + i, so the test seed sits far past any training index.
TEST_SEED_OFFSET = 10**9


def load_reasoning_gym(
    dataset: str,
    *,
    num_train: int = 1000,
    num_test: int = 100,
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    config: dict[str, Any] | None = None,
) -> Task:
    """Task `reasoning-gym:<dataset>`; `config` holds the dataset's own options (difficulty and such).

    Train and test come from different seeds, and test questions that also occur in train are dropped.
    """
    check_task_name(GYM_PREFIX + dataset)
    config = dict(config or {})
    reserved = sorted({"seed", "size"} & set(config))
    if reserved:
        raise ValueError(f"set {reserved} through the options seed/num_train/num_test, not config")
    train_entries = _generate(dataset, config, seed, num_train)
    train_questions = {entry["question"] for entry in train_entries}
    test_entries = [
        entry
        for entry in _generate(dataset, config, seed + TEST_SEED_OFFSET, num_test)
        if entry["question"] not in train_questions
    ]
    return Task(
        name=GYM_PREFIX + dataset,
        train=_to_dataset(train_entries, system_prompt),
        test=_to_dataset(test_entries, system_prompt),
        system_prompt=system_prompt,
        reward_funcs=[
            # The scorer's instance needs the dataset's config, never its items: size 1 keeps it cheap.
            gym_accuracy(dataset, {**config, "seed": seed, "size": 1}),
            rewards.format,
            rewards.tags,
        ],
        reward_weights=list(rewards.REWARD_WEIGHTS),
        options=dict(num_train=num_train, num_test=num_test, seed=seed, config=config, system_prompt=system_prompt),
    )


def gym_accuracy(dataset: str, config: dict[str, Any]) -> RewardFunc:
    """The accuracy reward of a reasoning-gym task; `config` builds the scoring dataset instance."""

    def accuracy(completions: Sequence[Any], rg_entry: Sequence[str], **kwargs: Any) -> list[float]:
        """`score_answer` of the extracted answer, in [0, 1]: some datasets give partial credit."""
        return [
            score_reasoning_gym(dataset, config, entry, extract_answer(rewards.completion_text(completion)))
            for completion, entry in zip(completions, rg_entry, strict=True)
        ]

    return accuracy


def _generate(dataset: str, config: dict[str, Any], seed: int, size: int) -> list[dict[str, Any]]:
    import reasoning_gym

    try:
        generator = reasoning_gym.create_dataset(dataset, **config, seed=seed, size=size)
    except (AssertionError, TypeError, ValueError) as error:  # reasoning-gym validates configs with assert
        raise ValueError(f"reasoning-gym dataset {dataset!r} refused size={size}, config={config}: {error}") from error
    return [generator[i] for i in range(size)]


def _to_dataset(entries: list[dict[str, Any]], system_prompt: str) -> Dataset:
    return conversational_dataset(
        [entry["question"] for entry in entries],
        ["" if entry["answer"] is None else entry["answer"] for entry in entries],
        system_prompt,
        **{ENTRY_COLUMN: [json.dumps(entry) for entry in entries]},
    )
