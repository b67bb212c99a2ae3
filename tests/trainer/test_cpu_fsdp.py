"""`fsdp_on_cpu_processes`: what accelerate makes of FSDP on CPU processes, asked for by the launch (an environment
variable) or by the trainer's arguments (a plugin), with and without it.

One CPU process joined over gloo as torchrun would start it (LOCAL_RANK set: accelerate's MULTI_CPU), in a
subprocess so that its process group and accelerate's state stay out of the test session. The FSDP launches
themselves: tests/trainer/test_multi_process.py and tests/run/test_train_two_processes.py.
"""

import json
import socket
import subprocess
import sys

from support import launch_env

PROBE = """
import json, os
import torch
from accelerate import Accelerator, FullyShardedDataParallelPlugin
from accelerate.state import AcceleratorState, PartialState
from accelerate.utils import DistributedType
from pods_rl.trainer.cpu_fsdp import fsdp_on_cpu_processes

def built(shim, arguments=False):
    # arguments: the Trainer passes the plugin its `fsdp` arguments make (and tells the shim so)
    AcceleratorState._reset_state()  # PartialState (gloo) stays; as MULTI_CPU, which a build with FSDP changed
    PartialState._shared_state["distributed_type"] = DistributedType.MULTI_CPU
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2) if arguments else None
    if shim:
        with fsdp_on_cpu_processes(requested=arguments):
            accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    else:
        accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    if arguments:
        os.environ.pop("ACCELERATE_USE_FSDP")  # accelerate sets it for a plugin
    plugin = getattr(accelerator.state, "fsdp_plugin", None)  # as transformers reads it
    return {
        "type": accelerator.distributed_type.name,
        "partial_type": PartialState().distributed_type.name,
        "device": accelerator.device.type,
        "fsdp_version": plugin.fsdp_version if plugin is not None else None,
    }

PartialState(cpu=True)
results = {"ddp launch, shim": built(True)}
results["fsdp arguments"] = built(False, arguments=True)
results["fsdp arguments, shim"] = built(True, arguments=True)
# On a machine with an accelerator, CPU processes (use_cpu) cannot shard: FSDP2's mesh would go to the accelerator.
available, current = torch.accelerator.is_available, torch.accelerator.current_accelerator
torch.accelerator.is_available, torch.accelerator.current_accelerator = lambda: True, lambda: torch.device("cuda")
try:
    built(True, arguments=True)
except ValueError as error:
    results["fsdp arguments, shim, accelerator present"] = str(error)
torch.accelerator.is_available, torch.accelerator.current_accelerator = available, current
os.environ.update(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")  # what `accelerate launch` sets for an FSDP config
results["fsdp launch"] = built(False)
results["fsdp launch, shim"] = built(True)
print(json.dumps(results))
"""


def test_fsdp_on_cpu_processes_shards_only_with_the_shim():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = launch_env() | {"LOCAL_RANK": "0", "RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    # accelerate 1.15 drops the FSDP plugin on CPU processes: DDP. When this fails, accelerate shards on CPUs by
    # itself and pods_rl/trainer/cpu_fsdp.py can go.
    assert results["fsdp launch"] == {
        "type": "MULTI_CPU",
        "partial_type": "MULTI_CPU",
        "device": "cpu",
        "fsdp_version": None,
    }
    fsdp = {"type": "FSDP", "partial_type": "FSDP", "device": "cpu", "fsdp_version": 2}
    assert results["fsdp launch, shim"] == fsdp
    # Asked for by the arguments (`pods train --set trainer.fsdp=...`): the same, and the same without the shim.
    assert results["fsdp arguments"] == results["fsdp launch"]
    assert results["fsdp arguments, shim"] == fsdp
    assert results["fsdp arguments, shim, accelerator present"] == (
        "FSDP on CPU processes (use_cpu) needs a machine without an accelerator: FSDP2 would place its device mesh "
        "on cuda while the model stays on the CPU. Train on cuda (no use_cpu), or on the CPU without FSDP."
    )
    # Without FSDP requested nothing changes.
    assert results["ddp launch, shim"] == {
        "type": "MULTI_CPU",
        "partial_type": "MULTI_CPU",
        "device": "cpu",
        "fsdp_version": None,
    }
