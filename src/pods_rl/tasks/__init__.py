"""Tasks: named bundles of TRL-conversational datasets, the system prompt and the reward functions.

`load_task("gsm8k", num_train=1000)` builds one; `list_tasks()` says which exist. Loaders import their
dependencies lazily, so listing tasks downloads and generates nothing.
"""

from pods_rl.tasks.base import SYSTEM_PROMPT, Task
from pods_rl.tasks.registry import list_tasks, load_task

__all__ = ["SYSTEM_PROMPT", "Task", "list_tasks", "load_task"]
