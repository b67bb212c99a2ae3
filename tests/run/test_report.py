from pathlib import Path

import pytest

from pods_rl.run.report import summary_line


@pytest.mark.parametrize(
    ("base", "final", "seconds", "line"),
    [
        (0.38, 0.98, 81.3, "38.0% -> 98.0% (+60.0 points) in 81 s of training; report: runs/x/report.md"),
        (0.5, 0.425, 612.6, "50.0% -> 42.5% (-7.5 points) in 613 s of training; report: runs/x/report.md"),
        (0.125, 0.125, 4.26, "12.5% -> 12.5% (+0.0 points) in 4.3 s of training; report: runs/x/report.md"),
    ],
)
def test_summary_line(base, final, seconds, line):
    """The console's last line of a run: accuracy before and after, the gain, the training time, the report."""
    summary = {"base_accuracy": base, "final_accuracy": final, "train_seconds": seconds, "steps": 3}
    assert summary_line(summary, Path("runs/x/report.md")) == line


def test_summary_line_names_the_precision_when_the_summary_has_it():
    summary = {"base_accuracy": 0.38, "final_accuracy": 0.98, "train_seconds": 81.3, "precision": {"dtype": "bf16"}}
    assert (
        summary_line(summary, Path("r.md")) == "38.0% -> 98.0% (+60.0 points) in 81 s of training (bf16); report: r.md"
    )
