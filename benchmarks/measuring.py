"""The settings every benchmark's PODS runs share, so each script states only what it measures."""

from __future__ import annotations

from typing import Any

from pods_rl import PODSConfig
from pods_rl.versions import CHECKPOINTING_FIELD


def measuring_config(output_dir: str, *, gpu: bool = False, **fields: Any) -> PODSConfig:
    """A PODSConfig for a timed run: `fields` (sizes, steps, lengths) over settings that keep the step lean and
    quiet (a log record per step for the phase times, no checkpoints, reports or progress bars, no activation
    checkpointing); fp32 on the CPU, bf16 on a GPU."""
    defaults: dict[str, Any] = {
        "learning_rate": 1e-5,
        "bf16": gpu,
        "use_cpu": not gpu,
        CHECKPOINTING_FIELD: False,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
    }
    return PODSConfig(output_dir=output_dir, **{**defaults, **fields})
