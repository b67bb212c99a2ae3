"""pods_rl.memory: which commands restart keeping freed memory, and that the variables keep it resident."""

import os
import subprocess
import sys

import pytest

from pods_rl.memory import RETAINING, restart_environment, retaining

# Allocates and touches 256 MiB with malloc, frees it, and prints how many MiB the resident set shrank.
FREE_AND_MEASURE = """
import ctypes
def resident(): return int(open("/proc/self/statm").read().split()[1]) * 4096
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, (ctypes.c_size_t,), (ctypes.c_void_p,)
size = 256 * 2**20
block = libc.malloc(size)
ctypes.memset(block, 1, size)
before = resident()
libc.free(block)
print(round((before - resident()) / 2**20))
"""


def _returned_mib(environ: dict[str, str]) -> int:
    command = [sys.executable, "-c", FREE_AND_MEASURE]
    return int(subprocess.run(command, env=environ, capture_output=True, text=True, check=True).stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc and /proc")
def test_freed_memory_stays_resident_only_with_the_variables():
    plain = {k: v for k, v in os.environ.items() if k not in RETAINING}
    assert _returned_mib(plain) >= 255  # glibc unmaps a 256-MiB block at once
    assert _returned_mib({**plain, **RETAINING}) <= 1


def test_only_a_training_command_on_glibc_restarts_and_a_users_setting_wins():
    environ = {"PATH": "/bin"}
    assert restart_environment(["train", "--max-steps", "2"], environ, "glibc") == {"PATH": "/bin", **RETAINING}
    assert restart_environment(["eval"], environ, "glibc") is None
    assert restart_environment([], environ, "glibc") is None
    assert restart_environment(["train"], environ, "") is None  # musl, macOS: the variables mean nothing
    assert restart_environment(["train"], {**environ, **RETAINING}, "glibc") is None  # already restarted
    assert restart_environment(["train"], {"MALLOC_TRIM_THRESHOLD_": "131072"}, "glibc") is None


def test_retaining_reads_both_variables():
    assert retaining(RETAINING) is True
    assert retaining({"MALLOC_MMAP_MAX_": "0"}) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_pods_train_runs_in_a_process_that_retains(tmp_path):
    """`python -m pods_rl train` replaces itself (same pid) by one with the variables; its plan shows without a
    model load (--dry-run), and the restarted process's environment is what the summary would record."""
    probe = tmp_path / "sitecustomize.py"  # runs in every interpreter started with this PYTHONPATH
    seen = tmp_path / "seen"
    probe.write_text(
        "import os, sys\n"
        "if sys.argv[1:2] == ['train']:\n"
        f"    start = f\"{{os.getpid()}} {{os.environ.get('MALLOC_MMAP_MAX_')}}\\n\"\n"
        f"    open({str(seen)!r}, 'a').write(start)\n"
    )
    plain = {k: v for k, v in os.environ.items() if k not in RETAINING}
    environ = {**plain, "PYTHONPATH": f"{tmp_path}{os.pathsep}{plain.get('PYTHONPATH', '')}"}
    command = [sys.executable, "-m", "pods_rl", "train", "--dry-run", "--output-dir", str(tmp_path / "run")]
    subprocess.run(command, env=environ, capture_output=True, text=True, check=True)
    starts = [line.split() for line in seen.read_text().splitlines()]
    assert len(starts) == 2 and starts[0][0] == starts[1][0]  # one process, started twice
    assert [value for _, value in starts] == ["None", "0"]
