"""Every config file we ship must at least parse and name only real settings."""

from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from pods_rl import PODSConfig
from pods_rl.run.settings import RunSettings, read_yaml

CONFIGS = Path(__file__).parents[2] / "configs"
RUN_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("compare-"))


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_names_only_known_settings(path):
    settings = RunSettings.from_dict(read_yaml(path), where=str(path))
    assert set(settings.trainer) <= {f.name for f in fields(PODSConfig)}
    assert settings.trainer["num_selected"] < settings.trainer["num_generations"]


@pytest.mark.parametrize("path", sorted((CONFIGS / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_parse(path):
    config = yaml.safe_load(path.read_text())
    assert config["distributed_type"] in {"MULTI_GPU", "DEEPSPEED", "FSDP"}
    assert config["num_processes"] >= 2
