"""pods-rl: GRPO with PODS rollout down-sampling (train on the m most informative of n rollouts).

The core (`select_rollouts`, `select_batch`, `group_advantages`) is pure PyTorch. The TRL integration (`PODSConfig`,
`PODSTrainer`) is imported lazily so that using the core never imports a trainer.
"""

from typing import TYPE_CHECKING

from pods_rl.core import group_advantages, select_batch, select_rollouts

if TYPE_CHECKING:
    from pods_rl.trainer import PODSConfig, PODSTrainer

__all__ = ["PODSConfig", "PODSTrainer", "group_advantages", "select_batch", "select_rollouts"]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in ("PODSConfig", "PODSTrainer"):
        from pods_rl import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'pods_rl' has no attribute {name!r}")
