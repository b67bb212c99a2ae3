"""Tasks: named bundles of TRL-conversational datasets, the system prompt and the reward functions.

`load_task("gsm8k", num_train=1000)` builds one; `list_tasks()` says which exist. Imported lazily: listing or
checking task names (`pods_rl.tasks.names`) imports no loader, nor datasets.
"""

from typing import TYPE_CHECKING

from pods_rl.tasks.names import list_tasks

if TYPE_CHECKING:
    from pods_rl.tasks.base import SYSTEM_PROMPT, Task
    from pods_rl.tasks.registry import load_task

__all__ = ["SYSTEM_PROMPT", "Task", "list_tasks", "load_task"]


def __getattr__(name: str):
    if name in ("SYSTEM_PROMPT", "Task"):
        from pods_rl.tasks import base

        return getattr(base, name)
    if name == "load_task":
        from pods_rl.tasks.registry import load_task

        return load_task
    raise AttributeError(f"module 'pods_rl.tasks' has no attribute {name!r}")
