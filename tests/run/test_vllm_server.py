"""The vLLM server's process for asynchronous training, without vLLM: the command and environment TRL's async
trainer needs, and a stand-in server (Python's http.server, with a child of its own) started, found ready, and
stopped with everything it started, also when its start fails."""

import os
import socket
import sys
import time

import pytest

from pods_rl.run.vllm_server import SERVER_MODULE, ServerError, ServerProcess, ServerSpec


def test_the_command_is_vllms_dev_server_with_lora_when_asked():
    spec = ServerSpec(model="/m", python="/venv/bin/python", port=8011, max_model_len=256, lora_rank=8, max_loras=4)
    command = spec.command()
    assert command[:3] == ["/venv/bin/python", "-m", SERVER_MODULE]
    flags = " ".join(command[3:])
    assert "--model /m --host 127.0.0.1 --port 8011 --dtype auto --max-model-len 256" in flags
    assert "--enable-lora --max-lora-rank 8 --max-loras 4" in flags and spec.url == "http://127.0.0.1:8011"
    env = spec.env({"PATH": "/bin"})
    assert env == {"PATH": "/bin", "VLLM_SERVER_DEV_MODE": "1", "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}
    plain = ServerSpec(model="/m", python="p", port=1, max_model_len=8)
    assert "--enable-lora" not in plain.command() and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain.env({})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone in all but name
        return open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def stand_in(tmp_path, port: int, *, start: str = "") -> list[str]:
    """A shell that starts a child of its own (as vLLM's engine runs in further processes), then becomes a server
    whose /health answers 200."""
    (tmp_path / "www").mkdir(exist_ok=True)
    (tmp_path / "www" / "health").write_text("ok")
    server = f"{sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {tmp_path / 'www'}"
    return ["bash", "-c", f"{start}sleep 300 & echo $! > {tmp_path / 'child.pid'}; exec {server}"]


def test_the_server_is_ready_then_stopped_with_its_whole_group(tmp_path):
    port = free_port()
    with ServerProcess(stand_in(tmp_path, port), dict(os.environ), f"http://127.0.0.1:{port}", tmp_path / "log") as s:
        server, child = s.process.pid, int((tmp_path / "child.pid").read_text())
        assert alive(server) and alive(child)
    assert not alive(server) and not alive(child)  # no orphan: the engine's processes go with the server


def test_a_server_that_stops_at_start_is_one_line_with_its_log(tmp_path):
    command = ["bash", "-c", "echo 'ValueError: max_lora_rank 8 exceeds'; exit 3"]
    server = ServerProcess(command, dict(os.environ), "http://127.0.0.1:9", tmp_path / "log")
    with pytest.raises(ServerError, match=r"stopped with status 3: ValueError: max_lora_rank 8 exceeds"), server:
        pass


def test_a_server_that_never_answers_is_stopped_after_the_timeout(tmp_path):
    command = ["bash", "-c", f"sleep 300 & echo $! > {tmp_path / 'child.pid'}; echo loading; wait"]
    start = time.monotonic()
    server = ServerProcess(command, dict(os.environ), "http://127.0.0.1:9", tmp_path / "log", ready_timeout=2)
    with pytest.raises(ServerError, match=r"did not answer http://127.0.0.1:9/health in 2 s: loading"), server:
        pass
    assert time.monotonic() - start < 30
    assert not alive(int((tmp_path / "child.pid").read_text()))
