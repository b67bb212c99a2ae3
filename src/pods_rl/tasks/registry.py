"""Task registry: names to loaders, the options every task shares, and the checks every task passes.

Which names exist is `pods_rl.tasks.names` (no loader needed); this module imports a loader only when asked for it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from datasets import Dataset

from pods_rl.tasks.base import Task
from pods_rl.tasks.names import GYM_PREFIX, check_task_name


def load_task(name: str = "arithmetic", **options: Any) -> Task:
    """Build the task `name`; `reward_weights` (a list, or a dict by reward name) applies to any task.

    Raises ValueError for an unknown task or option, and for a dataset without rows or without its
    `prompt` and `answer` columns.
    """
    loader = _loader(name)
    weights = options.pop("reward_weights", None)
    parameters = inspect.signature(loader).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        keyword = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        known = sorted(p.name for p in parameters if p.kind in keyword)
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(
                f"unknown option(s) {unknown} for task {name!r}; options: {sorted({*known, 'reward_weights'})}"
            )
    task = loader(**options)
    check_dataset(task.train, f"{task.name} train")
    check_dataset(task.test, f"{task.name} test")
    if weights is not None:
        task.reward_weights = resolve_weights(task, weights)
        task.options["reward_weights"] = task.reward_weights
    return task


def _loader(name: str) -> Callable[..., Task]:
    check_task_name(name)
    if name.startswith(GYM_PREFIX):
        from pods_rl.tasks.gym import load_reasoning_gym

        return functools.partial(load_reasoning_gym, name.removeprefix(GYM_PREFIX))
    if name == "arithmetic":
        from pods_rl.tasks.arithmetic import load_arithmetic

        return load_arithmetic
    if name == "arithmetic-3term":
        from pods_rl.tasks.arithmetic import load_three_term_sums

        return load_three_term_sums
    if name == "gsm8k":
        from pods_rl.tasks.math_datasets import load_gsm8k

        return load_gsm8k
    if name == "math":
        from pods_rl.tasks.math_datasets import load_math

        return load_math
    raise AssertionError(f"task {name!r} is listed in pods_rl.tasks.names but has no loader")


def resolve_weights(task: Task, weights: Sequence[float] | Mapping[str, float]) -> list[float]:
    """Weights for `task.reward_funcs`: one per function, or some of them by `__name__`."""
    names = [func.__name__ for func in task.reward_funcs]
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ValueError(f"reward_weights names unknown rewards {unknown}; rewards: {names}")
        return [float(weights.get(n, w)) for n, w in zip(names, task.reward_weights, strict=True)]
    if len(weights) != len(names):
        raise ValueError(f"reward_weights needs {len(names)} values, one per reward {names}; got {weights}")
    return [float(w) for w in weights]


def check_dataset(dataset: Dataset, what: str) -> None:
    """Fail early, naming the culprit, rather than deep inside the trainer."""
    missing = [column for column in ("prompt", "answer") if column not in dataset.column_names]
    if missing:
        raise ValueError(f"{what} dataset lacks column(s) {missing}; it has {dataset.column_names}")
    if len(dataset) == 0:
        raise ValueError(f"{what} dataset is empty")
