"""Export: a new database whose version 0 is a chosen state of this one; named exports and tags.

The target's version 0 is ONE commit holding the protocol, the database
metadata, every exported table's metadata (same table ids) and an ``add`` for
every live file, so the target starts with exactly the source's state at the
chosen version and with none of its history (docs/format.md §11.5). Three
modes decide what happens to the data files:

* ``full`` copies every file into the target (create-only, under the same
  keys) before the commit is written: the target is independent of the source.
  A retried export whose earlier attempt died accepts files it already copied.
* ``minimal`` copies nothing: the target's adds name the source's files by
  absolute URI (``file:///...``, ``s3://...``; §11.6), read across stores.
* ``partial`` with ``since=S`` shares the files the source already had at
  version S (still live at the exported version) and copies the rest: the
  data added since S.

**Named exports.** With ``name=...`` the export is recorded in the source's
log (an ``export`` action, §11.8): ``exports()`` lists it,
``snapshot(version=name)`` reads the source at its version, and
``drop_export(name)`` ends it (a ``dropExport`` action). A minimal or partial
export needs a name, because while it is live the source's expiry keeps its
version readable and the source's vacuum keeps every file it shares; a full
export may have one (it keeps nothing: time travel by its name works while the
version is within the retention). A **tag** is the zero-copy case: a name for
a version, with no target, kept like a minimal export of every table.

**Registering safely.** The export is committed in the source *before* the
target references anything. A vacuum or expiry already running may not know
it: the exporter writes a checkpoint at an old version it keeps, then reads
the deletion marks (:func:`~mere.maintain.common.marked_deletion`) and waits
for those naming what it keeps to go, then checks that all of it still
exists; if not, it drops the export again and raises. A run marks each batch
before it reads the log, the exporter reads the marks after its commit, so
one of the two always sees the other (docs/format.md §11.9). A failure after
the registration drops it too, except when the target's commit has an
unknown outcome (then the export stays: drop it if the target does not
exist).
"""

from __future__ import annotations

import logging
import os
import re
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlparse

from mere.data.external import data_file_location, data_file_name
from mere.data.reader import decoded_inline
from mere.errors import (
    AlreadyExists,
    CommitOutcomeUnknown,
    CorruptDataFile,
    ExportTargetExists,
    InvalidArgument,
    InvalidName,
    MereError,
    ObjectNotFound,
    ProtocolChanged,
    TableNotFound,
)
from mere.log.actions import (
    BASE_FORMAT_VERSION,
    EXPORTS_FORMAT_VERSION,
    INLINE_FORMAT_VERSION,
    Action,
    AddFile,
    CommitInfo,
    DatabaseMeta,
    DropExport,
    Export,
    Protocol,
    TableMeta,
    external_location,
    is_external_path,
)
from mere.log.keys import checkpoint_key, parse_checkpoint_part_key, parse_log_key
from mere.log.log import Log
from mere.maintain import common
from mere.maintain.checkpoint import write_checkpoint
from mere.maintain.common import (
    DataFileMissing,
    Mark,
    VersionNotFound,
    await_marks,
    shared_files,
)
from mere.maintain.progress import progress
from mere.names import check_table_name, name_key
from mere.properties import inline_limit
from mere.snapshot.state import EXTERNAL_FILES_PROPERTY, DatabaseState
from mere.storage import ObjectStore, open_store
from mere.txn.committer import DEFAULT_MAX_COMMIT_ATTEMPTS, Committer
from mere.txn.conflicts import TxFootprint

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

log = logging.getLogger("mere.maintain")

ExportMode = Literal["full", "partial", "minimal"]
MODES = ("full", "partial", "minimal")
#: Files copied (or checked) concurrently.
COPY_THREADS = 8
#: How often a registration is retried after a concurrent format upgrade.
REGISTER_ATTEMPTS = 5
#: Above this many files to check in one table, list its prefix instead of one HEAD each.
HEAD_LIMIT = 100
#: What a name of an export or tag may be: like a table name, hyphens allowed.
MAX_EXPORT_NAME = 128
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


class ExportExists(InvalidArgument):
    """A live export or tag already has that name (names ignore case); nothing was changed."""


class ExportNotFound(VersionNotFound):
    """No live export or tag has that name."""


@dataclass
class ExportResult:
    """What an export wrote."""

    target: str
    source_version: int
    mode: str
    tables: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0
    rows: int = 0
    #: The name it is recorded under in the source (None: not recorded).
    name: str | None = None
    #: The source version that records it.
    registered_version: int | None = None
    #: A partial export's version: files the source had then are shared.
    since: int | None = None
    files_copied: int = 0
    files_referenced: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


@dataclass(frozen=True)
class ExportInfo:
    """A live named export or tag, as ``db.exports()`` lists it."""

    name: str
    version: int
    mode: str  # full, partial, minimal or tag
    target: str | None
    tables: list[str] | None  # None: every table
    since: int | None
    created_time: int  # ms since the epoch
    #: Whether it keeps its version and shared files from expiry and vacuum.
    keeps: bool

    @staticmethod
    def of(export: Export) -> ExportInfo:
        return ExportInfo(
            name=export.name,
            version=export.version,
            mode=export.mode,
            target=export.target,
            tables=None if export.tables is None else list(export.tables),
            since=export.since,
            created_time=export.created_time,
            keeps=export.protects,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_export_name(name: object) -> str:
    """Return ``name`` if it may name an export or tag, else raise InvalidName.

    Like a table name (letters, digits and underscores, not starting with a
    digit, at most 128 characters), hyphens allowed: ``q3-close``. Names are
    unique among live exports and tags ignoring case.
    """
    if not isinstance(name, str):
        raise InvalidName(f"an export name must be a string, not {type(name).__name__}")
    if not name or len(name) > MAX_EXPORT_NAME or not _NAME.match(name):
        raise InvalidName(
            f"invalid export name {name!r}: use letters, digits, underscores and hyphens, "
            f"not starting with a digit or hyphen, at most {MAX_EXPORT_NAME} characters"
        )
    return name


# --- export ----------------------------------------------------------------------------


def export(
    db: DatabaseContext,
    target: str | os.PathLike[str] | ObjectStore,
    version: int | str | None = None,
    tables: Sequence[str] | None = None,
    mode: ExportMode = "full",
    *,
    name: str | None = None,
    since: int | str | None = None,
) -> ExportResult:
    """Create a database at ``target`` whose version 0 is this one's state at ``version``.

    Args:
        target: a URI or path (``open_store`` syntax) or an ObjectStore; must
            not hold a database yet, nor be the source, inside it or around it.
        version: the source version, or the name of an export or tag (default: the latest).
        tables: the tables to export (default: all, with the application
            transaction markers).
        mode: ``"full"`` copies the data files; ``"minimal"`` references the
            source's; ``"partial"`` references those the source had at
            ``since`` and copies the rest.
        name: record the export in the source under this name (required for
            ``minimal`` and ``partial``, whose shared files the source then keeps).
        since: for ``partial``: a version (or export or tag name) at or before ``version``.

    Raises:
        InvalidArgument: a bad mode, name, ``since``, or target (the source itself), or
            ``tables`` given as one string.
        ExportExists: a live export or tag already has ``name``.
        ExportTargetExists: the target already holds a database.
        TableNotFound: a named table does not exist at that version.
        VersionNotFound: the version does not exist or was expired.
        DataFileMissing: a file of that version was deleted by vacuum.
    """
    if mode not in MODES:
        raise InvalidArgument(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    if isinstance(tables, str):
        raise InvalidArgument("tables must be a list of table names, not a string")
    if name is not None:
        check_export_name(name)
    elif mode != "full":
        raise InvalidArgument(
            f"a {mode} export needs a name: it is recorded in the source under it, and the "
            "source keeps the files it shares until drop_export(name)",
            help="pass name=... (CLI: --name), or mode='full' to copy every file",
        )
    if (since is None) != (mode != "partial"):
        raise InvalidArgument(
            "a partial export needs since=VERSION (the files the source had then are shared, "
            "later ones copied)"
            if mode == "partial"
            else f"since= only applies to partial exports, not {mode}"
        )
    located, target_uri = locate_target(target, db.store.uri)
    if located is not None and Log(located).latest_version() is not None:
        raise ExportTargetExists(
            f"{target_uri} already holds a mere database", help="export to an empty location"
        )
    state = db.state_at(db.snapshot(version=version).version)
    since_state: DatabaseState | None = None
    if since is not None:
        since_state = db.state_at(db.snapshot(version=since).version)
        if since_state.version > state.version:
            raise InvalidArgument(
                f"since ({since_state.version}) must be at or before the exported version "
                f"({state.version})"
            )
    chosen = _choose_tables(state, tables)
    all_files = [(meta, add) for meta in chosen for add in state.tables[meta.id].files.values()]
    shared: list[tuple[TableMeta, AddFile]] = []
    if mode != "full":
        foreign = next((job for job in all_files if is_external_path(job[1].path)), None)
        if foreign is not None:
            raise InvalidArgument(
                f"version {state.version} holds files of another database "
                f"({data_file_name(*foreign)}): it is itself a minimal or partial export, "
                f"whose files its own source keeps; export it with mode='full'"
            )
        shared = shared_files(state, since_state, chosen)
    shared_keys = {(meta.id, add.path) for meta, add in shared}
    copied = [job for job in all_files if (job[0].id, job[1].path) not in shared_keys]
    to_copy = [job for job in copied if job[1].inline is None]  # inlined: in the target's log
    for meta, add in copied:  # a target never starts with what its readers would reject
        if add.inline is not None:
            decoded_inline(meta, add)

    action: Export | None = None
    registered: int | None = None
    if name is not None:
        action = Export(
            name=name,
            version=state.version,
            mode=mode,
            target=target_uri,
            tables=None if tables is None else tuple(m.name for m in chosen),
            since=None if since_state is None else since_state.version,
            created_time=int(time.time() * 1000),
        )
        registered = _register_and_secure(db, action, state, since_state, shared)
    store = located
    try:
        if store is None:
            assert not isinstance(target, ObjectStore)
            store = open_store(target)  # a local directory, created only now
        with progress("copying data files", len(to_copy)) as advance:
            if to_copy:
                with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(to_copy))) as pool:
                    for _ in pool.map(lambda job: _copy(db.store, store, job[0], job[1]), to_copy):
                        advance(1)
        _create_target(db, store, state, chosen, copied, shared, mode, tables is None, action)
    except CommitOutcomeUnknown as exc:
        if action is not None:
            exc.help = (
                f"export {action.name!r} stays recorded in the source, keeping its files; "
                f"if {target_uri} holds no database, drop it with drop_export({action.name!r})"
            )
        raise
    except Exception:
        if action is not None:
            _unregister(db, action)
        raise
    adds = [add for _, add in all_files]
    return ExportResult(
        target=target_uri,
        source_version=state.version,
        mode=mode,
        tables=[meta.name for meta in chosen],
        files=len(adds),
        bytes=sum(a.size for a in adds),
        rows=sum(a.rows for a in adds),
        name=name,
        registered_version=registered,
        since=None if since_state is None else since_state.version,
        files_copied=len(copied),
        files_referenced=len(shared),
    )


def _create_target(
    db: DatabaseContext,
    store: ObjectStore,
    state: DatabaseState,
    chosen: list[TableMeta],
    copied: list[tuple[TableMeta, AddFile]],
    shared: list[tuple[TableMeta, AddFile]],
    mode: str,
    every_table: bool,
    action: Export | None,
) -> None:
    """Write the target's version 0 (the data files it copies are there already)."""
    now = int(time.time() * 1000)
    properties = dict(state.properties)
    properties.pop(EXTERNAL_FILES_PROPERTY, None)
    fmt = BASE_FORMAT_VERSION
    if shared:
        properties[EXTERNAL_FILES_PROPERTY] = "true"
        fmt = EXPORTS_FORMAT_VERSION
    if inline_limit(properties) or any(add.inline is not None for _, add in copied):
        # The target inlines as its source did (as Parquet, or from format 4 as Arrow).
        fmt = max(INLINE_FORMAT_VERSION, state.protocol.format_version)
    adds = [replace(add, path=_relative_path(meta, add)) for meta, add in copied]
    adds += [replace(add, path=_absolute_path(db.store, meta, add)) for meta, add in shared]
    actions: list[Action] = [
        Protocol(fmt),
        DatabaseMeta(uuid.uuid4().hex, properties, now),
        *chosen,
        *adds,
    ]
    if every_table:
        actions += state.app_txns.values()
    names = [meta.name for meta in chosen]
    parameters: dict[str, Any] = {
        "source": db.uri,
        "sourceVersion": state.version,
        "mode": mode,
        "tables": names,
    }
    if action is not None:
        parameters["name"] = action.name
        if action.since is not None:
            parameters["since"] = action.since
    info = CommitInfo(
        commit_id=uuid.uuid4().hex,
        timestamp=now,
        read_version=None,
        isolation="serializable",
        operation="EXPORT",
        parameters=parameters,
        metrics={
            "numAddedFiles": len(adds),
            "numAddedRows": sum(a.rows for a in adds),
            "numAddedBytes": sum(a.size for a in adds),
            "numRemovedFiles": 0,
            "numRemovedRows": 0,
            "numRemovedBytes": 0,
            "tables": sorted(names),
        },
        engine="mere",
    )
    target_log = Log(store)
    committer = Committer(target_log, lambda _: target_log.write_latest_hint(0), max_attempts=1)
    if committer.create(info, actions) is None:
        raise ExportTargetExists(
            f"a database was created at {store.uri} while exporting to it; "
            "the copied data files are orphans there"
        )


def _absolute_path(source: ObjectStore, meta: TableMeta, add: AddFile) -> str:
    """The absolute URI of a source data file, as a target's ``add.path`` (§11.6)."""
    return f"{source.uri}/{meta.prefix}{add.path}"


def _relative_path(meta: TableMeta, add: AddFile) -> str:
    """The path under the table's prefix a copied file gets in the target."""
    if not is_external_path(add.path):
        return add.path
    _, key = external_location(meta.id, add.path)
    return key[len(meta.prefix) :]


def locate_target(
    target: str | os.PathLike[str] | ObjectStore, source_uri: str
) -> tuple[ObjectStore | None, str]:
    """(the target store, or None for a local directory not created yet; the target's URI).

    The source itself, or a location inside or around it, is refused; nothing
    is created here, so a refused export leaves no directory behind.
    """
    if isinstance(target, ObjectStore):
        _check_apart(target.uri, source_uri)
        return target, target.uri
    try:
        store = open_store(target, create=False)
    except ObjectNotFound:
        text = os.fspath(target)
        parsed = urlparse(text)
        path = unquote(parsed.path) if parsed.scheme.lower() == "file" else text
        uri = Path(os.path.abspath(path)).as_uri()
        _check_apart(uri, source_uri)
        return None, uri
    _check_apart(store.uri, source_uri)
    return store, store.uri


def _check_apart(target_uri: str, source_uri: str) -> None:
    if target_uri.rstrip("/") == source_uri.rstrip("/"):
        raise InvalidArgument(f"cannot export a database onto itself ({source_uri})")
    inside = target_uri.startswith(source_uri.rstrip("/") + "/")
    if inside or source_uri.startswith(target_uri.rstrip("/") + "/"):
        raise InvalidArgument(
            f"cannot export {source_uri} to {target_uri}: one would lie inside the other",
            help="export to a location outside the source database",
        )


def _choose_tables(state: DatabaseState, tables: Sequence[str] | None) -> list[TableMeta]:
    if tables is None:
        return sorted((t.meta for t in state.tables.values()), key=lambda m: m.name)
    chosen: dict[str, TableMeta] = {}
    for name in tables:
        table = state.table_by_name(check_table_name(name))
        if table is None:
            raise TableNotFound(name, state.version)
        chosen[table.meta.id] = table.meta
    return list(chosen.values())


def _copy(source: ObjectStore, target: ObjectStore, meta: TableMeta, add: AddFile) -> None:
    """Copy one data file create-only; an identical leftover of an earlier attempt is fine."""
    holder, key = data_file_location(source, meta, add)
    try:
        data = holder.get(key)
    except ObjectNotFound:
        raise DataFileMissing(
            f"data file {data_file_name(meta, add)} of table {meta.name!r} no longer exists "
            "(deleted by vacuum)"
        ) from None
    if len(data) != add.size:  # changed after it was written: not passed on
        reason = f"it is {len(data):,} bytes; the log records {add.size:,}"
        raise CorruptDataFile.of(data_file_name(meta, add), meta.name, reason=reason)
    target_key = meta.prefix + _relative_path(meta, add)
    try:
        target.put_if_absent(target_key, data)
    except AlreadyExists:
        if target.head(target_key).size != len(data):
            raise ExportTargetExists(
                f"{target.uri} already holds a different object at {target_key}"
            ) from None


# --- tags, listing, dropping, names -------------------------------------------------------


def tag(db: DatabaseContext, name: str, version: int | str | None = None) -> ExportInfo:
    """Name a version of the database and keep it, and every file it reads, until dropped.

    Args:
        name: the tag's name (as an export name; unique among exports and tags).
        version: the version, or an export or tag name (default: the latest).

    Raises:
        InvalidName: a bad name. ExportExists: the name is taken.
        VersionNotFound: the version does not exist or was expired.
        DataFileMissing: a file of that version was deleted by vacuum.
    """
    check_export_name(name)
    state = db.state_at(db.snapshot(version=version).version)
    action = Export(name, state.version, "tag", None, None, None, int(time.time() * 1000))
    tables = sorted((t.meta for t in state.tables.values()), key=lambda m: m.name)
    _register_and_secure(db, action, state, None, shared_files(state, None, tables))
    return ExportInfo.of(action)


def list_exports(db: DatabaseContext) -> list[ExportInfo]:
    """The live named exports and tags at the latest version, by name."""
    exports = db.latest_state().exports.values()
    return [ExportInfo.of(e) for e in sorted(exports, key=lambda e: name_key(e.name))]


def drop_export(db: DatabaseContext, name: str, *, tag_only: bool = False) -> int:
    """End a named export or tag; return the version that records it.

    What it kept is then expired and vacuumed like anything else (a minimal
    export's target can no longer read the files vacuum deletes).

    Raises:
        InvalidName: a bad name.
        ExportNotFound: no live export or tag has that name.
        InvalidArgument: ``tag_only`` and the name is an export.
    """
    check_export_name(name)
    found = find_export(db.latest_state(), name)
    if tag_only and found.mode != "tag":
        raise InvalidArgument(
            f"{found.name!r} is a {found.mode} export, not a tag",
            help="drop it with drop_export (CLI: mere drop-export)",
        )

    def check(base: DatabaseState) -> None:
        if base.export_by_name(name) != found:
            raise ExportNotFound(f"export {found.name!r} was dropped by a concurrent commit")

    operation = "DROP TAG" if found.mode == "tag" else "DROP EXPORT"
    return _commit(db, [DropExport(found.name)], operation, {"name": found.name}, check)


def resolve_named_version(db: DatabaseContext, name: str) -> int:
    """The version a live export or tag named ``name`` is at (for time travel by name).

    Raises:
        ExportNotFound: no live export or tag has that name.
    """
    return find_export(db.latest_state(), name).version


def find_export(state: DatabaseState, name: str) -> Export:
    """The live export or tag named ``name`` in ``state`` (names ignore case).

    Raises:
        ExportNotFound: none has that name (the error lists those that exist).
    """
    found = state.export_by_name(name) if isinstance(name, str) else None
    if found is not None:
        return found
    names = sorted(e.name for e in state.exports.values())
    known = ", ".join(repr(n) for n in names[:10]) + (", ..." if len(names) > 10 else "")
    hint = f"the exports and tags are {known}" if names else "this database has no export or tag"
    if isinstance(name, str) and name.isdigit():
        hint += f"; to read version {name}, pass the int {name}"
    raise ExportNotFound(f"no export or tag named {name!r} at version {state.version}", help=hint)


# --- registering in the source --------------------------------------------------------------


def _register_and_secure(
    db: DatabaseContext,
    action: Export,
    state: DatabaseState,
    since: DatabaseState | None,
    shared: list[tuple[TableMeta, AddFile]],
) -> int:
    """Commit ``action`` in the source and make sure what it keeps is there; return its version."""
    _check_name_free(db.latest_state(), action.name)
    _check_present(db, _at_risk(db.latest_state(), shared))  # before changing anything

    def check(base: DatabaseState) -> None:
        _check_name_free(base, action.name)

    operation = "CREATE TAG" if action.mode == "tag" else "CREATE EXPORT"
    parameters = {
        k: v for k, v in asdict(ExportInfo.of(action)).items() if k not in ("created_time", "keeps")
    }
    registered = _commit(db, [action], operation, parameters, check)
    if not action.protects:
        return registered
    try:
        _secure(db, action, [s for s in (state, since) if s is not None], shared, registered)
    except Exception:
        _unregister(db, action)
        raise
    return registered


def _secure(
    db: DatabaseContext,
    action: Export,
    states: list[DatabaseState],
    shared: list[tuple[TableMeta, AddFile]],
    registered: int,
) -> None:
    """After the registration at ``registered``: check that what ``action`` keeps exists.

    A vacuum or expiry that started before the registration keeps the latest
    version's files and every version from the one before the registration
    on; only older versions (a checkpoint is written there) and the shared
    files could be deleted by a run that has not seen the export. Every batch
    of deletions is marked before its run reads the log (docs/format.md
    §11.9), and the registration is committed before the marks are read here:
    so a batch that missed the export is marked now, or has ended. Waiting for
    the marks that name what the export keeps to go, then checking that all
    of it still exists, leaves nothing to chance; batches marked later see the
    export and spare it.
    """
    versions = set()
    for state in states:
        if state.version < registered - 1:
            write_checkpoint(db, state)  # create-only: an existing one is kept
            versions.add(state.version)
    keys = {meta.prefix + add.path for meta, add in shared}

    def touches(mark: Mark) -> bool:
        return any(key in keys or _log_version(key) in versions for key in mark.keys)

    try:
        await_marks(db, touches, common.MARK_WAIT_SECONDS)
    except TimeoutError as exc:
        error = VersionNotFound if "expire" in str(exc) else DataFileMissing
        raise error(
            f"export {action.name!r} needs what a running vacuum or expiry is deleting: {exc}; "
            "the export was dropped again",
            help="retry when that run has ended (the mark of a killed run is removed by the "
            "next vacuum once older than the minimum retention)",
        ) from None
    for version in sorted(versions):
        if not db.store.exists(checkpoint_key(version)):
            raise VersionNotFound(
                f"version {version} was expired while export {action.name!r} was being "
                "recorded; the export was dropped again"
            )
    # Every shared file, not only those no longer live: a file vacuum deleted as an
    # orphan before its commit landed (a retention shorter than a transaction) or
    # before a restore re-added it is live and gone, and must not be exported.
    _check_present(db, [job for job in shared if not is_external_path(job[1].path)])


def _log_version(key: str) -> int | None:
    """The version of a checkpoint or checkpoint part key (None for any other key)."""
    parsed = parse_log_key(key)
    if parsed is not None:
        return parsed[0] if parsed[1] == "checkpoint" else None
    return parse_checkpoint_part_key(key)


def _at_risk(
    latest: DatabaseState, shared: list[tuple[TableMeta, AddFile]]
) -> list[tuple[TableMeta, AddFile]]:
    """The files of ``shared`` not live at ``latest`` (vacuum keeps live files anyway).

    Files of another database (a tag of an export's target) are not at risk
    here: this database's vacuum never deletes them.
    """
    risky = []
    for meta, add in shared:
        if is_external_path(add.path):
            continue
        table = latest.tables.get(meta.id)
        if table is None or add.path not in table.files:
            risky.append((meta, add))
    return risky


def _check_present(db: DatabaseContext, files: list[tuple[TableMeta, AddFile]]) -> None:
    """Raise DataFileMissing naming the first of ``files`` that does not exist."""
    by_table: dict[str, list[tuple[TableMeta, AddFile]]] = {}
    for meta, add in files:
        by_table.setdefault(meta.id, []).append((meta, add))
    missing: list[tuple[TableMeta, AddFile]] = []
    for jobs in by_table.values():
        if len(jobs) > HEAD_LIMIT:
            present = {m.key for m in db.store.list(jobs[0][0].prefix)}
            missing += [job for job in jobs if job[0].prefix + job[1].path not in present]
            continue

        def absent(job: tuple[TableMeta, AddFile]) -> bool:
            return not db.store.exists(job[0].prefix + job[1].path)

        with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(jobs))) as pool:
            missing += [job for job, gone in zip(jobs, pool.map(absent, jobs), strict=True) if gone]
    if missing:
        meta, add = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DataFileMissing(
            f"data file {data_file_name(meta, add)}{more} of table {meta.name!r} no longer "
            "exists (deleted by vacuum): the version cannot be exported or tagged",
            help="export or tag a version within the vacuum retention",
        )


def _check_name_free(state: DatabaseState, name: str) -> None:
    existing = state.export_by_name(name)
    if existing is not None:
        what = "tag" if existing.mode == "tag" else f"{existing.mode} export"
        raise ExportExists(
            f"the name {name!r} is taken: {existing.name!r} is a {what} of version "
            f"{existing.version}",
            help="choose another name, or drop the existing one first",
        )


def _unregister(db: DatabaseContext, action: Export) -> None:
    """Best effort: drop an export this call registered and could not complete."""

    def check(base: DatabaseState) -> None:
        if base.export_by_name(action.name) != action:
            raise ExportNotFound(f"export {action.name!r} is gone already")

    operation = "DROP TAG" if action.mode == "tag" else "DROP EXPORT"
    try:
        _commit(db, [DropExport(action.name)], operation, {"name": action.name}, check)
    except MereError as exc:
        log.warning("could not drop the unfinished export %r again: %s", action.name, exc)


def _commit(
    db: DatabaseContext,
    actions: list[Action],
    operation: str,
    parameters: dict[str, Any],
    check: Callable[[DatabaseState], None],
) -> int:
    """Commit export actions on the latest version; ``check`` vets every base tried.

    The first export of a database upgrades it to format version 2 in the same
    commit (a ``protocol`` action: docs/format.md §2.2). Concurrent commits
    never conflict with these actions (the footprint is empty) except a
    concurrent upgrade, after which the commit is rebuilt without its own.
    """
    for attempt in range(1, REGISTER_ATTEMPTS + 1):
        base = db.latest_state()
        check(base)
        staged = list(actions)
        if base.protocol.format_version < EXPORTS_FORMAT_VERSION:
            staged.insert(0, Protocol(EXPORTS_FORMAT_VERSION))

        def describe(
            commit_id: str,
            current: DatabaseState,
            _: Sequence[Action],
            timestamp: int,
            read: int = base.version,
        ) -> CommitInfo:
            check(current)
            return CommitInfo(
                commit_id=commit_id,
                timestamp=timestamp,
                read_version=read,
                isolation="snapshot",
                operation=operation,
                parameters=parameters,
                metrics={
                    "numAddedFiles": 0,
                    "numAddedRows": 0,
                    "numAddedBytes": 0,
                    "numRemovedFiles": 0,
                    "numRemovedRows": 0,
                    "numRemovedBytes": 0,
                    "tables": [],
                },
                engine="mere",
            )

        committer = Committer(db.log, db.after_commit, max_attempts=DEFAULT_MAX_COMMIT_ATTEMPTS)
        try:
            committed = committer.commit(
                base, staged, TxFootprint("snapshot"), describe, began=time.monotonic()
            )
        except ProtocolChanged:
            if attempt == REGISTER_ATTEMPTS:
                raise
            continue
        return committed.version
    raise AssertionError("unreachable")
