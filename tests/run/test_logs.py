"""The libraries' logs, warnings and progress bars go to the run's log file, not the console."""

import logging
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
