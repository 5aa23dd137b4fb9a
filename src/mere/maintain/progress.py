"""Progress bars for long maintenance operations, shown only to a person at a terminal.

Vacuum, compaction, restore and export can take minutes on a large database.
When stderr is a terminal they draw a transient rich progress bar there;
otherwise (pipes, CI, tests, ``--json`` consumers reading stdout) they are
silent, so nothing ever mixes with machine-readable output.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

#: Advance the current task by this many steps.
Advance = Callable[[int], None]


def stderr_is_terminal() -> bool:
    """True when stderr is an interactive terminal (the only time progress is drawn)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _nothing(_steps: int) -> None:
    return None


@contextmanager
def progress(description: str, total: int | None) -> Iterator[Advance]:
    """A progress bar for ``total`` steps on stderr if it is a terminal; a no-op otherwise.

    Yields a function that advances the bar by a number of steps. The bar
    disappears when the block ends.
    """
    if not stderr_is_terminal() or (total is not None and total <= 0):
        yield _nothing
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(description, total=total)

        def advance(steps: int) -> None:
            bar.advance(task, steps)

        yield advance
