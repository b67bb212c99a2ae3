import io
import json
import signal

import pytest
from rich.console import Console
from transformers import TrainerControl, TrainerState

from pods_rl.run.display import Display
from pods_rl.run.monitor import RunMonitor, grid_cell
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


class FakeClock:
    """A clock that moves only when told: each step lasts exactly the seconds the test gives it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _train(monitor: RunMonitor, clock: FakeClock, step_seconds: list[float], max_steps: int = 100) -> None:
    """Drive the monitor as transformers' Trainer does: begin, then per step begin / step += 1 / end, then end."""
    state, control = TrainerState(max_steps=max_steps), TrainerControl()
    monitor.on_train_begin(None, state, control)
    for seconds in step_seconds:
        monitor.on_step_begin(None, state, control)
        clock.now += seconds
        state.global_step += 1
        monitor.on_step_end(None, state, control)
        if control.should_training_stop:
            break
    monitor.on_train_end(None, state, control)


def _grid_monitor(tmp_path, eval_settings: EvalSettings, clock: FakeClock, **kwargs) -> RunMonitor:
    return RunMonitor(
        tmp_path / "metrics.jsonl",
        lambda model: {"accuracy": 0.5, "num_examples": 4},
        eval_settings,
        display=Display(Console(quiet=True)),
        clock=clock,
        **kwargs,
    )


def test_seconds_grid_evaluates_on_crossing_each_multiple_without_drift(tmp_path) -> None:
    """Steps of 4, 7, 9, 3, 13, 2, 5 s put the clock at 4, 11, 20, 23, 36, 38, 43 s. On the 10 s grid the evaluations
    come at 11 (crossed 10), 20 (reached 20), 36 (crossed 30) and 43 (crossed 40, and the budget ends the run);
    "10 s after the previous evaluation" would have evaluated at 23 instead of 20."""
    clock = FakeClock()
    monitor = _grid_monitor(tmp_path, EvalSettings(every_steps=None, every_seconds=10.0), clock, time_budget=40.0)
    _train(monitor, clock, [4, 7, 9, 3, 13, 2, 5, 1, 1])
    assert [(e["step"], e["train_seconds"]) for e in monitor.evaluations] == [
        (0, 0),
        (2, 11),
        (3, 20),
        (5, 36),
        (7, 43),
    ]
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["train_seconds"]) for r in written if r["type"] == "eval"] == [
        (0, 0),
        (2, 11),
        (3, 20),
        (5, 36),
        (7, 43),
    ]


def test_each_evaluation_records_its_own_seconds_outside_the_training_clock(tmp_path) -> None:
    """An evaluation that takes 2.5 s of wall time records eval_seconds 2.5 and leaves train_seconds unchanged."""
    clock = FakeClock()

    def evaluate(model) -> dict:
        clock.now += 2.5
        return {"accuracy": 0.5, "num_examples": 4}

    monitor = RunMonitor(
        tmp_path / "metrics.jsonl",
        evaluate,
        EvalSettings(every_steps=None, every_seconds=10.0),
        display=Display(Console(quiet=True)),
        clock=clock,
    )
    _train(monitor, clock, [6, 6], max_steps=2)
    assert [(e["step"], e["train_seconds"], e["eval_seconds"]) for e in monitor.evaluations] == [
        (0, 0, 2.5),
        (2, 12, 2.5),
    ]
    written = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["eval_seconds"] for r in written if r["type"] == "eval"] == [2.5, 2.5]


def test_one_long_step_across_several_grid_points_evaluates_once(tmp_path) -> None:
    clock = FakeClock()
    monitor = _grid_monitor(tmp_path, EvalSettings(every_steps=None, every_seconds=10.0), clock)
    _train(monitor, clock, [25, 3, 3], max_steps=3)  # 25, 28, 31 s: cells 2, 2, 3
    assert [(e["step"], e["train_seconds"]) for e in monitor.evaluations] == [(0, 0), (1, 25), (3, 31)]


def test_seconds_grid_continues_on_resume(tmp_path) -> None:
    """A resumed run keeps the grid of its first part: it restarts at 14 s with the last evaluation at 11 s."""
    clock = FakeClock()
    earlier = [{"step": 0, "train_seconds": 0.0, "accuracy": 0.1}, {"step": 2, "train_seconds": 11.0, "accuracy": 0.2}]
    settings = EvalSettings(every_steps=None, every_seconds=10.0)
    monitor = _grid_monitor(tmp_path, settings, clock, train_seconds=14.0, evaluations=earlier)
    state, control = TrainerState(max_steps=6, global_step=3), TrainerControl()
    monitor.on_train_begin(None, state, control)  # nothing due: 14 s is in the cell of 11 s
    for seconds in (5, 1.5, 1):  # 19, 20.5 (crossed 20), 21.5 s (the end)
        monitor.on_step_begin(None, state, control)
        clock.now += seconds
        state.global_step += 1
        monitor.on_step_end(None, state, control)
    assert [(e["step"], e["train_seconds"]) for e in monitor.evaluations] == [(0, 0), (2, 11), (5, 20.5), (6, 21.5)]


def test_step_grid_evaluates_at_multiples_and_the_end(tmp_path) -> None:
    clock = FakeClock()
    monitor = _grid_monitor(tmp_path, EvalSettings(every_steps=3), clock)
    _train(monitor, clock, [1.0] * 7, max_steps=7)
    assert [(e["step"], e["train_seconds"]) for e in monitor.evaluations] == [(0, 0), (3, 3), (6, 6), (7, 7)]


def test_grid_cell_absorbs_float_rounding() -> None:
    assert [grid_cell(t, 0.1) for t in (0.0, 0.0999, 0.1, 0.3, 0.30001)] == [0, 0, 1, 3, 3]
    assert grid_cell(0.1 + 0.2, 0.3) == 1  # 0.30000000000000004
    assert grid_cell(29.999, 10.0) == 2


def _paced_monitor(tmp_path, clock: FakeClock) -> tuple[RunMonitor, io.StringIO, TrainerState, TrainerControl]:
    """A monitor that evaluates only at the start and end, printing into the returned buffer, after on_train_begin
    of a 12-step run."""
    out = io.StringIO()
    monitor = RunMonitor(
        tmp_path / "metrics.jsonl",
        lambda model: {"accuracy": 0.5, "num_examples": 4},
        EvalSettings(every_steps=None),
        display=Display(Console(file=out, width=120)),
        clock=clock,
    )
    state, control = TrainerState(max_steps=12), TrainerControl()
    monitor.on_train_begin(None, state, control)
    return monitor, out, state, control


def test_the_first_step_gives_no_estimate_and_the_second_does(tmp_path) -> None:
    """Step 1 (10 s, start-up included) is reported as such without a time left; step 2 (1 s) gives the estimate:
    10 steps left at 1 s. No further pace lines."""
    clock = FakeClock()
    monitor, out, state, control = _paced_monitor(tmp_path, clock)
    for seconds, generate in ((10.0, 6.0), (1.0, 0.4), (1.0, 0.4)):
        monitor.on_step_begin(None, state, control)
        clock.now += seconds
        state.global_step += 1
        monitor.on_step_end(None, state, control)
        monitor.on_log(None, state, control, logs={"pods/time_generate": generate, "pods/time_update": 0.5})
    monitor.close()
    pace = [line for line in out.getvalue().splitlines() if line.startswith("step ") and " took " in line]
    assert pace == [
        "step 1 took 10.0 s (generate 6.0 s, update 0.5 s; the first step includes start-up)",
        "step 2 took 1.0 s (generate 0.4 s, update 0.5 s): about 0.2 min of training left at this pace",
    ]


def test_a_step_a_signal_stops_reports_its_real_time(tmp_path) -> None:
    """SIGTERM during step 1: the step finishes and is logged, and its pace line gives its time (it said 0.0 s)."""
    clock = FakeClock()
    monitor, out, state, control = _paced_monitor(tmp_path, clock)
    monitor.on_step_begin(None, state, control)
    clock.now += 140.8
    monitor.stop_signal = signal.SIGTERM  # as the handler of `stopping_on_signals` records it
    state.global_step += 1
    monitor.on_step_end(None, state, control)
    assert control.should_save and control.should_training_stop
    monitor.on_log(None, state, control, logs={"pods/time_generate": 65.9, "pods/time_update": 74.9})
    monitor.close()
    pace = [line for line in out.getvalue().splitlines() if line.startswith("step 1 took")]
    assert pace == ["step 1 took 140.8 s (generate 65.9 s, update 74.9 s; the first step includes start-up)"]
