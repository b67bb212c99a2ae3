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
        (600.0, 0.0, 0, 600.0),  # no pace yet: the budget
        (600.0, 100.0, 10, 600.0),  # 10 s a step: step 250 would take 2500 s, the budget comes first
        (6000.0, 100.0, 10, 2500.0),  # the step limit comes first: 240 more steps at 10 s
        (6000.0, 2500.0, 250, 2500.0),  # the last step done: exactly the seconds trained, so the display ends
        (600.0, 601.5, 60, 600.0),  # the budget is spent (a run stops after the step that crosses it)
    ],
)
def test_expected_seconds_follow_the_time_budget_and_the_step_limit(
    tmp_path, time_budget, train_seconds, step, expected
) -> None:
    assert _monitor(tmp_path, time_budget, train_seconds).expected_seconds(step, 250) == expected
