import pytest

from pods_rl.run.monitor import RunMonitor
from pods_rl.run.settings import EvalSettings


def _monitor(tmp_path, time_budget, train_seconds) -> RunMonitor:
    return RunMonitor(
        tmp_path / "metrics.jsonl",
        lambda model: {},
        EvalSettings(),
        time_budget=time_budget,
        train_seconds=train_seconds,
    )


@pytest.mark.parametrize(
    ("time_budget", "train_seconds", "step", "expected"),
    [
        (None, 100.0, 10, 250),  # no budget: the step limit
        (600.0, 0.0, 0, 250),  # no pace yet
        (600.0, 100.0, 10, 60),  # 10 s a step, 500 s left: 50 more steps
        (600.0, 95.0, 10, 64),  # 9.5 s a step, 505 s left: 53.2, so 54 more (the budget stops a run after a step)
        (6000.0, 100.0, 10, 250),  # the step limit comes first
        (600.0, 600.0, 60, 60),  # the budget is spent: this is the last step
    ],
)
def test_expected_steps_follow_the_time_budget(tmp_path, time_budget, train_seconds, step, expected) -> None:
    assert _monitor(tmp_path, time_budget, train_seconds).expected_steps(step, 250) == expected
