import dataclasses
import importlib.util

import pytest

# The vLLM tests need vLLM, which the default environment does not hold: `make test` runs them in `make vllm`'s.
VLLM_TESTS = ("test_vllm.py", "test_vllm_cpu.py", "test_evaluation_vllm.py")


def pytest_ignore_collect(collection_path, config):
    return collection_path.name in VLLM_TESTS and importlib.util.find_spec("vllm") is None


@pytest.fixture(scope="session")
def smollm2_cache(tmp_path_factory):
    """A models cache folder holding SmolLM2-135M converted from its wheel's GGUF file, once per session (about 30
    s): the tests that need the real model share one conversion."""
    from pods_rl.models.smollm2 import build_smollm2

    cache = tmp_path_factory.mktemp("smollm2-cache")
    build_smollm2(cache_dir=cache)
    return cache


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The built-in tiny model with a very short warm start, built once per test session."""
    from pods_rl.models.tiny import TinyRecipe, build_tiny

    recipe = dataclasses.replace(TinyRecipe(), sft_steps=30)
    return build_tiny(recipe, cache_dir=tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="session", autouse=True)
def session_step_costs(tmp_path_factory):
    """Module- and session-scoped fixtures that train (set up before any test's own fixtures) keep their start-up
    measurements in the session's file, never the user's cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PODS_RL_STEP_COSTS", str(tmp_path_factory.mktemp("session-step-costs") / "step-costs.json"))
        yield


@pytest.fixture(autouse=True)
def step_costs_file(tmp_path_factory, monkeypatch):
    """Each test keeps its own start-up measurements (`pods_rl.run.step_costs`), never the user's cache: a `pods
    train` in a test measures its step once, and later runs of the same test reuse it, as they would on a machine."""
    path = tmp_path_factory.mktemp("step-costs") / "step-costs.json"
    monkeypatch.setenv("PODS_RL_STEP_COSTS", str(path))
    return path
