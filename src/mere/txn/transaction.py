"""Optimistic transactions over the whole database.

A transaction pins a snapshot when it begins. Its reads see that snapshot
plus its own writes; its data files are written as it goes, under fresh
names nobody references. ``commit`` publishes everything at once by creating
the next log version. On losing that race it reads the commits it missed,
checks them against its footprint (:mod:`mere.txn.conflicts`), and either
rebases and retries at the next version or raises a ConflictError naming the
winning version, the table and the reason.
"""

from __future__ import annotations

import logging
import random
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from mere.constraints import enforce
from mere.data.writer import DEFAULT_TARGET_FILE_SIZE, DataFileWriter
from mere.errors import (
    CommitOutcomeUnknown,
    InvalidName,
    MereError,
    RetriesExhausted,
    SchemaMismatch,
    TableExists,
    TableNotFound,
    TransactionClosed,
)
from mere.log.actions import (
    ISOLATION_LEVELS,
    Action,
    AddFile,
    AppTxn,
    Commit,
    CommitInfo,
    DropTable,
    RemoveFile,
    TableMeta,
    encode_commit,
)
from mere.log.log import PutOutcome
from mere.names import check_table_name, name_key
from mere.properties import check_database_properties
from mere.schema import conform, merge_schema, normalize_schema, to_arrow_table
from mere.snapshot.scan import ScanPlan, plan_scan, scan_batches, scan_files
from mere.snapshot.snapshot import describe_table
from mere.snapshot.state import DatabaseState, TableState
from mere.txn.conflicts import ReadRecord, TxFootprint, check_winner

if TYPE_CHECKING:
    from mere.database import Database
    from mere.ops.alter import AlterTable
    from mere.ops.merge import TableMerger

log = logging.getLogger("mere.txn")

Isolation = Literal["snapshot", "write_serializable", "serializable"]
SchemaMode = Literal["strict", "merge"]
DEFAULT_ISOLATION: Isolation = "write_serializable"
DEFAULT_MAX_COMMIT_ATTEMPTS = 100
#: A transaction older than this moves to the latest version before its first commit try.
STALE_SNAPSHOT_SECONDS = 60.0
_BACKOFF_BASE = 0.002
_TABLE_ID = re.compile(r"[0-9a-f]{32}\Z")
_BACKOFF_CAP = 0.25


class Transaction:
    """A unit of work over any number of tables, committed atomically.

    Use it as a context manager (commits on normal exit, aborts on an
    exception) or call :meth:`commit` / :meth:`abort` yourself::

        with db.transaction(isolation="serializable") as tx:
            tx.table("orders").append(rows)
            tx.table("lineitem").append(items)
    """

    def __init__(
        self,
        db: Database,
        state: DatabaseState,
        isolation: Isolation = DEFAULT_ISOLATION,
        *,
        max_commit_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> None:
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, not {isolation!r}")
        if max_commit_attempts < 1:
            raise ValueError("max_commit_attempts must be at least 1")
        self._db = db
        self._state = state
        self.isolation: Isolation = isolation
        self.max_commit_attempts = max_commit_attempts
        self.target_file_size = target_file_size
        self._footprint = TxFootprint(isolation)
        self._metadata: dict[str, TableMeta] = {}  # table id -> new metadata (created or altered)
        self._created: set[str] = set()  # ids created by this transaction
        self._drops: dict[str, DropTable] = {}
        self._removes: dict[str, dict[str, RemoveFile]] = {}
        self._writers: dict[str, DataFileWriter] = {}
        self._adds: dict[str, list[AddFile]] = {}
        self._app_txns: dict[str, AppTxn] = {}
        self._database_properties: dict[str, str] | None = None  # new properties, when set
        self._operations: list[dict[str, Any]] = []
        self._status: Literal["open", "committed", "aborted"] = "open"
        self._rewrites = False  # set by any operation other than a plain append
        self._began = time.monotonic()
        self.commit_version: int | None = None

    # --- introspection ---------------------------------------------------------

    @property
    def read_version(self) -> int:
        """The version of the snapshot this transaction reads."""
        return self._state.version

    @property
    def status(self) -> str:
        return self._status

    def _check_open(self) -> None:
        if self._status != "open":
            raise TransactionClosed(f"the transaction is already {self._status}")

    # --- the namespace, as this transaction sees it --------------------------------

    def _lookup(self, name: str) -> TableMeta | None:
        """The table named ``name`` as this transaction sees it (read-your-writes)."""
        key = name_key(check_table_name(name))
        self._footprint.looked_up.add(key)
        for table_id, meta in self._metadata.items():
            if name_key(meta.name) == key and table_id not in self._drops:
                return meta
        state = self._state.table_by_name(name)
        if state is None or state.meta.id in self._drops:
            return None
        return state.meta

    def tables(self) -> list[str]:
        """Table names visible to this transaction, sorted."""
        self._check_open()
        self._footprint.listed_tables = True
        names = {t.meta.id: t.meta.name for t in self._state.tables.values()}
        names.update({i: m.name for i, m in self._metadata.items()})
        return sorted(n for i, n in names.items() if i not in self._drops)

    def table(self, name: str) -> TxTable:
        """A handle on a table for reads and writes inside this transaction.

        Raises:
            TableNotFound: no such table in the snapshot or created by this transaction.
        """
        self._check_open()
        meta = self._lookup(name)
        if meta is None:
            raise TableNotFound(name, self.read_version)
        return TxTable(self, meta.id)

    def has_table(self, name: str) -> bool:
        self._check_open()
        return self._lookup(name) is not None

    # --- changes ---------------------------------------------------------------

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        if_not_exists: bool = False,
        table_id: str | None = None,
    ) -> TxTable:
        """Create a table; it exists for this transaction at once, for others on commit.

        ``table_id`` (32 lowercase hex digits) lets an engine choose the id up
        front, so distributed writers can put data files under the table's
        prefix before the transaction that creates it commits.

        Raises:
            TableExists: the name is taken (unless ``if_not_exists``).
            InvalidName, SchemaMismatch: a bad name, schema or partition column.
        """
        self._check_open()
        check_table_name(name)
        if isinstance(partition_by, str):
            raise SchemaMismatch("partition_by must be a list of column names, not a string")
        existing = self._lookup(name)
        if existing is not None:
            if if_not_exists:
                return TxTable(self, existing.id)
            raise TableExists(name)
        props = dict(properties or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
            raise InvalidName("table properties must map strings to strings")
        if table_id is None:
            table_id = uuid.uuid4().hex
        elif not _TABLE_ID.match(table_id) or table_id in self._state.tables:
            raise InvalidName(f"table id {table_id!r} is not 32 lowercase hex digits, or is in use")
        meta = TableMeta(
            id=table_id,
            name=name,
            schema=normalize_schema(schema, list(partition_by)),
            partition_columns=tuple(partition_by),
            properties=props,
            created_time=int(time.time() * 1000),
        )
        self._metadata[meta.id] = meta
        self._created.add(meta.id)
        self._footprint.created_names.add(name_key(name))
        self._operations.append(
            {"operation": "CREATE TABLE", "table": name, "partitionBy": list(partition_by)}
        )
        return TxTable(self, meta.id)

    def drop_table(self, name: str, *, if_exists: bool = False) -> None:
        """Drop a table (its files stay until vacuum; old versions still read them)."""
        self._check_open()
        meta = self._lookup(name)
        if meta is None:
            if if_exists:
                return
            raise TableNotFound(name, self.read_version)
        self._discard_writer(meta.id)
        if meta.id in self._created:
            self._created.discard(meta.id)
            del self._metadata[meta.id]
            self._adds.pop(meta.id, None)
            self._footprint.created_names.discard(name_key(name))
        else:
            self._metadata.pop(meta.id, None)  # an alter made earlier in this transaction
            self._drops[meta.id] = DropTable(meta.id, meta.name)
            self._footprint.altered.add(meta.id)
        self._operations.append({"operation": "DROP TABLE", "table": name})

    def set_database_properties(self, properties: Mapping[str, str | None]) -> None:
        """Set database properties (None removes one), committed with this transaction.

        ``checkpointInterval`` must be a whole number of at least 1 and
        ``vacuumMinRetention`` a duration (docs/format.md §2.3); other keys
        are stored as given. A concurrent commit that also changes the
        properties makes this transaction conflict.

        Raises:
            ValueError: a key or value is not text, or a known property is invalid.
        """
        self._check_open()
        database = self._state.database
        if database is None:
            raise ValueError("the database has no metadata to change")
        current = dict(
            database.properties if self._database_properties is None else self._database_properties
        )
        for key, value in properties.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"a database property name must be non-empty text, not {key!r}")
            if value is None:
                current.pop(key, None)
            elif isinstance(value, str):
                current[key] = value
            else:
                raise ValueError(f"database property {key!r} must be text or None, not {value!r}")
        check_database_properties(current)
        self._database_properties = current
        self._footprint.database_changed = True
        self._rewrites = True
        self._operations.append(
            {"operation": "SET DATABASE PROPERTIES", "properties": dict(properties)}
        )

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Record that application ``app_id`` reached ``version`` in this commit.

        Pipelines use it for idempotent writes: read ``snapshot.app_version``
        first and skip work already committed. Two concurrent transactions
        recording the same app id conflict.
        """
        self._check_open()
        if not isinstance(app_id, str) or not app_id:
            raise InvalidName("app_id must be a non-empty string")
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError("an application transaction version must be a non-negative int")
        self._app_txns[app_id] = AppTxn(app_id, version, int(time.time() * 1000))
        self._footprint.app_ids.add(app_id)

    def app_version(self, app_id: str) -> int | None:
        """The version recorded for ``app_id`` as this transaction sees it."""
        if app_id in self._app_txns:
            return self._app_txns[app_id].version
        txn = self._state.app_txns.get(app_id)
        return None if txn is None else txn.version

    # --- internals used by TxTable -----------------------------------------------

    def _meta(self, table_id: str) -> TableMeta:
        if table_id in self._drops:
            raise TableNotFound(self._state.tables[table_id].meta.name, self.read_version)
        if table_id in self._metadata:
            return self._metadata[table_id]
        if table_id not in self._state.tables:
            raise TableNotFound(table_id, self.read_version)
        return self._state.tables[table_id].meta

    def _writer(self, table_id: str) -> DataFileWriter:
        writer = self._writers.get(table_id)
        if writer is None:
            writer = DataFileWriter(
                self._db.store, self._meta(table_id), target_file_size=self.target_file_size
            )
            self._writers[table_id] = writer
        return writer

    def _flush(self, table_id: str) -> None:
        writer = self._writers.pop(table_id, None)
        if writer is not None:
            self._adds.setdefault(table_id, []).extend(writer.finish())

    def _discard_writer(self, table_id: str) -> None:
        writer = self._writers.pop(table_id, None)
        if writer is not None:
            self._delete_files(table_id, writer.finish())

    def _append(self, table_id: str, data: Any, schema_mode: SchemaMode = "strict") -> int:
        self._check_open()
        if schema_mode not in ("strict", "merge"):
            raise ValueError(f"schema_mode must be 'strict' or 'merge', not {schema_mode!r}")
        meta = self._meta(table_id)
        table = to_arrow_table(data, meta.schema, infer=schema_mode == "merge")
        if schema_mode == "merge":
            merged = merge_schema(meta.schema, table.schema, meta.partition_columns)
            if merged != meta.schema:
                table = conform(table, merged)  # validate before changing anything
                self._alter(table_id, replace(meta, schema=merged), "MERGE SCHEMA")
                meta = self._meta(table_id)
        table = conform(table, meta.schema)
        self._write_rows(table_id, table)
        self._operations.append({"operation": "APPEND", "table": meta.name})
        return int(table.num_rows)

    def _alter(self, table_id: str, meta: TableMeta, operation: str, **parameters: Any) -> None:
        """Replace a table's metadata in this transaction (schema, properties, constraints)."""
        self._check_open()
        self._flush(table_id)  # files already written keep the schema they were written with
        self._metadata[table_id] = meta
        if table_id not in self._created:
            self._footprint.altered.add(table_id)
        self._rewrites = True
        self._operations.append({"operation": operation, "table": meta.name, **parameters})

    def alter_table(self, name: str) -> AlterTable:
        """Change a table's schema, properties or constraints (see mere.ops.alter.AlterTable)."""
        from mere.ops.alter import AlterTable

        self._check_open()
        meta = self._lookup(name)
        if meta is None:
            raise TableNotFound(name, self.read_version)
        return AlterTable(self, meta.id)

    def _live_files(self, table_id: str) -> tuple[list[AddFile], list[AddFile]]:
        """(files from the snapshot still live, files this transaction added)."""
        self._flush(table_id)
        base: list[AddFile] = []
        if table_id not in self._created:
            removed = self._removes.get(table_id, {})
            base = [f for p, f in self._state.tables[table_id].files.items() if p not in removed]
        return base, list(self._adds.get(table_id, ()))

    def _plan_read(
        self, table_id: str, columns: Sequence[str] | None, filter: str | None
    ) -> tuple[ScanPlan, list[AddFile]]:
        self._check_open()
        plan = plan_scan(self._meta(table_id), columns, filter)
        base, own = self._live_files(table_id)
        chosen = plan.select(base)
        if table_id not in self._created:
            self._footprint.reads.append(
                ReadRecord(
                    table_id,
                    plan.table.name,
                    frozenset(f.path for f in chosen),
                    None if plan.predicate is None else plan.matches,
                )
            )
        return plan, chosen + plan.select(own)

    def add_files(self, name: str, adds: Sequence[AddFile], *, operation: str = "WRITE") -> None:
        """Publish data files written elsewhere (e.g. by Spark executors) with this commit.

        Each file must have been written for this table (``add.table_id``) under
        its prefix with mere's data-file layout and statistics, and must not be
        referenced yet. Nothing is read or copied: the commit only references them.

        Raises:
            TableNotFound: no such table.
            SchemaMismatch: a file belongs to another table.
        """
        self._check_open()
        meta = self._lookup(name)
        if meta is None:
            raise TableNotFound(name, self.read_version)
        for add in adds:
            if add.table_id != meta.id:
                raise SchemaMismatch(f"data file {add.path} was written for another table")
        self._adds.setdefault(meta.id, []).extend(adds)
        if meta.id not in self._created:
            self._footprint.written.add(meta.id)
        self._operations.append({"operation": operation, "table": meta.name, "files": len(adds)})

    # --- primitives for the row-changing operations (mere.ops) ---------------------

    def _remove_file(self, table_id: str, add: AddFile) -> None:
        """Take a live file out of the table (copy-on-write: its rows are rewritten elsewhere)."""
        self._check_open()
        self._rewrites = True
        own = self._adds.get(table_id, [])
        if any(a.path == add.path for a in own):
            self._adds[table_id] = [a for a in own if a.path != add.path]
            self._delete_files(table_id, [add])
            return
        self._removes.setdefault(table_id, {})[add.path] = RemoveFile(
            table_id, add.path, int(time.time() * 1000), True, add.size, add.rows
        )
        self._footprint.removed.setdefault(table_id, set()).add(add.path)
        self._footprint.written.add(table_id)

    def _replace_files(self, table_id: str, old: Sequence[AddFile], new: Sequence[AddFile]) -> None:
        """Swap files without changing the table's rows (compaction, restore of layout).

        Removes and adds carry ``dataChange=false``: concurrent readers are not
        invalidated by them, and only a concurrent removal of the same files
        conflicts.
        """
        self._check_open()
        now = int(time.time() * 1000)
        removes = self._removes.setdefault(table_id, {})
        for add in old:
            removes[add.path] = RemoveFile(table_id, add.path, now, False, add.size, add.rows)
            self._footprint.removed.setdefault(table_id, set()).add(add.path)
        self._adds.setdefault(table_id, []).extend(replace(add, data_change=False) for add in new)
        if table_id not in self._created:
            self._footprint.written.add(table_id)

    def _stage_table(self, meta: TableMeta, *, recreate: bool) -> None:
        """Stage a table's metadata as is (restore): re-create a dropped table or reset one."""
        self._check_open()
        self._metadata[meta.id] = meta
        if recreate:
            self._created.add(meta.id)
            self._footprint.created_names.add(name_key(meta.name))
        else:
            self._footprint.altered.add(meta.id)
        self._rewrites = True

    def _write_rows(self, table_id: str, rows: pa.Table) -> None:
        """Write rows already conformed to the table schema, after checking its constraints."""
        self._check_open()
        meta = self._meta(table_id)
        enforce(meta.schema, meta.properties, rows, f"the rows written to {meta.name!r}")
        self._writer(table_id).write(rows)
        if table_id not in self._created:
            self._footprint.written.add(table_id)

    def _record_operation(self, operation: str, table_id: str, **parameters: Any) -> None:
        self._rewrites = self._rewrites or operation != "APPEND"
        self._operations.append(
            {"operation": operation, "table": self._meta(table_id).name, **parameters}
        )

    # --- commit ------------------------------------------------------------------

    def _actions(self) -> list[Action]:
        for table_id in list(self._writers):
            self._flush(table_id)
        actions: list[Action] = list(self._drops.values())
        actions += self._metadata.values()
        for adds in self._adds.values():
            actions += adds
        for removes in self._removes.values():
            actions += removes.values()
        actions += self._app_txns.values()
        database = self._state.database
        if self._database_properties is not None and database is not None:
            actions.append(replace(database, properties=self._database_properties))
        return actions

    def _commit_info(
        self, commit_id: str, state: DatabaseState, actions: list[Action]
    ) -> CommitInfo:
        ops = _collapse(self._operations)
        if len(ops) == 1:
            operation = ops[0]["operation"]
            parameters = {k: v for k, v in ops[0].items() if k != "operation"}
        else:
            names = {op["operation"] for op in ops}
            operation = names.pop() if len(names) == 1 else "TRANSACTION"
            parameters = {"operations": ops}
        adds = [a for a in actions if isinstance(a, AddFile)]
        removes = [a for a in actions if isinstance(a, RemoveFile)]
        touched = {self._table_name(a) for a in actions}
        metrics: dict[str, Any] = {
            "numAddedFiles": len(adds),
            "numAddedRows": sum(a.rows for a in adds),
            "numAddedBytes": sum(a.size for a in adds),
            "numRemovedFiles": len(removes),
            "numRemovedRows": sum(r.rows or 0 for r in removes),
            "numRemovedBytes": sum(r.size or 0 for r in removes),
            "tables": sorted(name for name in touched if name is not None),
        }
        if self._app_txns:
            metrics["appTransactions"] = {k: t.version for k, t in self._app_txns.items()}
        return CommitInfo(
            commit_id=commit_id,
            timestamp=max(int(time.time() * 1000), state.timestamp + 1),
            read_version=self.read_version,
            isolation=self.isolation,
            operation=operation,
            parameters=parameters,
            metrics=metrics,
            engine="mere",
            is_blind_append=not (self._rewrites or self._footprint.reads or self._drops),
        )

    def _table_name(self, action: Action) -> str | None:
        if isinstance(action, TableMeta):
            return action.name
        if isinstance(action, DropTable):
            return action.name
        table_id = getattr(action, "table_id", None)
        if table_id is None:
            return None
        if table_id in self._metadata:
            return self._metadata[table_id].name
        return self._state.tables[table_id].meta.name

    def commit(self) -> int:
        """Publish every change atomically and return the committed version.

        A transaction that changed nothing writes nothing and returns its read
        version.

        Raises:
            ConflictError: a concurrent commit conflicts (nothing was committed,
                this transaction's data files were deleted).
            CommitOutcomeUnknown: the outcome could not be established (no
                file was deleted).
        """
        self._check_open()
        try:
            actions = self._actions()
        except BaseException:
            self.abort()
            raise
        if not actions:
            self._status = "committed"
            self.commit_version = self.read_version
            return self.read_version
        try:
            version, base, info = self._publish(actions)
        except Exception as exc:
            # Every attempt definitely lost unless the outcome is unknown: only then
            # may the files be live, so only then are they kept.
            if not isinstance(exc, CommitOutcomeUnknown):
                self._delete_own_files()
            self._status = "aborted"
            raise
        self._status = "committed"
        self.commit_version = version
        self._db._committed(base.apply(Commit(version, info, tuple(actions))))
        return version

    def _publish(self, actions: list[Action]) -> tuple[int, DatabaseState, CommitInfo]:
        """The commit loop: try the next version; on losing, check the winners and rebase.

        Returns the version won, the state just below it and the commit info written.
        """
        commit_id = uuid.uuid4().hex
        base = self._state
        if time.monotonic() - self._began > STALE_SNAPSHOT_SECONDS:
            # The commits after an old snapshot may have been expired: trying the next
            # version could re-create an expired slot behind a checkpoint, so move to the
            # latest version (never expired) first, validating what lies in between.
            latest = self._db.log.latest_version()
            if latest is not None and latest > base.version:
                base = self._rebase(base, latest)
        for attempt in range(1, self.max_commit_attempts + 1):
            version = base.version + 1
            info = self._commit_info(commit_id, base, actions)
            data = encode_commit(info, actions)
            if self._db.log.put_commit(version, data, commit_id) is PutOutcome.WON:
                return version, base, info
            if attempt > 1:
                # Back off before looking for the latest version, so the next try
                # starts from what is newest after the pause, not before it.
                time.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))
            # We just lost at ``version``: it exists, so discovery may start there.
            latest = self._db.log.latest_version(known=version)
            base = self._rebase(base, max(version, latest or version))
        raise RetriesExhausted(
            f"gave up after {self.max_commit_attempts} attempts to commit",
            winning_version=base.version,
            table=None,
        )

    def _rebase(self, base: DatabaseState, latest: int) -> DatabaseState:
        """Check every commit after ``base`` up to ``latest`` and move onto it."""
        for commit in self._db.log.read_commits(base.version + 1, latest):
            check_winner(self._footprint, base, commit)
            base = base.apply(commit)
        return base

    def abort(self) -> None:
        """Discard every change; delete the data files written so far. Idempotent."""
        if self._status != "open":
            return
        self._status = "aborted"
        self._delete_own_files()

    def _delete_own_files(self) -> None:
        for table_id in list(self._writers):
            self._discard_writer(table_id)
        for table_id, adds in self._adds.items():
            self._delete_files(table_id, adds)
        self._adds.clear()

    def _delete_files(self, table_id: str, adds: Sequence[AddFile]) -> None:
        prefix = f"tables/{table_id}/"
        for add in adds:
            try:
                self._db.store.delete(prefix + add.path)
            except MereError as exc:  # best effort: vacuum reclaims orphans
                log.warning("could not delete orphan %s: %s", add.path, exc)

    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        if exc_type is None:
            if self._status == "open":
                self.commit()
        elif issubclass(exc_type, Exception):
            self.abort()
        # a BaseException (KeyboardInterrupt, a simulated crash) leaves files for vacuum

    def __repr__(self) -> str:
        return f"<Transaction read_version={self.read_version} {self.isolation} {self._status}>"


def _collapse(operations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Merge runs of identical operations (many appends to one table) into one with a count."""
    out: list[dict[str, Any]] = []
    for op in operations:
        if out and {k: v for k, v in out[-1].items() if k != "count"} == op:
            out[-1]["count"] = out[-1].get("count", 1) + 1
        else:
            out.append(dict(op))
    return out


class TxTable:
    """A table seen through a transaction: reads include the transaction's own writes."""

    def __init__(self, tx: Transaction, table_id: str) -> None:
        self._tx = tx
        self._id = table_id

    @property
    def name(self) -> str:
        return self._tx._meta(self._id).name

    @property
    def schema(self) -> pa.Schema:
        return self._tx._meta(self._id).schema

    @property
    def partition_by(self) -> list[str]:
        return list(self._tx._meta(self._id).partition_columns)

    def append(self, data: Any, *, schema_mode: SchemaMode = "strict") -> int:
        """Add rows; returns how many. Validated against the schema first.

        With ``schema_mode="merge"``, columns the table lacks are added (as
        nullable) and integer/float columns are widened where that is safe.

        Accepts a pyarrow Table, RecordBatch or RecordBatchReader, a pandas
        DataFrame, or a list of dicts.

        Raises:
            SchemaMismatch: missing, extra or incompatible columns (nothing written).
            ConstraintViolation: nulls in a NOT NULL column (nothing written).
        """
        return self._tx._append(self._id, data, schema_mode)

    def delete(self, where: str) -> int:
        """Delete the rows matching the SQL condition; returns how many (see mere.ops.delete)."""
        from mere.ops.delete import delete

        return delete(self, where)

    def update(self, where: str | None, set: dict[str, Any]) -> int:
        """Set columns of matching rows to SQL expressions or literals (see mere.ops.update)."""
        from mere.ops.update import update

        return update(self, where, set)

    def overwrite(self, data: Any, where: str | None = None) -> int:
        """Replace all rows, or those matching ``where``, with ``data`` (see mere.ops.overwrite)."""
        from mere.ops.overwrite import overwrite

        return overwrite(self, data, where)

    def merge(
        self, source: Any, on: str, *, source_alias: str = "s", target_alias: str = "t"
    ) -> TableMerger:
        """Start a MERGE (upsert) from ``source``; finish the builder with ``execute()``.

        See :class:`mere.ops.merge.TableMerger`.
        """
        from mere.ops.merge import TableMerger

        return TableMerger(self, source, on, source_alias=source_alias, target_alias=target_alias)

    def scan(self, columns: Sequence[str] | None = None, filter: str | None = None) -> pa.Table:
        """Rows of the snapshot plus this transaction's writes matching ``filter``."""
        plan, files = self._tx._plan_read(self._id, columns, filter)
        return scan_files(self._tx._db.store, plan, files)

    def scan_batches(
        self, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.RecordBatchReader:
        plan, files = self._tx._plan_read(self._id, columns, filter)
        return scan_batches(self._tx._db.store, plan, files)

    def describe(self) -> dict[str, Any]:
        base, own = self._tx._live_files(self._id)
        state = TableState(self._tx._meta(self._id), {f.path: f for f in base + own})
        return describe_table(state, self._tx.read_version)

    def __repr__(self) -> str:
        return f"<TxTable {self.name!r}>"


__all__ = ["DEFAULT_ISOLATION", "Isolation", "Transaction", "TxTable"]
