"""Where the libraries' logs, warnings and progress bars go: to the run's log file, not the console.

The console shows the run's own progress (`pods_rl.run.display`); transformers, datasets, TRL, vLLM and the hub client
log into `train.log` in the run folder, with Python warnings. Create `RunLogs` before the heavy imports: what the
libraries log while they are imported is caught too. Records emitted before the folder is ready (while the
model loads: a previous run there is replaced only after that) are held in memory and written when it is.
`--verbose` also shows them on the console, with the libraries' own progress bars. Without a run folder
(`pods eval`) they are dropped unless `--verbose`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from logging.handlers import MemoryHandler
from pathlib import Path

LIBRARIES = ("transformers", "datasets", "huggingface_hub", "accelerate", "trl", "peft", "vllm", "pods_rl")
# vLLM gives its loggers a console handler of their own when first imported (TRL imports it with its trainer), and
# logs while importing (e.g. "Triton is installed, but `triton.backends` could not be imported"); with this set to 0
# before that import, its records reach ours instead.
VLLM_LOGGING = "VLLM_CONFIGURE_LOGGING"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RunLogs:
    """Routes logging and warnings for the life of a run; `close()` restores what it changed."""

    def __init__(self, *, verbose: bool = False):
        self.verbose = verbose
        self.root = logging.getLogger()
        self._previous_level = self.root.level
        self.buffer = MemoryHandler(capacity=100_000, flushLevel=logging.CRITICAL + 1, flushOnClose=False)
        self.buffer.setLevel(logging.INFO)
        self.handlers: list[logging.Handler] = [self.buffer]
        self._saved = {name: (logging.getLogger(name).level, logging.getLogger(name).propagate) for name in LIBRARIES}
        self._set_vllm_logging = VLLM_LOGGING not in os.environ
        os.environ.setdefault(VLLM_LOGGING, "0")
        if verbose:
            console = logging.StreamHandler(sys.stderr)
            console.setFormatter(logging.Formatter(FORMAT))
            self.handlers.append(console)
        for handler in self.handlers:
            self.root.addHandler(handler)
        self.root.setLevel(logging.INFO)
        logging.captureWarnings(True)
        self.route_libraries()

    def route_libraries(self) -> None:
        """Send the libraries' loggers to ours and turn off their progress bars (unless verbose).

        Called again after heavy imports: a library sets up its own console handler when first imported.
        """
        for name in LIBRARIES:
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                    logger.removeHandler(handler)
            logger.propagate = True
            logger.setLevel(logging.INFO)
        if "transformers" in sys.modules:
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_default_handler()
            transformers_logging.enable_propagation()
            transformers_logging.set_verbosity_info()
            if not self.verbose:
                transformers_logging.disable_progress_bar()
        if not self.verbose:
            if "datasets" in sys.modules:
                import datasets

                datasets.disable_progress_bars()
            if "huggingface_hub" in sys.modules:
                from huggingface_hub.utils import disable_progress_bars

                disable_progress_bars()

    def write_to(self, path: Path) -> None:
        """From now on write into `path`, starting with what was held so far."""
        file = logging.FileHandler(path, mode="a", encoding="utf-8")
        file.setFormatter(logging.Formatter(FORMAT))
        file.setLevel(logging.INFO)
        self.buffer.setTarget(file)
        self.buffer.flush()
        self.root.removeHandler(self.buffer)
        self.root.addHandler(file)
        self.buffer.close()
        self.handlers[0] = file

    @contextmanager
    def native_output(self) -> Iterator[None]:
        """For the block, what native code writes straight to the process's stdout and stderr (vLLM's C++ engine
        start: "Warning: NUMA binding: ...") goes into the log file too, unless verbose (or no file yet)."""
        file = self.handlers[0]
        if self.verbose or not isinstance(file, logging.FileHandler):
            yield
            return
        sys.stdout.flush()
        sys.stderr.flush()
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        try:
            for fd in saved:
                os.dup2(file.stream.fileno(), fd)
            yield
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)

    def close(self) -> None:
        if self._set_vllm_logging:
            os.environ.pop(VLLM_LOGGING, None)
        logging.captureWarnings(False)
        for name, (level, propagate) in self._saved.items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = propagate
        for handler in self.handlers:
            self.root.removeHandler(handler)
            handler.close()
        self.root.setLevel(self._previous_level)
