"""The run's clock, evaluations, metrics file and progress display, as one TrainerCallback.

Training time is the sum of optimizer-step durations (on_step_begin to on_step_end): evaluation, checkpoint
writing and logging happen outside those windows, so "accuracy vs training time" counts only training.

Evaluations follow a fixed grid, the same for every run: with `every_seconds: D`, after the first step whose end
takes the training clock across k x D (k = 1, 2, ...); with `every_steps: S`, after steps S, 2S, .... Lateness does
not accumulate (a run whose steps are long still evaluates once per grid cell it enters), and each record holds the
exact training seconds and step at which it was taken. The start (before any update) and the end are evaluated too.

While training runs inside `stopping_on_signals()`, SIGINT or SIGTERM stops the run cleanly: the current step
finishes, a checkpoint is saved, and no evaluation runs (a resumed run makes up the one that was due). A second
signal acts at once (the default).
"""

from __future__ import annotations

import json
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch.distributed as dist
from accelerate.utils import broadcast_object_list
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from pods_rl.run.display import Display
from pods_rl.run.settings import EvalSettings

Evaluate = Callable[[Any], dict[str, float]]
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunMonitor(TrainerCallback, ExportableState):
    """Keeps the training clock, evaluates on schedule, and appends every record to `metrics.jsonl`.

    Its state (clock, evaluation history) is saved inside each checkpoint, so `--resume` continues both.
    """

    def __init__(
        self,
        metrics_path: Path,
        evaluate: Evaluate,
        eval_settings: EvalSettings,
        *,
        time_budget: float | None = None,
        is_main: bool = True,
        display: Display | None = None,
        train_seconds: float = 0.0,
        evaluations: list[dict] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.metrics_path = Path(metrics_path)
        self.evaluate = evaluate
        self.eval_settings = eval_settings
        self.time_budget = time_budget
        self.is_main = is_main
        self.display = display or Display()
        self.train_seconds = train_seconds
        self.evaluations: list[dict] = evaluations or []
        self.clock = clock  # seconds, for the step windows and evaluations (a test passes a fake one)
        self.stop_signal: int | None = None  # the signal that asked the run to stop, if one did
        self._step_start = 0.0
        self._last_log: dict[str, float] = {}
        self._first_step = 0
        self._step_seconds = 0.0
        self._showing = False  # whether this process shows the training's progress (the main one does)

    # ------------------------------------------------------------- checkpointed state
    def state(self) -> dict:
        return {"args": {}, "attributes": {"train_seconds": self.train_seconds, "evaluations": self.evaluations}}

    def restore(self, state: dict) -> None:
        self.train_seconds = state["attributes"]["train_seconds"]
        self.evaluations = list(state["attributes"]["evaluations"])

    @contextmanager
    def stopping_on_signals(self) -> Iterator[None]:
        """Turn SIGINT/SIGTERM into a stop after the current step, with a checkpoint; handlers restored on exit."""
        if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
            yield
            return
        previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}

        def request_stop(number: int, frame: Any) -> None:
            self.stop_signal = number
            signal.signal(number, previous[number])  # a second signal acts at once

        for number in STOP_SIGNALS:
            signal.signal(number, request_stop)
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def close(self) -> None:
        """Stop showing progress (also when training ended with an error)."""
        self._showing = False

    # ------------------------------------------------------------- trainer events
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self._showing = self.is_main
        self._first_step = state.global_step
        # The base accuracy before the first update; on resume, the evaluation a stop by signal skipped.
        if not self.evaluations or self._eval_due(state):
            self._evaluate(state, model)
        self._update_progress(state)

    def on_step_begin(self, args, state, control, **kwargs):
        self._step_start = self.clock()
        if self._showing:  # a long step (generation on a CPU) still shows that it runs
            self._show(state, f"{self._progress_text()} | step {state.global_step + 1}")

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self._step_seconds = self.clock() - self._step_start  # the pace line's, also for a step a signal stops
        self.train_seconds += self._step_seconds
        self._follow_main_process()
        if self.stop_signal is not None:
            control.should_save = True
            control.should_training_stop = True
            return
        if self.time_budget is not None and self.train_seconds >= self.time_budget:
            control.should_training_stop = True
        if self._eval_due(state) or control.should_training_stop or state.global_step >= state.max_steps:
            self._evaluate(state, model)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        self._last_log = dict(logs)
        self._write({"type": "step", "step": state.global_step, "train_seconds": self.train_seconds, **logs})
        if self._showing and state.global_step in (self._first_step + 1, self._first_step + 2):
            self._report_pace(state, self._step_seconds)
        self._update_progress(state)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        stopped = self.stop_signal is not None  # no evaluation now: the resumed run evaluates on its schedule
        if not stopped and (not self.evaluations or self.evaluations[-1]["step"] != state.global_step):
            self._evaluate(state, model)
        self._update_progress(state)
        self.close()

    # ------------------------------------------------------------- helpers
    def _follow_main_process(self) -> None:
        """Every process takes the main process's clock and stop request, so all stop and evaluate on one step."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        shared = [self.train_seconds, self.stop_signal]
        broadcast_object_list(shared, from_process=0)
        self.train_seconds, self.stop_signal = shared

    def _eval_due(self, state) -> bool:
        """Whether the clock (or step count) has entered a grid cell that holds no evaluation yet."""
        last = self.evaluations[-1] if self.evaluations else {"step": 0, "train_seconds": 0.0}
        if self.eval_settings.every_seconds is not None:
            return grid_cell(self.train_seconds, self.eval_settings.every_seconds) > grid_cell(
                last["train_seconds"], self.eval_settings.every_seconds
            )
        every = self.eval_settings.every_steps
        return every is not None and state.global_step // every > last["step"] // every

    def _evaluate(self, state, model) -> None:
        """Every process evaluates (its share of the evaluation set, see `evaluate(sharded=True)`): under ZeRO-3 or
        FSDP each forward pass needs them all. All keep the record; the main process writes it."""
        started = self.clock()
        results = self.evaluate(model)
        seconds = self.clock() - started  # wall time, outside the training clock: what evaluating costs
        record = {"step": state.global_step, "train_seconds": self.train_seconds, "eval_seconds": seconds, **results}
        self.evaluations.append(record)
        self._write({"type": "eval", **record})
        if self._showing and "accuracy" in results:
            sampled = f", sampled {results['accuracy_sampled']:.3f}" if "accuracy_sampled" in results else ""
            self.display.print(
                f"step {state.global_step}: held-out accuracy {results['accuracy']:.3f}{sampled} "
                f"({results['num_examples']} examples, {seconds:.0f} s)",
                highlight=False,
            )

    def _write(self, record: dict) -> None:
        if not self.is_main:
            return
        with self.metrics_path.open("a") as file:
            file.write(json.dumps(record, default=float) + "\n")

    def _report_pace(self, state, step_seconds: float) -> None:
        """After the first step of this process, its time: it includes the start-up (a GPU's kernels, a vLLM engine's
        first batch, oneDNN's first primitives), so no estimate comes from it. After the second, what the rest will
        take at that step's pace (evaluation excluded)."""
        phases = [(phase, self._last_log.get(f"pods/time_{phase}")) for phase in ("generate", "update")]
        split = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases if seconds is not None)
        if state.global_step == self._first_step + 1:
            note = "; ".join(part for part in (split, "the first step includes start-up") if part)
            self.display.print(f"step {state.global_step} took {step_seconds:.1f} s ({note})", highlight=False)
            return
        remaining = (state.max_steps - state.global_step) * step_seconds
        if self.time_budget is not None:
            remaining = min(remaining, max(self.time_budget - self.train_seconds, 0.0))
        self.display.print(
            f"step {state.global_step} took {step_seconds:.1f} s"
            + (f" ({split})" if split else "")
            + f": about {remaining / 60:.1f} min of training left at this pace",
            highlight=False,
        )

    def _update_progress(self, state) -> None:
        if self._showing:
            self._show(state, self._progress_text())

    def _show(self, state, text: str) -> None:
        """Training's progress: steps out of max_steps, or under a time budget seconds of training out of those the
        run will stop at, since its step limit may then be a placeholder (`pods compare` sets 1_000_000)."""
        if self.time_budget is None:
            self.display.update("training", state.global_step, state.max_steps, text)
        else:
            total = self.expected_seconds(state.global_step, state.max_steps)
            self.display.update("training", self.train_seconds, total, text, in_seconds=True)

    def expected_seconds(self, step: int, max_steps: int) -> float:
        """The seconds of training the run will stop at: the time budget, or sooner when `max_steps` comes first at
        the pace so far, so that the display's count and time left tell the truth."""
        assert self.time_budget is not None
        if step == 0 or self.train_seconds <= 0:
            return self.time_budget
        return min(self.time_budget, self.train_seconds + (max_steps - step) * self.train_seconds / step)

    def _progress_text(self) -> str:
        accuracy = self.evaluations[-1]["accuracy"] if self.evaluations else math.nan
        reward = self._last_log.get("pods/pool_reward_mean", self._last_log.get("reward"))
        selected = self._last_log.get("pods/selected_reward_mean")
        return f"reward {_fmt(reward)} sel {_fmt(selected)} acc {_fmt(accuracy)} train {self.train_seconds:.0f}s"


def grid_cell(seconds: float, every: float) -> int:
    """How many points k x `every` (k >= 1) the training clock has reached; a float-rounding slack of 1e-9 s lets
    a clock that lands on a grid point (30.000000000000004 / 10 -> 3, 0.3 / 0.1 -> 3) count it as reached."""
    return math.floor((seconds + 1e-9) / every)


def _fmt(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"
