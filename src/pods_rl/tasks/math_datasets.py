"""GSM8K and MATH tasks, from the hub or from local files in the same schema through the same code path."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets.config
import huggingface_hub.constants
from datasets import Dataset, concatenate_datasets, load_dataset

from pods_rl import rewards
from pods_rl.grading import last_boxed
from pods_rl.hub import hub_unreachable
from pods_rl.tasks.base import SYSTEM_PROMPT, Task, conversational_dataset

logger = logging.getLogger(__name__)

GSM8K_HUB = ("openai/gsm8k", "main")
MATH_TRAIN_HUB = "EleutherAI/hendrycks_math"
MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)
MATH_TEST_HUB = ("HuggingFaceH4/MATH-500", None)

DataFiles = Mapping[str, str | Sequence[str]]
_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def load_gsm8k(
    *,
    data_files: DataFiles | None = None,
    num_train: int | None = None,
    num_test: int | None = None,
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    cache_dir: str | None = None,
) -> Task:
    """GSM8K: the question, and the number after `####` (commas dropped) as the answer.

    `data_files` ({"train": ..., "test": ...}, JSON/JSONL/parquet/CSV with `question` and `answer`)
    replaces the hub dataset openai/gsm8k.
    """
    splits = _load_splits({"train": [GSM8K_HUB], "test": [GSM8K_HUB]}, data_files, cache_dir)
    return _make_task(
        "gsm8k",
        splits,
        required_columns=("question", "answer"),
        answer_of=gsm8k_answer,
        options=dict(data_files=data_files, num_train=num_train, num_test=num_test, seed=seed),
        system_prompt=system_prompt,
    )


def load_math(
    *,
    data_files: DataFiles | None = None,
    num_train: int | None = None,
    num_test: int | None = None,
    seed: int = 0,
    system_prompt: str = SYSTEM_PROMPT,
    cache_dir: str | None = None,
) -> Task:
    """MATH: the seven subjects to train on, MATH-500 to test on; the answer is the `answer` column where
    there is one, else the last \\boxed{} of the `solution`.

    `data_files` ({"train": ..., "test": ...}, rows with `problem` and `solution`, optionally `answer`)
    replaces the hub datasets.
    """
    train_sources = [(MATH_TRAIN_HUB, subject) for subject in MATH_SUBJECTS]
    splits = _load_splits({"train": train_sources, "test": [MATH_TEST_HUB]}, data_files, cache_dir)
    return _make_task(
        "math",
        splits,
        required_columns=("problem",),  # and `solution` or `answer`: rows without either are dropped
        answer_of=math_answer,
        options=dict(data_files=data_files, num_train=num_train, num_test=num_test, seed=seed),
        system_prompt=system_prompt,
    )


def gsm8k_answer(row: Mapping[str, Any]) -> str | None:
    """'... #### 1,234' -> '1234'; None without a `####` line."""
    solution = str(row["answer"])
    return solution.rsplit("####", 1)[1].strip().replace(",", "") if "####" in solution else None


def math_answer(row: Mapping[str, Any]) -> str | None:
    """The `answer` column when present and non-empty (MATH-500), else the last \\boxed{} of `solution`."""
    answer = row.get("answer")
    if isinstance(answer, str) and answer.strip():
        return answer.strip()
    return last_boxed(str(row.get("solution", "")))


def _load_splits(
    hub_sources: Mapping[str, Sequence[tuple[str, str | None]]],
    data_files: DataFiles | None,
    cache_dir: str | None,
) -> dict[str, Dataset]:
    """Every split of a task, from the hub (`hub_sources`: split -> its (dataset, config) sources) or from the local
    `data_files`; the hub is probed once for all of them."""
    with _offline_if_hub_unreachable() if data_files is None else contextlib.nullcontext():
        return {split: _load_split(sources, split, data_files, cache_dir) for split, sources in hub_sources.items()}


def _load_split(
    hub_sources: Sequence[tuple[str, str | None]],
    split: str,
    data_files: DataFiles | None,
    cache_dir: str | None,
) -> Dataset:
    """One split through `datasets.load_dataset`: the hub configs concatenated, or the local files."""
    if data_files is None:
        sources = [(path, dict(name=name)) for path, name in hub_sources]
    else:
        if split not in data_files:
            raise ValueError(f"data_files needs a {split!r} entry; got keys {sorted(data_files)}")
        files = data_files[split]
        for file in [files] if isinstance(files, str) else files:
            if Path(file).is_file() and Path(file).stat().st_size == 0:
                raise ValueError(f"{split} data file {file} is empty.")
        sources = [(_builder(files), dict(data_files={split: files}))]
    parts = [load_dataset(path, split=split, cache_dir=cache_dir, **kwargs) for path, kwargs in sources]
    return concatenate_datasets(parts) if len(parts) > 1 else parts[0]


@contextlib.contextmanager
def _offline_if_hub_unreachable() -> Iterator[None]:
    """Load in datasets' offline mode when the hub cannot be reached: from the local cache where the data is there,
    else an immediate error. Otherwise `load_dataset` retries for about 25 s before failing (measured offline).
    The offline switches are module constants that datasets and huggingface_hub read when they are called."""
    if not hub_unreachable():
        yield
        return
    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def _builder(files: str | Sequence[str]) -> str:
    first = files if isinstance(files, str) else files[0]
    extension = "." + str(first).rsplit(".", 1)[-1].lower()
    if extension not in _BUILDERS:
        raise ValueError(f"data_files must be one of {sorted(_BUILDERS)}; got {first!r}")
    return _BUILDERS[extension]


def _make_task(
    name: str,
    splits: dict[str, Dataset],
    *,
    required_columns: tuple[str, ...],
    answer_of: Callable[[Mapping[str, Any]], str | None],
    options: dict[str, Any],
    system_prompt: str,
) -> Task:
    """Convert each split; the first of `required_columns` is the question."""
    limits = {"train": options["num_train"], "test": options["num_test"]}
    converted = {}
    for split, dataset in splits.items():
        missing = [column for column in required_columns if column not in dataset.column_names]
        if missing:
            raise ValueError(f"{name} {split} data lacks column(s) {missing}; it has {dataset.column_names}")
        rows = [(row[required_columns[0]], answer_of(row)) for row in dataset]
        kept = [(question, answer) for question, answer in rows if answer is not None]
        if len(kept) < len(rows):
            logger.warning("%s %s: dropped %d rows without a final answer", name, split, len(rows) - len(kept))
        converted[split] = _limit(
            conversational_dataset([q for q, _ in kept], [a for _, a in kept], system_prompt),
            limits[split],
            options["seed"] if split == "train" else None,
        )
    return Task(
        name=name,
        train=converted["train"],
        test=converted["test"],
        system_prompt=system_prompt,
        reward_funcs=list(rewards.REWARD_FUNCS),
        reward_weights=list(rewards.REWARD_WEIGHTS),
        options={**options, "system_prompt": system_prompt},
    )


def _limit(dataset: Dataset, limit: int | None, shuffle_seed: int | None) -> Dataset:
    """The first `limit` rows; train rows are shuffled first so that a limit still spans every subject."""
    if limit is None or limit >= len(dataset):
        return dataset
    if shuffle_seed is not None:
        dataset = dataset.shuffle(seed=shuffle_seed)
    return dataset.select(range(limit))
