"""FSDP on CPU processes, which accelerate 1.15 silently replaces with DDP.

FSDP is asked for in one of two ways: `accelerate launch` with an FSDP config (`distributed_type: FSDP`) sets
ACCELERATE_USE_FSDP=true in every process; the trainer's arguments (`fsdp`, `fsdp_config`, e.g. from `pods train`
settings) make the Trainer pass an FSDP plugin to its Accelerator. On a machine without an accelerator the
processes join over gloo as MULTI_CPU, and `AcceleratorState.__init__` (accelerate/state.py) turns the distributed
type into FSDP only when it is MULTI_GPU, MULTI_XPU, MULTI_NPU or another accelerator's type: on CPUs the FSDP
plugin is dropped and the Trainer wraps the model in DDP, replicated on every process, without a warning.
PyTorch's FSDP2 (`fully_shard`) shards on CPUs over gloo as it does on GPUs.

`fsdp_on_cpu_processes` presents the MULTI_CPU state as MULTI_GPU to that one check while the trainer's Accelerator
is built; AcceleratorState then records FSDP and keeps its FSDP plugin, and the device stays the CPU (PartialState
chose it before). Nothing changes where FSDP is not requested, where the processes run on an accelerator, or where
an AcceleratorState exists already. CPU processes on a machine that has an accelerator (`use_cpu`) are refused:
FSDP2 would build its default device mesh on the accelerator while the parameters stay on the CPU.
`tests/trainer/test_cpu_fsdp.py` fails once accelerate does this itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def fsdp_on_cpu_processes(*, requested: bool = False) -> Iterator[None]:
    """Build the Accelerator inside this block: FSDP requested on CPU processes, by the launch or by `requested`
    (the trainer's arguments ask for it), is then FSDP, not DDP."""
    import torch
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType, parse_flag_from_env

    shared = PartialState._shared_state
    if (
        not (requested or parse_flag_from_env("ACCELERATE_USE_FSDP"))
        or shared.get("distributed_type") != DistributedType.MULTI_CPU
        or AcceleratorState._shared_state  # built already: it copies the type below and would keep it
    ):
        yield
        return
    if torch.accelerator.is_available():
        accelerator = torch.accelerator.current_accelerator().type
        raise ValueError(
            f"FSDP on CPU processes (use_cpu) needs a machine without an accelerator: FSDP2 would place its device "
            f"mesh on {accelerator} while the model stays on the CPU. Train on {accelerator} (no use_cpu), or on the "
            "CPU without FSDP."
        )
    shared["distributed_type"] = DistributedType.MULTI_GPU  # AcceleratorState replaces it with FSDP
    try:
        yield
    finally:
        if shared["distributed_type"] == DistributedType.MULTI_GPU:  # no AcceleratorState was built
            shared["distributed_type"] = DistributedType.MULTI_CPU
