"""pods-rl: GRPO with PODS rollout down-sampling (train on the m most informative of n rollouts).

The core (`select_rollouts`, `select_batch`, `group_advantages`) is pure PyTorch. Both it and the TRL integration
(`PODSConfig`, `PODSTrainer`) are imported lazily: using the core never imports a trainer, and the `pods` command
checks its settings before torch loads.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pods_rl.core import group_advantages, select_batch, select_rollouts
    from pods_rl.trainer import PODSConfig, PODSTrainer

__all__ = ["PODSConfig", "PODSTrainer", "group_advantages", "select_batch", "select_rollouts"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("group_advantages", "select_batch", "select_rollouts"):
        from pods_rl import core

        return getattr(core, name)
    if name in ("PODSConfig", "PODSTrainer"):
        from pods_rl import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'pods_rl' has no attribute {name!r}")
