"""Shared machinery of the multi-process tests: child processes, where the database lives,
and reading every version.

Children are real OS processes started with "forkserver" (or "spawn" where
that is missing), never "fork": the pytest process may run threads, and
forking it is unsafe (Python warns, and warnings fail this suite). The fork
server preloads mere and the requesting test module, so a child starts in
milliseconds instead of re-importing pyarrow.

Every wait on a child is bounded by :data:`WAIT`; whatever a test leaves
running is killed at teardown.

A test that takes the ``location`` fixture runs on a local directory and on
Azurite (``az://`` URIs, marked ``azure``; the session's server from
``tests/cloud/cloud_servers.py``). Children reach the store through the URI and
storage options, which pickle, never through a store object (stores refuse to).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import mere
from mere.log.inlined import decode_inlined
from mere.storage import LocalStore, ObjectStore, open_store

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cloud"))
import cloud_servers  # tests/cloud is no package: found through sys.path

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


@dataclass
class Location:
    """Where a test's database lives: a URI and the storage options every process opens it with.

    ``local_root`` is the directory of a local database (None elsewhere), for
    the checks only a filesystem allows (temp files, which listings hide).
    """

    uri: str
    storage_options: dict[str, Any] | None = None
    local_root: Path | None = None

    def __post_init__(self) -> None:
        #: The database's object store, for the parent's checks.
        self.store = open_store(self.uri, self.storage_options)
        self.data_files = DataFiles(self.store)

    def connect(self, **kwargs: Any) -> mere.Database:
        """A new connection (nothing cached) to the database."""
        return mere.connect(self.uri, storage_options=self.storage_options, **kwargs)


@pytest.fixture(params=["local", pytest.param("azure", marks=pytest.mark.azure)])
def location(request: pytest.FixtureRequest, db_path: Path) -> Iterator[Location]:
    """A fresh database location on each backend: a local directory, or Azurite."""
    if request.param == "local":
        where = Location(str(db_path), local_root=db_path)
    else:
        server = cloud_servers.azurite()  # skips without Azurite (fails under CI=true)
        prefix = cloud_servers.unique_prefix("concurrency")
        where = Location(
            f"az://{cloud_servers.BUCKET}/{prefix}", cloud_servers.azure_options(server.endpoint)
        )
    yield where
    where.store.close()


class DataFiles:
    """Reads a table's rows at any version from its data files, each file read only once.

    ``TableSnapshot.scan()`` at every version costs O(versions x files). Data
    files, stored or inlined in the log, are immutable and uniquely named
    (docs/format.md §1), so a table's rows at a version are the concatenation
    of its files' rows, and each file can be read once and cached by path:
    checking every version of the log becomes linear. Tests cross-check this
    against ``scan()`` at some versions.
    """

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._rows: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def rows(self, table: mere.TableSnapshot) -> list[dict[str, Any]]:
        """Every row of ``table`` as of its snapshot, in no particular order."""
        rows: list[dict[str, Any]] = []
        for add in table.files:
            key = (table.id, add.path)
            if key not in self._rows:
                if add.inline is not None:  # an inlined file (docs/format.md §2.5)
                    decoded = decode_inlined(add.inline)
                else:
                    decoded = pq.read_table(self.store.open_input(f"tables/{table.id}/{add.path}"))
                self._rows[key] = decoded.to_pylist()
            rows.extend(self._rows[key])
        return rows

    def column(self, table: mere.TableSnapshot, name: str) -> list[Any]:
        """One column of :meth:`rows`."""
        return [row[name] for row in self.rows(table)]


@pytest.fixture
def data_files(db_path: Path) -> DataFiles:
    """Data files of the local database at ``db_path``."""
    return DataFiles(LocalStore(db_path))
