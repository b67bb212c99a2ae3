"""The console every `pods` command prints to: the terminal's width on a terminal, and elsewhere (a log file, a pipe,
a captured output) wide enough that a table's cell never wraps.

rich sizes output to the terminal it finds, or to 80 columns when there is none, so in a log every cell of a wide
table folds over several lines ("24.6 / [23, / 25]"). Off a terminal this console is `LOG_WIDTH` columns wide: a
table is only as wide as its contents (it does not stretch to the console's width), so each row stays one line.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, ConsoleDimensions

LOG_WIDTH = 1000  # columns off a terminal: more than any table `pods` prints


class WideLogConsole(Console):
    """A rich Console that is `LOG_WIDTH` columns wide wherever it is not a terminal (nor a notebook), unless given a
    `width`; on a terminal it is the terminal's width, as any Console. Off a terminal $COLUMNS is ignored: it names a
    terminal's width, and a log has none."""

    def __init__(self, *args: Any, width: int | None = None, **options: Any):
        super().__init__(*args, width=width, **options)
        self._given_width = width

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self._given_width is None and not self.is_terminal and not self.is_jupyter:
            return ConsoleDimensions(LOG_WIDTH, size.height)
        return size

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._width, self._height = new_size
        self._given_width = self._width


def make_console(**options: Any) -> Console:
    """The console of a `pods` command (on stderr by default; `stderr=False` for stdout), see the module's note."""
    options.setdefault("stderr", True)
    return WideLogConsole(**options)
