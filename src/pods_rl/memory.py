"""Keep the memory a training process frees, for its next step, instead of handing it back to the OS.

Each training step allocates and frees the same large buffers (logits, activations, gradients). glibc's malloc
serves large blocks with mmap and returns them with munmap, and trims its heaps' free tops, so the next step faults
every page in again. On a virtual machine whose host backs guest memory lazily a fault can cost 10 us a page: on
the 2-core Xeon VM of docs/performance.md ("Page faults on a forked VM") that doubled SmolLM2's update once the VM
had been forked (17 -> 35 s a step, much of it kernel time), and keeping freed memory brought it to 13.5 s. The
price: a process's resident memory stays near its peak, as PyTorch's CUDA allocator keeps it on a GPU.

`mallopt` in the running process kept only part of the gain (updates of 23-32 s; it takes a trim threshold of at
most 2 GiB, and applies only to what is allocated after it), so `pods train` restarts itself once with glibc's
environment variables set, which glibc reads when a process starts.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping, Sequence

# No mmap for any block (so nothing is unmapped when freed), and no heap trimming below 1 TB.
RETAINING = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(10**12)}


def retaining(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process was started with the settings that keep freed memory."""
    return all(environ.get(name) == value for name, value in RETAINING.items())


def restart_environment(argv: Sequence[str], environ: Mapping[str, str], libc: str) -> dict[str, str] | None:
    """The environment to restart `pods <argv>` in so that it keeps freed memory, or None to run as it is: not a
    training command, not glibc, already set, or the user set either variable (their choice wins)."""
    if not argv or argv[0] != "train" or libc != "glibc" or any(name in environ for name in RETAINING):
        return None
    return {**environ, **RETAINING}


def restart_retaining_freed_memory() -> None:
    """Replace this process (same pid) with `python -m pods_rl <same arguments>` keeping freed memory, if needed."""
    environment = restart_environment(sys.argv[1:], os.environ, platform.libc_ver()[0])
    if environment is not None:
        os.execve(sys.executable, [sys.executable, "-m", "pods_rl", *sys.argv[1:]], environment)
