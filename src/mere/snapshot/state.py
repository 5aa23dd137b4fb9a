"""The state of the whole database at one version, built by replaying the log.

A :class:`DatabaseState` is immutable: applying a commit returns a new state
that shares every untouched table with the old one, so keeping a cached state
current costs work proportional to the new commits, not to the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from mere.errors import CorruptLog
from mere.log.actions import (
    EXPORTS_FORMAT_VERSION,
    Action,
    AddFile,
    AppTxn,
    Commit,
    DatabaseMeta,
    DropExport,
    DropTable,
    Export,
    Protocol,
    RemoveFile,
    TableMeta,
    is_external_path,
)
from mere.log.checkpoint import CheckpointData
from mere.log.keys import checkpoint_key, commit_key
from mere.names import name_key

_EMPTY: Mapping[str, AddFile] = MappingProxyType({})
_NO_EXPORTS: Mapping[str, Export] = MappingProxyType({})
#: Database property allowing absolute data paths (a minimal or partial export, §11.6).
EXTERNAL_FILES_PROPERTY = "mere.externalFiles"


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
    #: Live named exports and tags: name_key(name) -> the export action.
    exports: Mapping[str, Export] = field(default_factory=lambda: _NO_EXPORTS)

    def export_by_name(self, name: str) -> Export | None:
        """The live export or tag named ``name`` (ignoring case), if any."""
        return self.exports.get(name_key(name))

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
        yield from self.exports.values()

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
    exports: dict[str, Export] | None = None
    files: dict[str, dict[str, AddFile]] = {}

    def table_files(table_id: str, key: str) -> dict[str, AddFile]:
        if table_id not in tables:
            raise CorruptLog(key, f"action on unknown table id {table_id}")
        if table_id not in files:
            files[table_id] = dict(tables[table_id].files)
        return files[table_id]

    for key, a in entries:
        if isinstance(a, AddFile):
            if is_external_path(a.path):
                _check_external(key, protocol, database, a.path)
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
        elif isinstance(a, Export | DropExport):
            if protocol.format_version < EXPORTS_FORMAT_VERSION:
                raise CorruptLog(
                    key, f"a named export needs format version {EXPORTS_FORMAT_VERSION} or newer"
                )
            if exports is None:
                exports = dict(state.exports)
            if isinstance(a, DropExport):
                if exports.pop(name_key(a.name), None) is None:
                    raise CorruptLog(key, f"drop of unknown export {a.name!r}")
                continue
            if name_key(a.name) in exports:
                raise CorruptLog(key, f"two exports named {a.name!r}")
            if a.version >= version:
                raise CorruptLog(
                    key, f"export {a.name!r} of version {a.version}, not yet committed"
                )
            exports[name_key(a.name)] = a
        elif isinstance(a, Protocol):
            protocol = a
        elif isinstance(a, DatabaseMeta):
            if (
                database is not None
                and database.properties.get(EXTERNAL_FILES_PROPERTY) == "true"
                and a.properties.get(EXTERNAL_FILES_PROPERTY) != "true"
                and _holds_external_files(tables, files)
            ):
                raise CorruptLog(
                    key, f"{EXTERNAL_FILES_PROPERTY} removed while absolute data paths are live"
                )
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
        exports=MappingProxyType(exports) if exports is not None else state.exports,
    )


def _check_external(key: str, protocol: Protocol, database: DatabaseMeta | None, path: str) -> None:
    """An absolute data path is valid only where the database allows them (§11.6)."""
    if protocol.format_version < EXPORTS_FORMAT_VERSION:
        raise CorruptLog(
            key, f"absolute data path {path!r} needs format version {EXPORTS_FORMAT_VERSION}"
        )
    if database is None or database.properties.get(EXTERNAL_FILES_PROPERTY) != "true":
        raise CorruptLog(
            key, f"absolute data path {path!r} in a database without {EXTERNAL_FILES_PROPERTY}=true"
        )


def _holds_external_files(
    tables: Mapping[str, TableState], files: Mapping[str, Mapping[str, AddFile]]
) -> bool:
    for table_id, table in tables.items():
        live = files.get(table_id, table.files)
        if any(is_external_path(path) for path in live):
            return True
    return False
