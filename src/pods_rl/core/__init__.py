"""Engine-independent PODS core: rollout selection and group advantages, pure PyTorch."""

from pods_rl.core.advantages import group_advantages
from pods_rl.core.budget import select_batch
from pods_rl.core.selection import select_rollouts

__all__ = ["group_advantages", "select_batch", "select_rollouts"]
