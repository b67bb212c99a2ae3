"""vLLM generation for PODSTrainer: an engine sized to the pool, and the CPU engine made usable for training.

TRL builds its vLLM engine inside `GRPOTrainer.__init__` with `max_num_seqs` = the rows each process *trains*
(`per_device_train_batch_size * vllm_tensor_parallel_size * steps_per_generation`). PODS generates n/m times
more rows per process than it trains, so that engine would decode each pool in n/m sequential waves. While
`GRPOTrainer.__init__` runs, `pool_sized_vllm` makes TRL's `LLM(...)` call size `max_num_seqs` to the pool, up
to the engine's `max_num_batched_tokens` (which TRL fixes, 4096, with no setting to raise it; vLLM refuses an
engine whose `max_num_seqs` exceeds it): a larger pool is decoded in waves of that many sequences.
On a CPU the engine also runs eagerly: vLLM would otherwise compile the model with inductor during the first
generation (over 4 minutes for SmolLM2-135M on a loaded 2-core CPU, inside the run's training time).
`evaluation_engine` lends the same engine to the held-out evaluation, with the policy's current weights.
A colocated engine's weight-loading progress bars follow the trainer's `disable_tqdm`.
`tests/trainer/test_vllm.py` checks the TRL and vLLM internals this relies on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pods_rl.trainer.config import PODSConfig


def pool_rows_per_engine(args: PODSConfig) -> int:
    """Rows one colocated engine generates per generation batch: this process's pool, times its TP group."""
    return args.largest_generation_call * args.vllm_tensor_parallel_size


def engine_max_num_seqs(pool_rows: int, max_num_batched_tokens: int) -> int:
    """vLLM's `max_num_seqs` for a pool of `pool_rows`: the whole pool in one batch, but no more sequences than the
    engine schedules tokens per step (vLLM requires max_num_seqs <= max_num_batched_tokens)."""
    return min(pool_rows, max_num_batched_tokens)


@contextlib.contextmanager
def pool_sized_vllm(args: PODSConfig) -> Iterator[None]:
    """While TRL builds its vLLM engine: size the engine's batch to the pool, and prepare vLLM on a CPU."""
    if not args.use_vllm or args.vllm_mode != "colocate":  # a server sizes its own engine
        yield
        return
    from trl.generation import vllm_generation
    from vllm.platforms import current_platform

    # The engine's weight-loading progress bars follow the trainer's (`disable_tqdm`; off in `pods train`).
    settings: dict[str, Any] = {"use_tqdm_on_load": not args.disable_tqdm}
    if current_platform.is_cpu():
        from pods_rl.trainer.vllm_cpu import prepare_cpu_engine

        if args.vllm_enable_sleep_mode:
            raise ValueError("vllm_enable_sleep_mode: vLLM's CPU engine has no sleep mode; set it to False.")
        prepare_cpu_engine()
        settings["enforce_eager"] = True
    engine = _sized_engine(vllm_generation.LLM, pool_rows_per_engine(args), settings)
    with _replaced(vllm_generation, "LLM", engine):
        yield


def evaluates_on_engine(args: PODSConfig) -> bool:
    """Whether held-out evaluation can use the run's own vLLM engine: colocated, one per process, always awake."""
    return (
        args.use_vllm
        and args.vllm_mode == "colocate"
        and args.vllm_tensor_parallel_size == 1
        and not args.vllm_enable_sleep_mode
    )


def evaluation_engine(trainer: Any) -> Any:
    """The trainer's vLLM engine holding the policy's current weights, or None (evaluate with HF generate).

    TRL syncs the weights into the engine before a step's generation, so after the step's update the engine is one
    update behind: sync now, and mark this step as synced so the next generation does not sync again. Every process
    must call this (the sync gathers sharded parameters).
    """
    if not evaluates_on_engine(trainer.args):
        return None
    if trainer._last_loaded_step != trainer.state.global_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    return trainer.vllm_generation.llm


def _sized_engine(llm: Any, pool_rows: int, settings: dict[str, Any]):
    """`llm` (vLLM's LLM class) called with TRL's arguments, `max_num_seqs` sized to the pool and `settings`."""

    def build(**kwargs: Any):
        max_num_seqs = engine_max_num_seqs(pool_rows, kwargs["max_num_batched_tokens"])
        return llm(**{**kwargs, "max_num_seqs": max_num_seqs, **settings})

    return build


@contextlib.contextmanager
def _replaced(module: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)
