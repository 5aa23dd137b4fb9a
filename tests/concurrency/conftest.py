"""Shared machinery of the multi-process tests: child processes, and reading every version.

Children are real OS processes started with "forkserver" (or "spawn" where
that is missing), never "fork": the pytest process may run threads, and
forking it is unsafe (Python warns, and warnings fail this suite). The fork
server preloads mere and the requesting test module, so a child starts in
milliseconds instead of re-importing pyarrow.

Every wait on a child is bounded by :data:`WAIT`; whatever a test leaves
running is killed at teardown.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import mere

WAIT = 60.0  # upper bound for any single wait on a child process


@pytest.fixture
def mp_context(request: pytest.FixtureRequest) -> multiprocessing.context.BaseContext:
    """A multiprocessing context that does not fork the pytest process itself."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    # Only takes effect if the fork server is not running yet; otherwise each
    # child imports the test module itself, which is merely slower.
    context.set_forkserver_preload(["mere", request.module.__name__])
    return context


class Processes:
    """The child processes of one test; anything still running at teardown is killed."""

    def __init__(self, context: multiprocessing.context.BaseContext) -> None:
        self.context = context
        self.started: list[multiprocessing.process.BaseProcess] = []

    def start(
        self, target: Callable[..., None], *args: Any, name: str | None = None
    ) -> multiprocessing.process.BaseProcess:
        """Start ``target(*args)`` in a new daemon process."""
        process = self.context.Process(target=target, args=args, name=name, daemon=True)
        process.start()
        self.started.append(process)
        return process

    def join(
        self,
        processes: Iterable[multiprocessing.process.BaseProcess] | None = None,
        timeout: float = WAIT,
    ) -> None:
        """Wait for ``processes`` (default: all) to exit, within one overall deadline.

        Fails the test if one is still running at the deadline, or exited
        with an error (its traceback is in the captured stderr).
        """
        chosen = list(self.started if processes is None else processes)
        deadline = time.monotonic() + timeout
        for process in chosen:
            process.join(max(0.0, deadline - time.monotonic()))
        stuck = [p.name for p in chosen if p.is_alive()]
        assert not stuck, f"still running after {timeout:.0f} s: {stuck}"
        failed = {p.name: p.exitcode for p in chosen if p.exitcode != 0}
        assert not failed, f"child processes failed (exit codes): {failed}"

    def kill_all(self) -> None:
        """SIGKILL whatever still runs, reap everything, release the handles."""
        for process in self.started:
            if process.is_alive():
                process.kill()
        for process in self.started:
            process.join(WAIT)
            if not process.is_alive():
                process.close()


@pytest.fixture
def processes(mp_context: multiprocessing.context.BaseContext) -> Iterator[Processes]:
    """Starts children for a test and makes sure none outlives it."""
    group = Processes(mp_context)
    yield group
    group.kill_all()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's database lives (a local store, shared by every process)."""
    return tmp_path / "db"


class DataFiles:
    """Reads a table's rows at any version from its data files, each file read only once.

    ``TableSnapshot.scan()`` at every version costs O(versions x files). Data
    files are immutable and uniquely named (docs/format.md §1), so a table's
    rows at a version are the concatenation of its files' rows, and each file
    can be read once and cached by path: checking every version of the log
    becomes linear. Tests cross-check this against ``scan()`` at some versions.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._rows: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def rows(self, table: mere.TableSnapshot) -> list[dict[str, Any]]:
        """Every row of ``table`` as of its snapshot, in no particular order."""
        rows: list[dict[str, Any]] = []
        for add in table.files:
            key = (table.id, add.path)
            if key not in self._rows:
                path = self.root / "tables" / table.id / add.path
                self._rows[key] = pq.read_table(path).to_pylist()
            rows.extend(self._rows[key])
        return rows

    def column(self, table: mere.TableSnapshot, name: str) -> list[Any]:
        """One column of :meth:`rows`."""
        return [row[name] for row in self.rows(table)]


@pytest.fixture
def data_files(db_path: Path) -> DataFiles:
    return DataFiles(db_path)
