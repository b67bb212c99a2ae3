"""The machine a run records: CPU name, family, model and instruction set from /proc/cpuinfo, cores, accelerator,
whether freed memory is kept."""

import os

import torch

import pods_rl.machine
from pods_rl.machine import cpu_flags, describe_machine, instruction_set, machine_label

CPUINFO = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
    "flags\t\t: fpu sse4_2 avx2 avx512f\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n"
)


def test_cpu_flags_are_read_from_proc_cpuinfo(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    monkeypatch.setattr(pods_rl.machine, "CPUINFO", cpuinfo)
    assert cpu_flags() == {"fpu", "sse4_2", "avx2", "avx512f"}
    monkeypatch.setattr(pods_rl.machine, "CPUINFO", tmp_path / "absent")
    assert cpu_flags() == frozenset()


def test_instruction_set_is_the_widest_vector_extension():
    assert instruction_set(frozenset({"avx2", "avx512f"})) == "AVX-512"
    assert instruction_set(frozenset({"avx", "avx2"})) == "AVX2"
    assert instruction_set(frozenset({"neon"})) == "other"


def test_describe_machine_reads_the_first_processor(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO)
    monkeypatch.setattr(pods_rl.machine, "CPUINFO", cpuinfo)
    machine = describe_machine()
    assert machine == {
        "cpu": "AMD EPYC",
        "cpu_family": "26",
        "cpu_model": "2",
        "instruction_set": "AVX-512",
        "cores": len(os.sched_getaffinity(0)),
        "accelerator": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "freed_memory_kept": False,  # pytest was not started by `pods train`
    }
    assert machine_label(machine) == f"AMD EPYC (family 26 model 2), AVX-512, {machine['cores']} cores"
    assert machine_label({**machine, "accelerator": "NVIDIA H200"}).endswith("cores, NVIDIA H200")
    kept = {**machine, "freed_memory_kept": True}  # a run's seconds on a VM depend on it: runs must not mix
    assert machine_label(kept) == f"AMD EPYC (family 26 model 2), AVX-512, {machine['cores']} cores, freed memory kept"
    older = {k: v for k, v in machine.items() if k != "freed_memory_kept"}  # recorded before the key existed
    assert machine_label(older) == machine_label(machine)
    assert machine_label(None) == "not recorded"
