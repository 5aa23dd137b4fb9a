"""The state of the whole database at one version, built by replaying the log.

A :class:`DatabaseState` is immutable: applying a commit returns a new state
that shares every untouched table with the old one, so keeping a cached state
current costs work proportional to the new commits, not to the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from mere.errors import CorruptLog
from mere.log.actions import (
    Action,
    AddFile,
    AppTxn,
    Commit,
    DatabaseMeta,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
)
from mere.log.checkpoint import CheckpointData
from mere.log.keys import checkpoint_key, commit_key
from mere.names import name_key

_EMPTY: Mapping[str, AddFile] = MappingProxyType({})


@dataclass(frozen=True)
class TableState:
    """One table at one version: its metadata and its live data files by path."""

    meta: TableMeta
    files: Mapping[str, AddFile]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files.values())

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files.values())


@dataclass(frozen=True)
class DatabaseState:
    """Every table's metadata and live files, the app markers, at ``version``."""

    version: int
    timestamp: int  # commit timestamp of ``version``, ms since the epoch
    protocol: Protocol
    database: DatabaseMeta | None
    tables: Mapping[str, TableState]  # table id -> state
    names: Mapping[str, str]  # name_key(name) -> table id
    app_txns: Mapping[str, AppTxn]

    def table_by_name(self, name: str) -> TableState | None:
        table_id = self.names.get(name_key(name))
        return None if table_id is None else self.tables[table_id]

    def table_names(self) -> list[str]:
        return sorted(t.meta.name for t in self.tables.values())

    @property
    def properties(self) -> Mapping[str, str]:
        return self.database.properties if self.database else {}

    def apply(self, commit: Commit) -> DatabaseState:
        """The state after ``commit``, which must be version ``self.version + 1``."""
        if commit.version != self.version + 1:
            raise CorruptLog(
                commit_key(commit.version), f"applied on top of version {self.version}"
            )
        return self.apply_many([commit])

    def apply_many(self, commits: Sequence[Commit]) -> DatabaseState:
        """The state after consecutive commits, applied in one pass.

        Replaying commit by commit would copy a table's file map once per
        commit (quadratic in the log's length); one pass copies it once.
        """
        if not commits:
            return self
        expected = self.version + 1
        for commit in commits:
            if commit.version != expected:
                raise CorruptLog(
                    commit_key(commit.version), f"applied on top of version {expected - 1}"
                )
            expected += 1
        entries = ((commit_key(c.version), a) for c in commits for a in c.actions)
        last = commits[-1]
        return _apply(self, last.version, last.info.timestamp, entries)

    def live_actions(self) -> Iterator[Action]:
        """The actions that recreate this state (what a checkpoint stores)."""
        yield self.protocol
        if self.database is not None:
            yield self.database
        for table in self.tables.values():
            yield table.meta
            yield from table.files.values()
        yield from self.app_txns.values()

    @staticmethod
    def from_checkpoint(checkpoint: CheckpointData) -> DatabaseState:
        actions = checkpoint.actions
        protocols = [a for a in actions if isinstance(a, Protocol)]
        if len(protocols) != 1:
            raise CorruptLog(checkpoint_key(checkpoint.version), "needs exactly one protocol row")
        start = DatabaseState(-1, 0, protocols[0], None, {}, {}, {})
        key = checkpoint_key(checkpoint.version)
        return _apply(start, checkpoint.version, checkpoint.timestamp, ((key, a) for a in actions))

    @staticmethod
    def initial(commit: Commit) -> DatabaseState:
        """The state at version 0."""
        protocol = next((a for a in commit.actions if isinstance(a, Protocol)), None)
        if protocol is None or commit.version != 0:
            raise CorruptLog(commit_key(commit.version), "version 0 must carry a protocol action")
        start = DatabaseState(-1, 0, protocol, None, {}, {}, {})
        return start.apply(commit)


def _apply(
    state: DatabaseState,
    version: int,
    timestamp: int,
    entries: Iterable[tuple[str, Action]],
) -> DatabaseState:
    """Apply ``(file key, action)`` pairs in order; the key names the file in errors."""
    protocol, database = state.protocol, state.database
    tables = dict(state.tables)
    names = dict(state.names)
    app_txns: dict[str, AppTxn] | None = None
    files: dict[str, dict[str, AddFile]] = {}

    def table_files(table_id: str, key: str) -> dict[str, AddFile]:
        if table_id not in tables:
            raise CorruptLog(key, f"action on unknown table id {table_id}")
        if table_id not in files:
            files[table_id] = dict(tables[table_id].files)
        return files[table_id]

    for key, a in entries:
        if isinstance(a, AddFile):
            table_files(a.table_id, key)[a.path] = a
        elif isinstance(a, RemoveFile):
            table_files(a.table_id, key).pop(a.path, None)
        elif isinstance(a, TableMeta):
            owner = names.get(name_key(a.name))
            if owner is not None and owner != a.id:
                raise CorruptLog(key, f"two tables named {a.name!r}")
            old = tables.get(a.id)
            if old is not None and name_key(old.meta.name) != name_key(a.name):
                del names[name_key(old.meta.name)]
            names[name_key(a.name)] = a.id
            tables[a.id] = TableState(a, old.files if old else _EMPTY)
        elif isinstance(a, DropTable):
            dropped = tables.pop(a.table_id, None)
            if dropped is None:
                raise CorruptLog(key, f"drop of unknown table id {a.table_id}")
            names.pop(name_key(dropped.meta.name), None)
            files.pop(a.table_id, None)
        elif isinstance(a, AppTxn):
            if app_txns is None:
                app_txns = dict(state.app_txns)
            app_txns[a.app_id] = a
        elif isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, DatabaseMeta):
            database = a
    for table_id, live in files.items():
        if table_id in tables:
            tables[table_id] = replace(tables[table_id], files=MappingProxyType(live))
    return DatabaseState(
        version=version,
        timestamp=timestamp,
        protocol=protocol,
        database=database,
        tables=MappingProxyType(tables),
        names=MappingProxyType(names),
        app_txns=MappingProxyType(app_txns) if app_txns is not None else state.app_txns,
    )
