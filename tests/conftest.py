import dataclasses

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The built-in tiny model with a very short warm start, built once per test session."""
    from pods_rl.models.tiny import TinyRecipe, build_tiny

    recipe = dataclasses.replace(TinyRecipe(), sft_steps=30)
    return build_tiny(recipe, cache_dir=tmp_path_factory.mktemp("models"))
