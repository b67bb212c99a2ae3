"""The Hugging Face hub: whether it can be reached, probed cheaply (no datasets or transformers import), so that
an offline run fails at once with a line saying so instead of after the libraries' retries."""

from __future__ import annotations

import os
import socket
import urllib.parse

import huggingface_hub.constants


def hub_unreachable(timeout: float = 3.0) -> bool:
    """No proxy is set and the hub's host (`HF_ENDPOINT`) does not resolve or accept a connection in `timeout` s."""
    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return False  # only the proxy could tell
    url = _endpoint()
    try:
        socket.create_connection((url.hostname, url.port or (80 if url.scheme == "http" else 443)), timeout).close()
    except OSError:
        return True
    return False


def _endpoint() -> urllib.parse.ParseResult:
    return urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", huggingface_hub.constants.ENDPOINT))


def hub_unusable() -> str | None:
    """Why nothing can be downloaded from the hub now (offline mode, or no route to it), or None when it can."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return "offline mode is on (HF_HUB_OFFLINE)"
    if hub_unreachable():
        return f"{_endpoint().hostname} cannot be reached"
    return None


def in_hub_cache(repo_id: str) -> bool:
    """Whether the hub model `repo_id` was downloaded before (its config.json is in the local hub cache)."""
    from huggingface_hub import try_to_load_from_cache  # imported only here: it brings in the HTTP client

    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
