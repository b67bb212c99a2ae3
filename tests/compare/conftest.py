import pytest


@pytest.fixture(autouse=True)
def few_simulated_comparisons_in_reports(monkeypatch):
    """Every report simulates its design's power (`power.report_power`); tests that do not read that power simulate
    few comparisons, and the test that does passes its own count."""
    monkeypatch.setattr("pods_rl.compare.power.REPORT_COMPARISONS", 10)
