"""What a query can see: the tables of a snapshot or of a transaction, and older versions.

A :class:`Catalog` answers two questions for the query runner: which live
files make up table ``name`` (``relation``), and what the database held at
another version (``state_at`` / ``version_at``, for ``FOR SYSTEM_VERSION`` and
``FOR SYSTEM_TIME AS OF``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mere.errors import DatabaseNotFound, VersionNotFound
from mere.log.actions import AddFile, TableMeta
from mere.log.log import Log
from mere.maintain.export import find_export
from mere.snapshot.loader import load_state
from mere.snapshot.state import DatabaseState
from mere.storage.base import ObjectStore

if TYPE_CHECKING:
    from mere.txn.transaction import Transaction


@dataclass(frozen=True)
class Relation:
    """One table as a query scans it: its metadata and live files."""

    meta: TableMeta
    files: list[AddFile]


class History:
    """Older (or newer) versions of the database, for time travel."""

    def __init__(
        self, store: ObjectStore, known: DatabaseState, states: Callable[[int], DatabaseState]
    ) -> None:
        self.store = store
        self.log = Log(store)
        self._known = known
        self._states = states

    def state_at(self, version: int) -> DatabaseState:
        """The state at ``version``.

        Raises:
            VersionNotFound: no such version (yet, or any more).
        """
        if version == self._known.version:
            return self._known
        latest = self._latest()
        if version > latest:
            raise VersionNotFound(f"version {version} does not exist; the latest is {latest}")
        return self._states(version)

    def version_at(self, timestamp_ms: int) -> int:
        """The newest version committed at or before ``timestamp_ms``."""
        return self.log.version_at_timestamp(timestamp_ms, 0, self._latest())

    def version_named(self, name: str) -> int:
        """The version of the live export or tag ``name`` (at the latest version).

        Raises:
            ExportNotFound: no live export or tag has that name.
        """
        return find_export(self.state_at(self._latest()), name).version

    def _latest(self) -> int:
        latest = self.log.latest_version(known=self._known.version)
        if latest is None:
            raise DatabaseNotFound(f"the database at {self.store.uri} has no log any more")
        return latest


def history_of(
    store: ObjectStore, state: DatabaseState, states: Callable[[int], DatabaseState] | None = None
) -> History:
    """Time travel from ``state``: through ``states`` (a database's cache) or the log."""
    if states is None:
        log = Log(store)

        def states(version: int) -> DatabaseState:
            return load_state(log, version, state if state.version <= version else None)

    return History(store, state, states)


class SnapshotCatalog:
    """The tables of one committed state (read-only)."""

    def __init__(self, store: ObjectStore, state: DatabaseState, history: History) -> None:
        self.store = store
        self.state = state
        self.history = history

    def relation(self, name: str) -> Relation | None:
        table = self.state.table_by_name(name)
        if table is None:
            return None
        return Relation(table.meta, list(table.files.values()))


class TransactionCatalog:
    """The tables as a transaction sees them: its snapshot plus its own writes.

    Every table a query names is recorded as read in full (the transaction
    cannot know which rows DuckDB looked at), so concurrent changes to it are
    judged against the transaction's isolation level.
    """

    def __init__(self, tx: Transaction, history: History) -> None:
        self.tx = tx
        self.store = tx.store
        self.history = history

    def relation(self, name: str) -> Relation | None:
        self.tx.check_open()
        meta = self.tx.stage.lookup(name)
        if meta is None:
            return None
        plan, files = self.tx.stage.plan_read(meta.id, None, None)
        return Relation(plan.table, files)


Catalog = SnapshotCatalog | TransactionCatalog

__all__ = [
    "Catalog",
    "History",
    "Relation",
    "SnapshotCatalog",
    "TransactionCatalog",
    "history_of",
]
