"""The state of the whole database at one version, built by replaying the log.

A :class:`DatabaseState` is immutable: applying a commit returns a new state
that shares every untouched table with the old one, so keeping a cached state
current costs work proportional to the new commits, not to the database. A
table's live files are columns (:class:`~mere.snapshot.files.LiveFiles`): a
commit's adds and removes are applied to them in bulk, and a checkpoint's
parts are read only when a table's files are first needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from types import MappingProxyType

import pyarrow as pa

from mere.errors import CorruptLog
from mere.log.actions import (
    ARROW_INLINE_FORMAT_VERSION,
    EXPORTS_FORMAT_VERSION,
    INLINE_FORMAT_VERSION,
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
from mere.log.checkpoint import CheckpointData, has_external_paths
from mere.log.columns import PATH, ROWS, SIZE, FileLayout
from mere.log.inlined import is_arrow_stream
from mere.log.keys import checkpoint_key, commit_key
from mere.names import name_key
from mere.snapshot.files import LiveFiles, PartsSource, Reload, TableSource, check_paths_of

_NO_EXPORTS: Mapping[str, Export] = MappingProxyType({})
#: Database property allowing absolute data paths (a minimal or partial export, §11.6).
EXTERNAL_FILES_PROPERTY = "mere.externalFiles"


@dataclass(frozen=True)
class TableState:
    """One table at one version: its metadata and its live data files by path.

    ``files`` is a :class:`LiveFiles` (columns, objects on demand) in every
    state the log builds; any other mapping (a transaction's own view) works
    too, and is turned into columns when :attr:`live` is first asked for.
    """

    meta: TableMeta
    files: Mapping[str, AddFile]

    @cached_property
    def live(self) -> LiveFiles:
        """The live files as columns."""
        if isinstance(self.files, LiveFiles):
            return self.files
        return LiveFiles.from_adds(self.meta, self.files.values())

    @property
    def rows(self) -> int:
        if isinstance(self.files, LiveFiles):
            return self.files.total(ROWS)
        return sum(f.rows for f in self.files.values())

    @property
    def size(self) -> int:
        if isinstance(self.files, LiveFiles):
            return self.files.total(SIZE)
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

        A table's files change once per call, in bulk: each path's last action
        in ``commits`` decides whether it is live.
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
        last = commits[-1]
        return _apply(self, last.version, last.info.timestamp, _entries(commits))

    def live_actions(self) -> Iterator[Action]:
        """The actions that recreate this state, data files as objects (slow for many files).

        A checkpoint takes :meth:`checkpoint_actions` and :meth:`checkpoint_files` instead.
        """
        yield from self.checkpoint_actions()
        for table in self.tables.values():
            yield from table.files.values()

    def checkpoint_actions(self) -> Iterator[Action]:
        """Every live action but the data files: what a checkpoint's manifest holds."""
        yield self.protocol
        if self.database is not None:
            yield self.database
        for table in self.tables.values():
            yield table.meta
        yield from self.app_txns.values()
        yield from self.exports.values()

    def checkpoint_files(self) -> dict[str, Iterator[pa.Table]]:
        """Each table's live files as columns, in bounded pieces: a checkpoint's parts."""
        return {table_id: table.live.pieces() for table_id, table in self.tables.items()}

    def confirm(self) -> DatabaseState:
        """Note that this state's version is committed (not a commit still racing to land).

        Each table's files then know they are current at this version: if the
        checkpoint they are read from is expired before they are read, they
        are read anew at it (see :meth:`LiveFiles.seen`). Returns the state.
        """
        for table in self.tables.values():
            if isinstance(table.files, LiveFiles):
                table.files.seen(self.version)
        return self

    @staticmethod
    def from_checkpoint(checkpoint: CheckpointData, reload: Reload | None = None) -> DatabaseState:
        """The state a checkpoint holds; the files of a columnar one are read when needed.

        ``reload`` reads a table's files anew at a version (for a checkpoint
        expired before its parts were read).
        """
        actions = checkpoint.actions
        key = checkpoint_key(checkpoint.version)
        protocols = [a for a in actions if isinstance(a, Protocol)]
        if len(protocols) != 1:
            raise CorruptLog(key, "needs exactly one protocol row")
        start = DatabaseState(-1, 0, protocols[0], None, {}, {}, {})
        state = _apply(start, checkpoint.version, checkpoint.timestamp, ((key, a) for a in actions))
        allow_external = _allows_external(state.protocol, state.database)
        tables = dict(state.tables)
        for table_id in set(checkpoint.files) | set(checkpoint.parts):
            table = tables.get(table_id)
            if table is None:
                raise CorruptLog(key, f"files of unknown table id {table_id}")
            layout = FileLayout.of(table.meta)
            source: TableSource | PartsSource
            if table_id in checkpoint.files:
                files = checkpoint.files[table_id]
                check_paths_of(files.column(PATH), allow_external, key)
                source = TableSource(layout, files)
            else:
                if checkpoint.fetch is None:
                    raise ValueError("a columnar checkpoint's parts need a way to fetch them")
                source = PartsSource(
                    layout,
                    checkpoint.parts[table_id],
                    checkpoint.fetch,
                    allow_external=allow_external,
                    origin=key,
                )
            files = LiveFiles(
                table_id, layout, source, version=checkpoint.version, reload=reload, meta=table.meta
            )
            tables[table_id] = TableState(table.meta, files)
        return replace(state, tables=MappingProxyType(tables))

    @staticmethod
    def initial(commit: Commit) -> DatabaseState:
        """The state at version 0."""
        protocol = next((a for a in commit.actions if isinstance(a, Protocol)), None)
        if protocol is None or commit.version != 0:
            raise CorruptLog(commit_key(commit.version), "version 0 must carry a protocol action")
        start = DatabaseState(-1, 0, protocol, None, {}, {}, {})
        return start.apply(commit)


def _entries(commits: Sequence[Commit]) -> Iterator[tuple[str, Action]]:
    """Each commit's actions with the name of its file (for errors), named once per commit."""
    for commit in commits:
        key = commit_key(commit.version)
        for action in commit.actions:
            yield key, action


class _Batch:
    """The file actions on one table in a batch: each path's last action wins."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[str, AddFile | None] = {}

    def add(self, add: AddFile) -> None:
        self.last.pop(add.path, None)  # re-added: it moves to the end
        self.last[add.path] = add

    def remove(self, path: str) -> None:
        self.last[path] = None

    def adds(self) -> list[AddFile]:
        return [a for a in self.last.values() if a is not None]


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
    batches: dict[str, _Batch] = {}

    def batch(table_id: str, key: str) -> _Batch:
        if table_id not in tables:
            raise CorruptLog(key, f"action on unknown table id {table_id}")
        found = batches.get(table_id)
        if found is None:
            found = batches[table_id] = _Batch()
        return found

    for key, a in entries:
        if isinstance(a, AddFile):
            if a.inline is not None:
                _check_inline(key, protocol, a.path, a.inline)
            elif is_external_path(a.path):
                _check_external(key, protocol, database, a.path)
            batch(a.table_id, key).add(a)
        elif isinstance(a, RemoveFile):
            batch(a.table_id, key).remove(a.path)
        elif isinstance(a, TableMeta):
            owner = names.get(name_key(a.name))
            if owner is not None and owner != a.id:
                raise CorruptLog(key, f"two tables named {a.name!r}")
            old = tables.get(a.id)
            if old is not None and old.meta.partition_columns != a.partition_columns:
                raise CorruptLog(
                    key,
                    f"table {a.name!r} changes its partition columns from "
                    f"{list(old.meta.partition_columns)} to {list(a.partition_columns)}",
                )
            if old is not None and name_key(old.meta.name) != name_key(a.name):
                del names[name_key(old.meta.name)]
            names[name_key(a.name)] = a.id
            files = old.live.with_meta(a, version) if old is not None else LiveFiles.empty(a)
            tables[a.id] = TableState(a, files)
        elif isinstance(a, DropTable):
            dropped = tables.pop(a.table_id, None)
            if dropped is None:
                raise CorruptLog(key, f"drop of unknown table id {a.table_id}")
            names.pop(name_key(dropped.meta.name), None)
            batches.pop(a.table_id, None)
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
            if a.format_version < protocol.format_version:
                raise CorruptLog(
                    key,
                    f"format version goes back from {protocol.format_version} to "
                    f"{a.format_version} (a database never goes back)",
                )
            protocol = a
        elif isinstance(a, DatabaseMeta):
            if (
                database is not None
                and database.properties.get(EXTERNAL_FILES_PROPERTY) == "true"
                and a.properties.get(EXTERNAL_FILES_PROPERTY) != "true"
                and _holds_external_files(tables, batches)
            ):
                raise CorruptLog(
                    key, f"{EXTERNAL_FILES_PROPERTY} removed while absolute data paths are live"
                )
            database = a
    for table_id, changes in batches.items():
        table = tables[table_id]
        files = table.live.apply(table.meta, changes.adds(), changes.last, version)
        tables[table_id] = TableState(table.meta, files)
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


def _allows_external(protocol: Protocol, database: DatabaseMeta | None) -> bool:
    return (
        protocol.format_version >= EXPORTS_FORMAT_VERSION
        and database is not None
        and database.properties.get(EXTERNAL_FILES_PROPERTY) == "true"
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


def _check_inline(key: str, protocol: Protocol, path: str, data: bytes) -> None:
    """Inlined data needs format version 3 (4 as an Arrow stream) and a relative path (§2.5)."""
    needs = ARROW_INLINE_FORMAT_VERSION if is_arrow_stream(data) else INLINE_FORMAT_VERSION
    if protocol.format_version < needs:
        raise CorruptLog(key, f"inlined data file {path!r} needs format version {needs}")
    if is_external_path(path):
        raise CorruptLog(key, f"inlined data file {path!r} has an absolute path")


def _holds_external_files(tables: Mapping[str, TableState], batches: Mapping[str, _Batch]) -> bool:
    for table_id, table in tables.items():
        changes = batches.get(table_id)
        if changes is not None:
            if any(a is not None and is_external_path(p) for p, a in changes.last.items()):
                return True
            touched = changes.last.keys()
            paths = [
                p for p in table.live.columns([PATH]).column(0).to_pylist() if p not in touched
            ]
            if any(is_external_path(p) for p in paths):
                return True
        elif has_external_paths(table.live.columns([PATH]).column(0)):
            return True
    return False
