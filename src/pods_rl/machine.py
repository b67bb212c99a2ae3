"""What machine a run ran on: its CPU (name, family and model, instruction set), cores and accelerator.

Seconds measured on one CPU do not transfer to another (vLLM's CPU build and HF `generate` scale differently with
AVX-512), and a long comparison spans sittings that may land on different machines, so every run records this
and a comparison says when its runs' machines differ.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pods_rl.memory import retaining

CPUINFO = Path("/proc/cpuinfo")


def _first_processor() -> dict[str, str]:
    """The `key: value` lines of /proc/cpuinfo's first processor (empty where there is no such file)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of this machine's CPU, from /proc/cpuinfo (none where there is no such file)."""
    return frozenset(_first_processor().get("flags", "").split())


def cpu_identity() -> tuple[str | None, ...]:
    """This machine's CPU as /proc/cpuinfo names it: model name, family, model and stepping."""
    cpu = _first_processor()
    return tuple(cpu.get(field) for field in ("model name", "cpu family", "model", "stepping"))


def instruction_set(flags: frozenset[str]) -> str:
    """The widest vector instructions that decide CPU kernels' speed here: AVX-512, AVX2 or other."""
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other"


def describe_machine() -> dict[str, Any]:
    """This machine, as a run records it (summary.json): CPU name, family, model, instruction set, the cores this
    process may use, the accelerator's name (None on a CPU-only machine) and whether this process keeps freed
    memory."""
    import torch

    cpu = _first_processor()
    accelerator = None
    if torch.cuda.is_available():
        accelerator = torch.cuda.get_device_name()
    elif torch.accelerator.is_available():
        accelerator = str(torch.accelerator.current_accelerator())
    return {
        "cpu": cpu.get("model name") or os.uname().machine,
        "cpu_family": cpu.get("cpu family"),
        "cpu_model": cpu.get("model"),
        "instruction_set": instruction_set(cpu_flags()),
        "cores": len(os.sched_getaffinity(0)),
        "accelerator": accelerator,
        # On a VM a step's seconds also depend on whether freed memory is kept (pods_rl.memory).
        "freed_memory_kept": retaining(),
    }


def machine_label(machine: dict[str, Any] | None) -> str:
    """One line for tables, e.g. 'AMD EPYC (family 26 model 2), AVX-512, 2 cores'."""
    if not machine:
        return "not recorded"
    label = f"{machine['cpu']} (family {machine['cpu_family']} model {machine['cpu_model']}), "
    label += f"{machine['instruction_set']}, {machine['cores']} cores"
    label += f", {machine['accelerator']}" if machine["accelerator"] else ""
    return label + (", freed memory kept" if machine.get("freed_memory_kept") else "")
