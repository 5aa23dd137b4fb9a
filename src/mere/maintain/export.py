"""Export: a new, independent database whose version 0 is a chosen state of this one.

The target's version 0 is ONE commit holding the protocol, the database
metadata, every exported table's metadata (same table ids) and an ``add`` for
every live file, so the target starts with exactly the source's state at the
chosen version and with none of its history.

``mode="full"`` copies every data file the state references into the target
(create-only, under the same keys), before the commit is written: the target
is independent of the source and survives its deletion. A retried export
whose earlier attempt died accepts files it already copied (same key, same
size: keys are unique and immutable).

``mode="minimal"`` would reference the source's files by absolute URI instead
of copying them (docs/format.md §11); reading such paths needs a change in
the core reader, so it raises NotImplementedError for now.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from mere.errors import (
    AlreadyExists,
    ExportTargetExists,
    InvalidArgument,
    ObjectNotFound,
    TableNotFound,
)
from mere.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    DatabaseMeta,
    TableMeta,
)
from mere.log.log import Log
from mere.maintain.common import DataFileMissing
from mere.maintain.progress import progress
from mere.names import check_table_name
from mere.snapshot.state import DatabaseState
from mere.storage import ObjectStore, open_store
from mere.txn.committer import Committer

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

ExportMode = Literal["full", "minimal"]
#: Files copied concurrently.
COPY_THREADS = 8
#: Database property of a minimal export (data files referenced by absolute URI).
EXTERNAL_FILES_PROPERTY = "mere.externalFiles"


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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return asdict(self)


def export(
    db: DatabaseContext,
    target: str | os.PathLike[str] | ObjectStore,
    version: int | None = None,
    tables: Sequence[str] | None = None,
    mode: ExportMode = "full",
) -> ExportResult:
    """Create a database at ``target`` whose version 0 is this one's state at ``version``.

    Args:
        target: a URI or path (``open_store`` syntax) or an ObjectStore; must
            not hold a database yet.
        version: the source version (default: the latest).
        tables: the tables to export (default: all, with the application
            transaction markers).
        mode: ``"full"`` copies the data files; ``"minimal"`` is not built yet.

    Raises:
        NotImplementedError: ``mode="minimal"``.
        ExportTargetExists: the target already holds a database.
        TableNotFound: a named table does not exist at that version.
        VersionNotFound: the version does not exist or was expired.
    """
    if mode == "minimal":
        raise NotImplementedError(
            "export mode 'minimal' (referencing the source's data files by absolute URI) "
            "needs the core reader to accept absolute add paths in databases with the "
            f"property {EXTERNAL_FILES_PROPERTY}=true; use mode='full', which copies the files"
        )
    if mode != "full":
        raise InvalidArgument(f"mode must be 'full' or 'minimal', not {mode!r}")
    if isinstance(tables, str):
        raise TypeError("tables must be a list of table names, not a string")
    state = db.state_at(db.snapshot(version=version).version)
    chosen = _choose_tables(state, tables)
    store = target if isinstance(target, ObjectStore) else open_store(target)
    if store.uri == db.store.uri:
        raise InvalidArgument("cannot export a database onto itself")
    log = Log(store)
    if log.latest_version() is not None:
        raise ExportTargetExists(
            f"{store.uri} already holds a mere database", help="export to an empty location"
        )

    jobs = [(meta, add) for meta in chosen for add in state.tables[meta.id].files.values()]
    with progress("copying data files", len(jobs)) as advance:
        if jobs:
            with ThreadPoolExecutor(max_workers=min(COPY_THREADS, len(jobs))) as pool:
                for _ in pool.map(lambda job: _copy(db.store, store, job[0], job[1]), jobs):
                    advance(1)

    now = int(time.time() * 1000)
    adds = [add for _, add in jobs]
    properties = dict(state.properties)
    actions: list[Action] = [
        state.protocol,
        DatabaseMeta(uuid.uuid4().hex, properties, now),
        *chosen,
        *adds,
    ]
    if tables is None:
        actions += state.app_txns.values()
    names = [meta.name for meta in chosen]
    info = CommitInfo(
        commit_id=uuid.uuid4().hex,
        timestamp=now,
        read_version=None,
        isolation="serializable",
        operation="EXPORT",
        parameters={
            "source": db.uri,
            "sourceVersion": state.version,
            "mode": mode,
            "tables": names,
        },
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
    committer = Committer(log, lambda _: log.write_latest_hint(0), max_attempts=1)
    if committer.create(info, actions) is None:
        raise ExportTargetExists(
            f"a database was created at {store.uri} while exporting to it; "
            "the copied data files are orphans there"
        )
    return ExportResult(
        target=store.uri,
        source_version=state.version,
        mode=mode,
        tables=names,
        files=len(adds),
        bytes=sum(a.size for a in adds),
        rows=sum(a.rows for a in adds),
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
    key = meta.prefix + add.path
    try:
        data = source.get(key)
    except ObjectNotFound:
        raise DataFileMissing(
            f"data file {key} of table {meta.name!r} no longer exists (deleted by vacuum)"
        ) from None
    try:
        target.put_if_absent(key, data)
    except AlreadyExists:
        if target.head(key).size != len(data):
            raise ExportTargetExists(
                f"{target.uri} already holds a different object at {key}"
            ) from None
