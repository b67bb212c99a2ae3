"""The console of a run: one progress display for every long phase (warm start, conversion, evaluation, training).

On a terminal it is a rich progress display sized to the terminal's width. Elsewhere (a log file, a pipe) it prints
plain lines: one per tenth of a phase, and at least one every `heartbeat` seconds while a phase runs, so a log that
stops growing means a stuck run, not a slow one. A phase whose outcome its caller prints (an evaluation, followed by
"step N: held-out accuracy ...") can ask to be quiet when short: it then prints no progress line unless it runs for
`heartbeat / 3` seconds, so a quick evaluation leaves one line in the log, its outcome.

The time left, in both, is estimated from the progress after a phase's first unit (its first step, batch or second):
the first carries the start-up (a GPU's kernels, a vLLM engine's first batch, oneDNN's first primitives) and would
make the estimate many times too long.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Column

from pods_rl.console import make_console

NARROW = 100  # columns below which the bar and the remaining time are left out


@dataclass
class _Phase:
    total: float | None
    done: float = 0
    text: str = ""
    # Looked up at each call (not bound once), so that a test can set the clock.
    started: float = field(default_factory=lambda: time.monotonic())
    printed_at: float = field(default_factory=lambda: time.monotonic())
    printed_done: int = 0
    printed: bool = False
    quiet_for: float = 0.0  # seconds from the start without progress lines (in a log)
    in_seconds: bool = False  # the count is of seconds, shown as a clock
    task_id: TaskID | None = None
    first_unit: tuple[float, float] | None = None  # (clock, done) at the first report past 0: the pace starts there

    def seconds_left(self, now: float) -> float | None:
        """The time left at the pace since the first unit was done (None before a second report past it)."""
        if self.first_unit is None or not self.total or self.done >= self.total:
            return None
        started, done = self.first_unit
        if self.done <= done:
            return None
        return (now - started) / (self.done - done) * (self.total - self.done)


class Display:
    """Progress of named phases; `update(name, done, total, text)` is the callback every long phase reports to."""

    def __init__(self, console: Console | None = None, *, heartbeat: float = 30.0, lines_per_phase: int = 10):
        self.console = console or make_console()
        self.heartbeat = heartbeat
        self.lines_per_phase = lines_per_phase
        self._phases: dict[str, _Phase] = {}
        self._finished: dict[str, tuple[int, int | None]] = {}  # the last report of each finished phase
        self._progress: Progress | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def live(self) -> bool:
        """Whether progress is drawn in place (a terminal) rather than printed as lines."""
        return self.console.is_terminal

    def print(self, *objects, **kwargs) -> None:
        """Print above the progress display; long lines are left whole (a terminal wraps them, a file keeps them)."""
        kwargs.setdefault("soft_wrap", True)
        (self._progress.console if self._progress else self.console).print(*objects, **kwargs)

    def update(
        self,
        name: str,
        done: float,
        total: float | None = None,
        text: str = "",
        *,
        quiet_if_short: bool = False,
        in_seconds: bool = False,
    ) -> None:
        """Report `done` of `total` units of phase `name` (started on its first report, finished at done >= total).

        Read on the phase's first report: `quiet_if_short`, the caller prints the phase's outcome, so in a log the
        phase prints progress lines only once it has run `heartbeat / 3` seconds; `in_seconds`, the units are
        seconds (of training, under a time budget), shown as a clock ("1:05/5:00")."""
        with self._lock:
            phase = self._phases.get(name)
            if phase is None:
                if self._finished.get(name) == (done, total):
                    return  # the same end reported again
                phase = self._phases[name] = _Phase(
                    total=total, quiet_for=self.heartbeat / 3 if quiet_if_short else 0.0, in_seconds=in_seconds
                )
                self._start(name, phase)
            phase.done, phase.text = done, text
            if phase.first_unit is None and done > 0:
                phase.first_unit = (time.monotonic(), done)
            if total is not None:
                phase.total = total
            finished = phase.total is not None and done >= phase.total
            if self.live:
                self._draw(name, phase)
            elif self._worth_a_last_line(phase) if finished else self._line_due(phase):
                self._print_line(name, phase)
            if finished:
                del self._phases[name]
                self._finished[name] = (done, phase.total)

    def callback(self, name: str, *, quiet_if_short: bool = False):
        """`update` for one phase, as the (done, total) callback the models and the evaluation take."""
        return lambda done, total: self.update(name, done, total, quiet_if_short=quiet_if_short)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        self._phases.clear()

    # ------------------------------------------------------------- terminal
    def _start(self, name: str, phase: _Phase) -> None:
        if not self.live:
            self._start_heartbeat()
            return
        if self._progress is None:
            wide = self.console.width >= NARROW
            # One text column that folds onto a second row rather than cutting words to "…" when narrow.
            text = Column(no_wrap=False, overflow="fold")
            columns = [
                *([BarColumn(bar_width=20)] if wide else []),
                TextColumn("[bold]{task.description}[/] {task.fields[count]} {task.fields[text]}", table_column=text),
                TimeElapsedColumn(),
                *([TextColumn("{task.fields[left]}")] if wide else []),
            ]
            self._progress = Progress(*columns, console=self.console, transient=False)
            self._progress.start()
        phase.task_id = self._progress.add_task(name, total=phase.total, count="", text="", left="")

    def _draw(self, name: str, phase: _Phase) -> None:
        assert self._progress is not None and phase.task_id is not None
        left = phase.seconds_left(time.monotonic())
        self._progress.update(
            phase.task_id,
            completed=phase.done,
            total=phase.total,
            count=_count(phase),
            text=phase.text,
            left="" if left is None else f"{_clock(left)} left",
        )
        if phase.total is not None and phase.done >= phase.total:
            self._progress.remove_task(phase.task_id)  # the caller prints the outcome

    # ------------------------------------------------------------- log file / pipe
    def _line_due(self, phase: _Phase) -> bool:
        now = time.monotonic()
        if now - phase.started < phase.quiet_for:
            return False
        step = max(1, (phase.total or 0) // self.lines_per_phase)
        return phase.done - phase.printed_done >= step or now - phase.printed_at >= self.heartbeat

    def _worth_a_last_line(self, phase: _Phase) -> bool:
        """A phase that already printed, or ran long, ends with a line; a short one leaves it to its caller."""
        return phase.printed or time.monotonic() - phase.started >= self.heartbeat / 3

    def _print_line(self, name: str, phase: _Phase) -> None:
        now = time.monotonic()
        elapsed = now - phase.started
        parts = [f"{name} {_count(phase)}".rstrip(), phase.text, f"{_clock(elapsed)} elapsed"]
        left = phase.seconds_left(now)
        if left is not None:
            parts.append(f"about {_clock(left)} left")
        self.console.print(" | ".join(part for part in parts if part), highlight=False, soft_wrap=True)
        phase.printed_at, phase.printed_done, phase.printed = now, phase.done, True

    def _start_heartbeat(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()

        def beat() -> None:
            while not self._stop.wait(min(self.heartbeat, 5.0)):
                with self._lock:
                    for name, phase in self._phases.items():
                        if time.monotonic() - phase.printed_at >= self.heartbeat:
                            self._print_line(name, phase)

        self._thread = threading.Thread(target=beat, name="pods-progress", daemon=True)
        self._thread.start()


def _count(phase: _Phase) -> str:
    if not phase.total:
        return ""
    return f"{_clock(phase.done)}/{_clock(phase.total)}" if phase.in_seconds else f"{phase.done}/{phase.total}"


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}" if minutes >= 60 else f"{minutes}:{seconds:02d}"
