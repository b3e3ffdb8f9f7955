"""The one formatting layer of the CLI: headings, tables, notes and progress bars.

With a terminal it draws through rich (colours, boxed tables, live progress); otherwise it
writes plain text with no ANSI codes, so logs, pipes and CI diffs stay readable. Plain is
chosen when stdout is not a TTY, when ``NO_COLOR`` is set (https://no-color.org) or when a
command prints ``--json``. rich is imported only when a command draws with it, so building
the CLI parser stays fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from ._format import table as plain_table

#: a progress callback: ``advance(n)`` moves the bar ``n`` steps on
Advance = Callable[[int], None]

#: note kinds -> the rich style drawing them (plain output prints the text as it is)
STYLES = {"ok": "green", "warn": "yellow", "error": "bold red", "info": "dim"}


def wants_plain(stream: TextIO, as_json: bool = False) -> bool:
    """True when output must be plain text: ``--json``, ``NO_COLOR`` set, or not a TTY."""
    if as_json or os.environ.get("NO_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return not (isatty and isatty())


class Console:
    """Where a command prints. ``plain``: no rich, no ANSI; else rich draws on ``file``."""

    def __init__(self, file: TextIO | None = None, *, plain: bool | None = None, as_json: bool = False,
                 progress_file: TextIO | None = None) -> None:
        self.file = file if file is not None else sys.stdout
        self.plain = wants_plain(self.file, as_json) if plain is None else plain
        self.as_json = as_json
        self.progress_file = progress_file if progress_file is not None else sys.stderr
        self._rich: Any = None

    def _console(self) -> Any:
        if self._rich is None:
            from rich.console import Console as RichConsole

            self._rich = RichConsole(file=self.file, force_terminal=True, highlight=False)
        return self._rich

    def line(self, text: str = "", kind: str | None = None) -> None:
        """One line of text; ``kind`` (ok, warn, error, info) colours it on a terminal."""
        if self.plain:
            print(text, file=self.file)
            return
        from rich.text import Text

        self._console().print(Text(text, style=STYLES.get(kind or "", "")))

    def heading(self, text: str) -> None:
        """A section title, separated from what came before by a blank line."""
        if self.plain:
            print(f"\n{text}\n{'=' * len(text)}", file=self.file)
            return
        self._console().rule(f"[bold]{_escape(text)}", align="left")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[object]], *, title: str | None = None,
              numeric: Sequence[int] = ()) -> None:
        """Columns of cells; ``numeric``: column indexes right-aligned on a terminal."""
        if self.plain:
            if title:
                print(title, file=self.file)
            print(plain_table(headers, rows), file=self.file)
            return
        from rich.table import Table

        t = Table(title=title, title_justify="left", header_style="bold")
        for i, h in enumerate(headers):
            t.add_column(h, justify="right" if i in numeric else "left", overflow="fold")
        for row in rows:
            t.add_row(*[_escape(str(c)) for c in row])
        self._console().print(t)

    def fields(self, pairs: Sequence[tuple[str, object]]) -> None:
        """``name: value`` lines, names aligned (a small key/value report)."""
        width = max((len(k) for k, _ in pairs), default=0)
        for key, value in pairs:
            if self.plain:
                print(f"{key + ':':<{width + 1}} {value}", file=self.file)
            else:
                self._console().print(f"[bold]{_escape(key)}:[/bold]{' ' * (width - len(key))} {_escape(str(value))}")

    def json(self, data: Any) -> None:
        """Machine-readable output: always plain, never coloured."""
        print(json.dumps(data, indent=2, default=str), file=self.file)

    @contextmanager
    def progress(self, label: str, total: int) -> Iterator[Advance]:
        """A progress bar on stderr while the block runs (a no-op unless stderr is a
        terminal and the output is not ``--json``): yields ``advance(n)``."""
        if self.as_json or wants_plain(self.progress_file):
            yield _no_progress
            return
        from rich.console import Console as RichConsole
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=RichConsole(file=self.progress_file), transient=True)
        with bar:
            task = bar.add_task(label, total=total)

            def advance(n: int = 1) -> None:
                bar.advance(task, n)

            yield advance


def _no_progress(n: int = 1) -> None:
    """Progress off the terminal: nothing to draw."""


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def console_for(args: Any) -> Console:
    """The console a command's parsed ``args`` ask for (``--json`` makes it plain)."""
    return Console(as_json=bool(getattr(args, "json", False)))
