"""PODS on TRL: `PODSConfig` and `PODSTrainer`, a drop-in for `GRPOConfig` and `GRPOTrainer`."""

from pods_rl.trainer.config import PODSConfig
from pods_rl.trainer.trainer import PODSTrainer

__all__ = ["PODSConfig", "PODSTrainer"]
