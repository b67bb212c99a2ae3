"""The hub probe: reachable or not (without datasets or transformers), and what the local hub cache holds."""

from __future__ import annotations

import socket
from pathlib import Path

import huggingface_hub.constants
import pytest

from pods_rl.hub import hub_unreachable, hub_unusable, in_hub_cache

PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


def test_hub_unreachable_probes_the_endpoint_unless_a_proxy_is_set(no_proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")  # .invalid never resolves (RFC 2606)
    assert hub_unreachable()
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert not hub_unreachable()
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert not hub_unreachable()  # only the proxy could tell


def test_hub_unusable_says_why(no_proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")
    assert hub_unusable() == "hub.invalid cannot be reached"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert hub_unusable() == "offline mode is on (HF_HUB_OFFLINE)"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub_unusable() is None


def cache_model(cache: Path, repo_id: str) -> None:
    """Lay out `repo_id` in the hub cache as a download would: refs/main names a snapshot holding config.json."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0" * 40)
    (repo / "snapshots" / ("0" * 40)).mkdir(parents=True)
    (repo / "snapshots" / ("0" * 40) / "config.json").write_text("{}")


def test_in_hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert not in_hub_cache("org/model")
    cache_model(tmp_path, "org/model")
    assert in_hub_cache("org/model")
    assert not in_hub_cache("org/other")
