"""The run's console: lines in a log file (one per tenth of a phase, a heartbeat while it runs), a progress
display on a terminal that stays readable when narrow."""

import io
import re
import time

from rich.console import Console

import pods_rl.run.display
from pods_rl.run.display import Display


def file_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=80), out


def test_log_file_gets_a_line_per_tenth_and_the_end():
    console, out = file_console()
    display = Display(console, heartbeat=3600)
    for done in range(0, 101):
        display.update("training", done, 100, f"reward {done / 100:.2f} " + "x" * 70)
    display.close()
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == [f"training {k}/100" for k in range(10, 101, 10)]
    # Whole lines in an 80-column console: never wrapped or cut.
    assert lines[4].startswith(f"training 50/100 | reward 0.50 {'x' * 70} | 0:00 elapsed | about 0:00 left")


def test_short_phase_leaves_its_outcome_to_the_caller():
    console, out = file_console()
    display = Display(console, heartbeat=3600)
    display.update("evaluation", 0, 16)
    display.update("evaluation", 16, 16)
    display.update("evaluation", 16, 16)  # the same end reported twice
    display.close()
    assert out.getvalue() == ""


def test_short_evaluation_prints_no_progress_lines(monkeypatch):
    """An evaluation in a log (quiet if short: its caller prints the outcome) that ends within heartbeat / 3 seconds
    prints nothing, however many rows it reports; one that runs longer prints its tenths from then on."""
    now = [0.0]
    monkeypatch.setattr(pods_rl.run.display.time, "monotonic", lambda: now[0])
    console, out = file_console()
    display = Display(console, heartbeat=30)
    progress = display.callback("evaluation", quiet_if_short=True)
    for done in (0, 37, 90, 151, 200):  # rows ending mid-batch, reported as they end
        now[0] += 0.1
        progress(done, 200)
    assert out.getvalue() == ""
    for done in (0, 40, 80, 120, 200):
        now[0] += 4.0  # 10 s in at the third report
        progress(done, 200)
    display.close()
    assert [line.split(" | ")[0] for line in out.getvalue().splitlines()] == [
        "evaluation 120/200",
        "evaluation 200/200",
    ]


def test_a_phase_in_seconds_counts_with_a_clock():
    """Training under a time budget reports seconds of training: its count reads as time, a tenth of the budget a
    line."""
    console, out = file_console()
    display = Display(console, heartbeat=3600)
    for seconds in (0.0, 12.5, 31.2, 58.0, 64.9, 300.4):
        display.update("training", seconds, 300.0, "reward 0.5", in_seconds=True)
    display.close()
    assert [line.split(" | ")[0] for line in out.getvalue().splitlines()] == [
        "training 0:31/5:00",
        "training 1:04/5:00",
        "training 5:00/5:00",
    ]


def test_heartbeat_while_a_phase_is_stuck():
    """No report for a while (a long step): a line still comes at least every `heartbeat` seconds."""
    console, out = file_console()
    display = Display(console, heartbeat=0.2)
    display.update("training", 3, 250, "step 4")
    deadline = time.monotonic() + 10
    while out.getvalue().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    display.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("training 3/250 | step 4 | ") for line in lines)


def test_callback_reports_done_and_total():
    console, out = file_console()
    display = Display(console, heartbeat=3600, lines_per_phase=2)
    callback = display.callback("warm start")
    for step in range(1, 5):
        callback(step, 4)
    display.close()
    assert [line.split(" | ")[0] for line in out.getvalue().splitlines()] == ["warm start 2/4", "warm start 4/4"]


def test_narrow_terminal_shows_counts_and_text_without_ellipsis():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, color_system=None)
    display = Display(console)
    display.update("training", 12, 250, "reward 0.512 sel 0.613 acc 0.380 train 45s | step 13")
    display.print("step 12: held-out accuracy 0.380")
    display.close()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())
    words = " ".join(word for word in text.split() if not re.fullmatch(r"\d+:\d\d:\d\d", word))
    assert "training 12/250 reward 0.512 sel 0.613 acc 0.380 train 45s | step 13" in words  # folded, not cut
    assert "step 12: held-out accuracy 0.380" in text
    assert "…" not in text


def test_time_left_leaves_out_the_first_unit_and_its_start_up(monkeypatch):
    """A first step of 10 s (start-up) and steps of 1 s after it: at step 10 of 100 the log says 90 s are left (the
    pace since step 1), not 171 s (19 s for 10 steps); on a terminal the same estimate shows."""
    now = [0.0]
    monkeypatch.setattr(pods_rl.run.display.time, "monotonic", lambda: now[0])
    console, out = file_console()
    display = Display(console, heartbeat=3600)
    display.update("training", 0, 100)
    now[0] = 10.0
    display.update("training", 1, 100)
    for done in range(2, 11):
        now[0] += 1.0
        display.update("training", done, 100)
    display.close()
    assert out.getvalue().splitlines() == ["training 10/100 | 0:19 elapsed | about 1:30 left"]

    out = io.StringIO()
    display = Display(Console(file=out, force_terminal=True, width=120, color_system=None))
    now[0] = 0.0
    display.update("training", 0, 100)
    assert "left" not in out.getvalue()  # no pace before a second report past the first unit
    now[0] = 10.0
    display.update("training", 1, 100)
    now[0] = 12.0
    display.update("training", 3, 100)
    display._progress.refresh()
    display.close()
    assert "1:37 left" in out.getvalue()  # 97 steps at 1 s


def test_first_report_past_zero_gives_no_estimate_on_its_own(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(pods_rl.run.display.time, "monotonic", lambda: now[0])
    console, out = file_console()
    display = Display(console, heartbeat=3600, lines_per_phase=100)
    display.update("training", 0, 4)
    now[0] = 8.0
    display.update("training", 1, 4)  # a line per unit: the first has no pace to go by
    now[0] = 9.0
    display.update("training", 2, 4)
    display.close()
    assert out.getvalue().splitlines() == [
        "training 1/4 | 0:08 elapsed",
        "training 2/4 | 0:09 elapsed | about 0:02 left",
    ]
