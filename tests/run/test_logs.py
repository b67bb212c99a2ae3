"""The libraries' logs, warnings and progress bars go to the run's log file, not the console."""

import logging
import os
import warnings

import datasets  # noqa: F401 (imported, as in a run, before the logs are routed)
import transformers  # noqa: F401

from pods_rl.models.tiny import TinyRecipe, build_tiny
from pods_rl.run.logs import RunLogs

QUICK = TinyRecipe(hidden_size=16, intermediate_size=32, num_heads=2, sft_steps=3, sft_batch_size=4)


def test_warm_start_reports_progress_and_prints_nothing(tmp_path, capfd):
    logs = RunLogs(verbose=False)
    try:
        logs.route_libraries()
        calls = []
        build_tiny(QUICK, cache_dir=tmp_path / "cache", progress=lambda *a: calls.append(a))
        warnings.warn("a library's deprecation", FutureWarning, stacklevel=1)
        logs.write_to(tmp_path / "train.log")
        logging.getLogger("transformers.trainer").warning("written after the folder is ready")
    finally:
        logs.close()
    out, err = capfd.readouterr()
    assert calls == [(1, 3), (2, 3), (3, 3)]
    for unwanted in ("{'loss'", "Tokenizing", "Writing model shards", "FutureWarning", "it/s"):
        assert unwanted not in out + err, unwanted
    log = (tmp_path / "train.log").read_text()
    assert "warm start step 3/3: {'loss'" in log  # held in memory until the folder existed
    assert "FutureWarning: a library's deprecation" in log
    assert "written after the folder is ready" in log


def test_close_restores_the_loggers():
    before = logging.getLogger("transformers").propagate, logging.getLogger().level
    RunLogs(verbose=False).close()
    assert (logging.getLogger("transformers").propagate, logging.getLogger().level) == before


def test_verbose_also_shows_library_logs(capfd):
    logs = RunLogs(verbose=True)
    try:
        logging.getLogger("transformers.trainer").warning("a library's warning")
    finally:
        logs.close()
    assert "WARNING transformers.trainer: a library's warning" in capfd.readouterr().err


def test_native_output_goes_to_the_log_file(tmp_path, capfd):
    """What native code writes to the process's stdout/stderr during the block (vLLM's C++ engine start) lands in
    train.log, after the records before it; outside the block, and with --verbose, it stays on the console."""
    logs = RunLogs(verbose=False)
    try:
        logs.write_to(tmp_path / "train.log")
        logging.getLogger("vllm.engine").warning("starting the engine")
        with logs.native_output():
            os.write(2, b"[W utils.cpp:68] Warning: NUMA binding: ...\n")
            os.write(1, b"native stdout\n")
        os.write(2, b"after the block\n")
    finally:
        logs.close()
    out, err = capfd.readouterr()
    assert "NUMA" not in err and "native stdout" not in out and "after the block" in err
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert lines[0].endswith("WARNING vllm.engine: starting the engine")
    assert lines[1:] == ["[W utils.cpp:68] Warning: NUMA binding: ...", "native stdout"]
    verbose = RunLogs(verbose=True)
    try:
        verbose.write_to(tmp_path / "verbose.log")
        with verbose.native_output():
            os.write(2, b"shown when verbose\n")
    finally:
        verbose.close()
    assert "shown when verbose" in capfd.readouterr().err


def test_vllm_logs_into_ours(monkeypatch):
    """vLLM configures a console handler of its own on import unless VLLM_CONFIGURE_LOGGING is 0: a run sets it
    (unless the user did) before anything imports vLLM, and restores it after."""
    monkeypatch.delenv("VLLM_CONFIGURE_LOGGING", raising=False)
    logs = RunLogs(verbose=False)
    assert os.environ["VLLM_CONFIGURE_LOGGING"] == "0"
    logs.close()
    assert "VLLM_CONFIGURE_LOGGING" not in os.environ
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "1")
    RunLogs(verbose=False).close()
    assert os.environ["VLLM_CONFIGURE_LOGGING"] == "1"
