"""vLLM generation for PODSTrainer: an engine sized to the pool, and the CPU engine made usable for training.

TRL builds its vLLM engine inside `GRPOTrainer.__init__` with `max_num_seqs` = the rows each process *trains*
(`per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation`). PODS generates n/m times
more rows per process than it trains, so that engine would decode each pool in n/m sequential waves. While
`GRPOTrainer.__init__` runs, `pool_sized_vllm` hands TRL a `VLLMGeneration` whose `max_num_seqs` is the pool.
On a CPU the engine also runs eagerly: vLLM would otherwise compile the model with inductor during the first
generation (over 4 minutes for SmolLM2-135M on a loaded 2-core CPU, inside the run's training time).
A colocated engine's weight-loading progress bars follow the trainer's `disable_tqdm`.
`tests/trainer/test_vllm.py` checks the TRL and vLLM internals this relies on.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

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
    from trl.generation import vllm_generation
    from trl.trainer import grpo_trainer

    with contextlib.ExitStack() as stack:
        if args.vllm_mode == "colocate":
            from vllm.platforms import current_platform

            # The engine's weight-loading progress bars follow the trainer's (`disable_tqdm`; off in `pods train`).
            engine_options: dict[str, Any] = {"use_tqdm_on_load": not args.disable_tqdm}
            if current_platform.is_cpu():
                from pods_rl.trainer.vllm_cpu import prepare_cpu_engine

                if args.vllm_enable_sleep_mode:
                    raise ValueError("vllm_enable_sleep_mode: vLLM's CPU engine has no sleep mode; set it to False.")
                prepare_cpu_engine()
                engine_options["enforce_eager"] = True
            engine = functools.partial(vllm_generation.LLM, **engine_options)
            stack.enter_context(_replaced(vllm_generation, "LLM", engine))
        sized = functools.partial(grpo_trainer.VLLMGeneration, max_num_seqs=pool_rows_per_engine(args))
        stack.enter_context(_replaced(grpo_trainer, "VLLMGeneration", _overriding(sized)))
        yield


def _overriding(partial: functools.partial):
    """Call `partial`'s function with its keywords overriding the caller's (a plain partial would clash)."""

    def call(**kwargs: Any):
        return partial.func(**{**kwargs, **partial.keywords})

    return call


@contextlib.contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)
