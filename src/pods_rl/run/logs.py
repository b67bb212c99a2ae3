"""Where the libraries' logs, warnings and progress bars go: to the run's log file, not the console.

The console shows the run's own progress (`pods_rl.run.display`); transformers, datasets, TRL and the hub client log
into `train.log` in the run folder, with Python warnings. Records emitted before the folder is ready (while the
model loads: a previous run there is replaced only after that) are held in memory and written when it is.
`--verbose` also shows them on the console, with the libraries' own progress bars. Without a run folder
(`pods eval`) they are dropped unless `--verbose`.
"""

from __future__ import annotations

import logging
import sys
from logging.handlers import MemoryHandler
from pathlib import Path

LIBRARIES = ("transformers", "datasets", "huggingface_hub", "accelerate", "trl", "peft", "pods_rl")
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

    def close(self) -> None:
        logging.captureWarnings(False)
        for name, (level, propagate) in self._saved.items():
            logging.getLogger(name).setLevel(level)
            logging.getLogger(name).propagate = propagate
        for handler in self.handlers:
            self.root.removeHandler(handler)
            handler.close()
        self.root.setLevel(self._previous_level)
