"""`fsdp_on_cpu_processes`: what accelerate makes of an FSDP launch on CPU processes, with and without it.

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
from accelerate import Accelerator
from accelerate.state import AcceleratorState, PartialState
from pods_rl.trainer.cpu_fsdp import fsdp_on_cpu_processes

def built(shim):
    AcceleratorState._reset_state()  # PartialState (MULTI_CPU, gloo) stays
    if shim:
        with fsdp_on_cpu_processes():
            accelerator = Accelerator(cpu=True)
    else:
        accelerator = Accelerator(cpu=True)
    plugin = getattr(accelerator.state, "fsdp_plugin", None)  # as transformers reads it
    return {
        "type": accelerator.distributed_type.name,
        "partial_type": PartialState().distributed_type.name,
        "device": accelerator.device.type,
        "fsdp_version": plugin.fsdp_version if plugin is not None else None,
    }

PartialState(cpu=True)
results = {"ddp launch, shim": built(True)}
os.environ.update(ACCELERATE_USE_FSDP="true", FSDP_VERSION="2")  # what `accelerate launch` sets for an FSDP config
results["fsdp launch"] = built(False)
results["fsdp launch, shim"] = built(True)
print(json.dumps(results))
"""


def test_fsdp_launch_on_cpu_processes_shards_only_with_the_shim():
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
    assert results["fsdp launch, shim"] == {"type": "FSDP", "partial_type": "FSDP", "device": "cpu", "fsdp_version": 2}
    # Without FSDP requested nothing changes.
    assert results["ddp launch, shim"] == {
        "type": "MULTI_CPU",
        "partial_type": "MULTI_CPU",
        "device": "cpu",
        "fsdp_version": None,
    }
