"""vLLM generation for PODSTrainer: an engine sized to the pool, and the CPU engine made usable for training.

TRL builds its vLLM engine inside `GRPOTrainer.__init__` with `max_num_seqs` = the rows each process *trains*
(`per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation`). PODS generates n/m times
more rows per process than it trains, so that engine would decode each pool in n/m sequential waves. While
`GRPOTrainer.__init__` runs, `pool_sized_vllm` hands TRL a `VLLMGeneration` whose `max_num_seqs` is the pool.
`tests/trainer/test_vllm.py` checks the TRL and vLLM internals this relies on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pods_rl.trainer.config import PODSConfig


def pool_rows_per_engine(args: PODSConfig) -> int:
    """Rows one colocated engine generates per generation batch: this process's pool, times its TP group."""
    return args.local_pool_size * args.vllm_tensor_parallel_size


@contextlib.contextmanager
def pool_sized_vllm(args: PODSConfig) -> Iterator[None]:
    """While TRL builds its vLLM engine: size the engine's batch to the pool, and prepare vLLM on a CPU."""
    if not args.use_vllm:
        yield
        return
    from trl.trainer import grpo_trainer

    if args.vllm_mode == "colocate":
        from vllm.platforms import current_platform

        if current_platform.is_cpu():
            from pods_rl.trainer.vllm_cpu import prepare_cpu_engine

            if args.vllm_enable_sleep_mode:
                raise ValueError("vllm_enable_sleep_mode: vLLM's CPU engine has no sleep mode; set it to False.")
            prepare_cpu_engine()

    trl_generation = grpo_trainer.VLLMGeneration

    def sized_to_pool(**kwargs):
        return trl_generation(**{**kwargs, "max_num_seqs": pool_rows_per_engine(args)})

    grpo_trainer.VLLMGeneration = sized_to_pool
    try:
        yield
    finally:
        grpo_trainer.VLLMGeneration = trl_generation
