"""Every config file we ship must at least parse and name only real settings."""

from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.constants import (
    FSDP_AUTO_WRAP_POLICY,
    FSDP_BACKWARD_PREFETCH,
    FSDP_SHARDING_STRATEGY,
    FSDP_STATE_DICT_TYPE,
)

from pods_rl import PODSConfig
from pods_rl.run.settings import RunSettings, read_yaml

CONFIGS = Path(__file__).parents[2] / "configs"
# The FSDP settings accelerate reads as enum names, although its launch options do not list them as choices.
FSDP_CHOICES = {
    "fsdp_sharding_strategy": FSDP_SHARDING_STRATEGY,
    "fsdp_auto_wrap_policy": FSDP_AUTO_WRAP_POLICY,
    "fsdp_backward_prefetch": FSDP_BACKWARD_PREFETCH,
    "fsdp_state_dict_type": FSDP_STATE_DICT_TYPE,
}
RUN_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("compare-"))


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_run_config_names_only_known_settings(path):
    # Written for other machines (GPUs, several processes, vLLM): the rules of this environment do not apply.
    settings = RunSettings.from_dict(read_yaml(path), where=str(path), checks="portable")
    assert set(settings.trainer) <= {f.name for f in fields(PODSConfig)}
    assert settings.trainer["num_selected"] < settings.trainer["num_generations"]


@pytest.mark.parametrize("path", sorted((CONFIGS / "accelerate").glob("*.yaml")), ids=lambda p: p.name)
def test_accelerate_configs_are_read_by_accelerate(path):
    """accelerate rejects unknown top-level keys but silently ignores unknown keys inside deepspeed_config and
    fsdp_config (it copies them onto its launch options): each must name a launch option, with an allowed value."""
    config = yaml.safe_load(path.read_text())
    assert config["distributed_type"] in {"MULTI_GPU", "DEEPSPEED", "FSDP"}
    assert config["num_processes"] >= 2
    options = {action.dest: action for action in launch_command_parser()._actions}
    for section, prefix in (("deepspeed_config", ""), ("fsdp_config", "fsdp_")):
        for key, value in config.get(section, {}).items():
            name = key if key.startswith(prefix) else prefix + key  # accelerate's own renaming
            assert name in options, f"{path.name}: {section}.{key} is not a setting accelerate reads"
            allowed = options[name].choices or FSDP_CHOICES.get(name)
            assert allowed is None or str(value) in allowed, f"{path.name}: {section}.{key}={value!r}"

    multinode = config["num_machines"] > 1
    command = ["--config_file", str(path)]
    if multinode:  # the per-node options docs/distributed.md's commands pass
        command += ["--machine_rank", "1", "--main_process_ip", "127.0.0.1"]
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args([*command, "train.py"]))
    assert args.num_processes == config["num_processes"] and args.num_machines == config["num_machines"]
    kind = {"MULTI_GPU": args.multi_gpu, "DEEPSPEED": args.use_deepspeed, "FSDP": args.use_fsdp}
    assert [name for name, used in kind.items() if used] == [config["distributed_type"]]
    if args.use_deepspeed:
        assert int(args.zero_stage) == config["deepspeed_config"]["zero_stage"]
    if multinode:
        assert config["num_processes"] % config["num_machines"] == 0  # the same number of GPUs on each node
        assert (args.machine_rank, args.main_process_ip) == (1, "127.0.0.1")  # the command line wins over the file
        if args.use_deepspeed:  # anything else would start the other nodes over ssh (pdsh)
            assert args.deepspeed_multinode_launcher == "standard"


def test_multinode_configs_are_shipped():
    """Past one machine: ZeRO-3 and FSDP, as docs/distributed.md's multi-node section says."""
    multinode = {
        yaml.safe_load(p.read_text())["distributed_type"]
        for p in (CONFIGS / "accelerate").glob("*.yaml")
        if yaml.safe_load(p.read_text())["num_machines"] > 1
    }
    assert multinode == {"DEEPSPEED", "FSDP"}
