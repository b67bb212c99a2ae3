"""Off a terminal every command's tables keep each row on one line; on a terminal they fit the terminal."""

import io

from rich.table import Table
from typer.testing import CliRunner

from pods_rl.cli import app
from pods_rl.console import LOG_WIDTH, make_console
from pods_rl.tasks import list_tasks

CELLS = ["pods", "24.6 / (23, 25)", "1.82x (1.07-3.09x, 6 of 6 seeds faster)", "+3.1 points (-4.0 to +10.1)"]


def wide_table() -> Table:
    table = Table("arm", "time to target (s) (bracket)", "speedup vs grpo (95% interval)", "window mean difference")
    table.add_row(*CELLS)
    return table


def test_off_a_terminal_a_wide_table_keeps_each_row_on_one_line(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # even where the environment names a narrow width
    out = io.StringIO()
    console = make_console(file=out)
    assert not console.is_terminal and console.width == LOG_WIDTH
    console.print(wide_table())
    rows = [line for line in out.getvalue().splitlines() if "pods" in line]
    assert len(rows) == 1 and all(cell in rows[0] for cell in CELLS)
    assert len(rows[0]) > 100  # wider than a terminal of 80 columns would have allowed


def test_on_a_terminal_the_table_fits_the_terminal():
    out = io.StringIO()
    console = make_console(file=out, force_terminal=True, width=80, color_system=None)
    console.print(wide_table())
    assert console.width == 80 and max(map(len, out.getvalue().splitlines())) <= 80


def test_pods_tasks_in_a_log_lists_each_description_on_its_line():
    result = CliRunner().invoke(app, ["tasks"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name, description in list_tasks():
        assert any(name in line and description in line for line in lines), description
