"""Optimistic transactions over the whole database.

A transaction pins a snapshot when it begins. Its reads see that snapshot
plus its own writes; its data files are written as it goes, under fresh
names nobody references. What it has staged lives in a
:class:`~mere.txn.stage.Stage`, the one interface every verb changes it
through; every statement runs in a savepoint of that stage, so a failed
statement leaves the transaction as it was. ``commit`` hands the staged
actions to the :class:`~mere.txn.committer.Committer`, which validates,
publishes, rebases and retries.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from mere.constraints import (
    PRIMARY_KEY_PROPERTY,
    check_reserved_properties,
    key_property,
    resolve_primary_key,
)
from mere.data.writer import DEFAULT_TARGET_FILE_SIZE
from mere.errors import (
    CommitOutcomeUnknown,
    InvalidArgument,
    InvalidName,
    SchemaMismatch,
    TableNotFound,
    TransactionClosed,
)
from mere.expr.ast import quote_identifier
from mere.log.actions import (
    ISOLATION_LEVELS,
    Action,
    AddFile,
    AppTxn,
    CommitInfo,
    DropTable,
    RemoveFile,
    TableMeta,
)
from mere.names import check_new_table_name
from mere.properties import check_table_properties
from mere.schema import conform, merge_schema, normalize_schema, to_arrow_table
from mere.snapshot.scan import scan_batches, scan_files
from mere.snapshot.snapshot import describe_table
from mere.snapshot.state import DatabaseState, TableState
from mere.txn.committer import (
    DEFAULT_MAX_COMMIT_ATTEMPTS,
    STALE_SNAPSHOT_SECONDS,
    AfterCommit,
    Committer,
)
from mere.txn.keys import canonical_floats, key_columns, semi_join
from mere.txn.stage import Stage

if TYPE_CHECKING:
    from mere.log.log import Log
    from mere.ops.alter import AlterTable
    from mere.ops.merge import TableMerger
    from mere.storage import ObjectStore

Isolation = Literal["snapshot", "write_serializable", "serializable"]
SchemaMode = Literal["strict", "merge"]
OnDuplicate = Literal["error", "skip", "update"]
DEFAULT_ISOLATION: Isolation = "write_serializable"
_TABLE_ID = re.compile(r"[0-9a-f]{32}\Z")


class Transaction:
    """A unit of work over any number of tables, committed atomically.

    Use it as a context manager (commits on normal exit, aborts on an
    exception) or call :meth:`commit` / :meth:`abort` yourself::

        with db.transaction(isolation="serializable") as tx:
            tx.table("orders").append(rows)
            tx.table("lineitem").append(items)

    Every statement (a table verb, create, drop, alter, ...) is atomic: if it
    raises, the transaction is as it was before it and may go on.
    ``with tx.savepoint():`` makes a block of statements one such unit.
    """

    def __init__(
        self,
        store: ObjectStore,
        log: Log,
        state: DatabaseState,
        isolation: Isolation = DEFAULT_ISOLATION,
        *,
        after_commit: AfterCommit,
        max_commit_attempts: int = DEFAULT_MAX_COMMIT_ATTEMPTS,
        target_file_size: int = DEFAULT_TARGET_FILE_SIZE,
    ) -> None:
        if isolation not in ISOLATION_LEVELS:
            raise InvalidArgument(f"isolation must be one of {ISOLATION_LEVELS}, not {isolation!r}")
        self.store = store
        self.isolation: Isolation = isolation
        self.committer = Committer(log, after_commit, max_attempts=max_commit_attempts)
        self.stage = Stage(store, state, isolation, target_file_size=target_file_size)
        self._status: Literal["open", "committed", "aborted"] = "open"
        self._began = time.monotonic()
        self.commit_version: int | None = None

    # --- introspection ---------------------------------------------------------

    @property
    def read_version(self) -> int:
        """The version of the snapshot this transaction reads."""
        return self.stage.read_state.version

    @property
    def read_state(self) -> DatabaseState:
        """The snapshot this transaction reads (without its own changes)."""
        return self.stage.read_state

    @property
    def target_file_size(self) -> int:
        """The size this transaction's data files are cut at (bytes)."""
        return self.stage.target_file_size

    @property
    def uri(self) -> str:
        """The URI of the database this transaction belongs to."""
        return self.store.uri

    @property
    def status(self) -> str:
        return self._status

    def check_open(self) -> None:
        """Raise TransactionClosed unless the transaction is still open."""
        if self._status != "open":
            raise TransactionClosed(f"the transaction is already {self._status}")

    @contextmanager
    def statement(self) -> Iterator[Stage]:
        """Run one statement: it applies entirely, or not at all if it raises.

        Verbs (``mere.ops``, ``mere.maintain``, ``mere.spark``) wrap their
        staging in it and change the transaction only through the stage it yields.
        """
        self.check_open()
        with self.stage.savepoint():
            yield self.stage

    @contextmanager
    def savepoint(self) -> Iterator[Transaction]:
        """A block of statements that applies entirely, or not at all if it raises.

        The exception propagates; catch it outside the block to go on::

            try:
                with tx.savepoint():
                    tx.table("a").delete("k = 1")
                    tx.table("b").append(rows)   # raises: a's delete is undone too
            except mere.ConstraintViolation:
                pass

        Reads made inside the block stay recorded for conflict detection.
        """
        with self.statement():
            yield self

    def sql(
        self, text: str, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> pa.Table | None:
        """Run SQL in this transaction: queries see its own writes and count as its reads.

        Each statement is atomic; BEGIN/COMMIT/ROLLBACK are refused (commit with
        :meth:`commit`). Returns the last statement's result. See :mod:`mere.sql`.
        """
        from mere.sql import run_in_transaction

        return run_in_transaction(self, text, params)

    # --- the namespace, as this transaction sees it --------------------------------

    def tables(self) -> list[str]:
        """Table names visible to this transaction, sorted."""
        self.check_open()
        return self.stage.table_names()

    def table(self, name: str) -> TxTable:
        """A handle on a table for reads and writes inside this transaction.

        Raises:
            TableNotFound: no such table in the snapshot or created by this transaction.
        """
        self.check_open()
        return TxTable(self, self.stage.require(name).id)

    def has_table(self, name: str) -> bool:
        self.check_open()
        return self.stage.lookup(name) is not None

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
        primary_key: Sequence[str] | None = None,
    ) -> TxTable:
        """Create a table; it exists for this transaction at once, for others on commit.

        ``table_id`` (32 lowercase hex digits) lets an engine choose the id up
        front, so distributed writers can put data files under the table's
        prefix before the transaction that creates it commits.

        ``primary_key`` names the columns whose values identify a row (NOT
        NULL implied): every write path refuses a duplicate (DuplicateKey),
        and two transactions inserting the same key cannot both commit.

        Raises:
            TableExists: the name is taken (unless ``if_not_exists``).
            InvalidName, SchemaMismatch: a bad name, id, schema or partition column.
        """
        with self.statement() as stage:
            check_new_table_name(name)
            if isinstance(partition_by, str) or not isinstance(partition_by, Sequence):
                raise SchemaMismatch(
                    "partition_by must be a list of column names, not "
                    f"{type(partition_by).__name__}"
                )
            existing = stage.lookup(name)
            if existing is not None and if_not_exists:
                return TxTable(self, existing.id)
            if properties is not None and not isinstance(properties, Mapping):
                raise InvalidName(
                    f"table properties must be a dict of strings, not {type(properties).__name__}"
                )
            props = dict(properties or {})
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
                raise InvalidName("table properties must map strings to strings")
            if table_id is None:
                table_id = uuid.uuid4().hex
            elif not isinstance(table_id, str) or not _TABLE_ID.match(table_id):
                raise InvalidName(f"table id {table_id!r} is not 32 lowercase hex digits")
            schema = normalize_schema(schema, list(partition_by))
            check_table_properties(props)
            if primary_key is not None:
                if any(k.startswith("mere.") for k in props):
                    raise InvalidName("property keys starting with 'mere.' are reserved")
                columns, schema = resolve_primary_key(schema, primary_key)
                props[PRIMARY_KEY_PROPERTY] = key_property(columns)
            else:  # whole metadata handed in (a table re-created): its key and checks hold
                schema = check_reserved_properties(props, schema)
            meta = TableMeta(
                id=table_id,
                name=name,
                schema=schema,
                partition_columns=tuple(partition_by),
                properties=props,
                created_time=int(time.time() * 1000),
            )
            stage.create(meta)
            stage.record_operation("CREATE TABLE", meta.id, partitionBy=list(partition_by))
            return TxTable(self, meta.id)

    def drop_table(self, name: str, *, if_exists: bool = False) -> None:
        """Drop a table (its files stay until vacuum; old versions still read them).

        Changes this transaction staged for the table go with it; the files
        it wrote for the table are deleted when the transaction ends.
        """
        with self.statement() as stage:
            meta = stage.lookup(name)
            if meta is None:
                if if_exists:
                    return
                raise TableNotFound(name, self.read_version)
            stage.drop(meta.id)
            stage.record_operation("DROP TABLE", None, table=meta.name)

    def alter_table(self, name: str) -> AlterTable:
        """Change a table's schema, properties or constraints (see mere.ops.alter.AlterTable)."""
        from mere.ops.alter import AlterTable

        self.check_open()
        return AlterTable(self, self.stage.require(name).id)

    def set_database_properties(self, properties: Mapping[str, str | None]) -> None:
        """Set database properties (None removes one), committed with this transaction.

        ``checkpointInterval`` must be a whole number of at least 1 and
        ``vacuumMinRetention`` a duration (docs/format.md §2.3); other keys
        are stored as given. A concurrent commit that also changes the
        properties makes this transaction conflict.

        Raises:
            ValueError: a key or value is not text, or a known property is invalid.
        """
        if not isinstance(properties, Mapping):
            raise InvalidArgument(
                f"properties must be a dict of names to values, not {type(properties).__name__}"
            )
        with self.statement() as stage:
            if self.read_state.database is None:
                raise InvalidArgument("the database has no metadata to change")
            current = dict(stage.database_properties)
            for key, value in properties.items():
                if not isinstance(key, str) or not key:
                    raise InvalidArgument(
                        f"a database property name must be non-empty text, not {key!r}"
                    )
                if value is None:
                    current.pop(key, None)
                elif isinstance(value, str):
                    current[key] = value
                else:
                    raise InvalidArgument(
                        f"database property {key!r} must be text or None, not {value!r}"
                    )
            stage.set_database_properties(current)
            stage.record_operation("SET DATABASE PROPERTIES", None, properties=dict(properties))

    def set_app_transaction(self, app_id: str, version: int) -> None:
        """Record that application ``app_id`` reached ``version`` in this commit.

        Pipelines use it for idempotent writes: read ``snapshot.app_version``
        first and skip work already committed. Two concurrent transactions
        recording the same app id conflict.
        """
        self.check_open()
        if not isinstance(app_id, str) or not app_id:
            raise InvalidName("app_id must be a non-empty string")
        if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 2**63:
            raise InvalidArgument(
                "an application transaction version must be a non-negative int below 2**63"
            )
        self.stage.set_app_transaction(AppTxn(app_id, version, int(time.time() * 1000)))

    def app_version(self, app_id: str) -> int | None:
        """The version recorded for ``app_id`` as this transaction sees it."""
        return self.stage.app_version(app_id)

    def add_files(
        self,
        name: str,
        adds: Sequence[AddFile],
        *,
        operation: str = "WRITE",
        owned: bool = True,
    ) -> None:
        """Publish data files written elsewhere (e.g. by Spark executors) with this commit.

        Each file must have been written for this table (``add.table_id``) under
        its prefix with mere's data-file layout and statistics, and must not be
        referenced yet. Nothing is read or copied: the commit only references them.
        With ``owned`` (the default) they were written for this transaction,
        which deletes them if the statement or the transaction fails; otherwise
        they stay their writer's.

        Raises:
            TableNotFound: no such table.
            SchemaMismatch: a file belongs to another table.
        """
        with self.statement() as stage:
            meta = stage.require(name)
            stage.add_files(meta.id, adds, owned=owned)
            stage.record_operation(operation, meta.id, files=len(adds))

    # --- commit ------------------------------------------------------------------

    def commit(self) -> int:
        """Publish every change atomically and return the committed version.

        A transaction that changed nothing writes nothing and returns its read
        version.

        Raises:
            InvalidCommit: readers would reject the commit (nothing was published).
            ConflictError: a concurrent commit conflicts (nothing was committed,
                this transaction's data files were deleted).
            CommitOutcomeUnknown: the outcome could not be established (no
                file was deleted).
        """
        self.check_open()
        try:
            actions = self.stage.actions()
        except BaseException:
            self.abort()
            raise
        if not actions:
            self.stage.delete_written()
            self._status = "committed"
            self.commit_version = self.read_version
            return self.read_version
        try:
            committed = self.committer.commit(
                self.read_state,
                actions,
                self.stage.footprint(),
                self._commit_info,
                began=self._began,
            )
        except Exception as exc:
            # Every attempt definitely lost unless the outcome is unknown: only then
            # may the files be live, so only then are they kept.
            if not isinstance(exc, CommitOutcomeUnknown):
                self.stage.delete_written()
            self._status = "aborted"
            raise
        self._status = "committed"
        self.commit_version = committed.version
        self.stage.delete_unreferenced(actions)
        return committed.version

    def _commit_info(
        self, commit_id: str, base: DatabaseState, actions: Sequence[Action], timestamp: int
    ) -> CommitInfo:
        ops = _collapse(self.stage.operations)
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
        apps = self.stage.app_transactions
        if apps:
            metrics["appTransactions"] = {k: t.version for k, t in apps.items()}
        dropped = any(isinstance(a, DropTable) for a in actions)
        return CommitInfo(
            commit_id=commit_id,
            timestamp=timestamp,
            read_version=self.read_version,
            isolation=self.isolation,
            operation=operation,
            parameters=parameters,
            metrics=metrics,
            engine="mere",
            is_blind_append=not (self.stage.rewrites or self.stage.reads.reads or dropped),
        )

    def _table_name(self, action: Action) -> str | None:
        if isinstance(action, TableMeta | DropTable):
            return action.name
        table_id = getattr(action, "table_id", None)
        if table_id is None:
            return None
        return self.stage.meta(table_id).name

    def abort(self) -> None:
        """Discard every change; delete the data files written so far. Idempotent."""
        if self._status != "open":
            return
        self._status = "aborted"
        self.stage.delete_written()

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
        self.transaction = tx
        self.table_id = table_id

    @property
    def stage(self) -> Stage:
        """The transaction's stage (for verbs; see :mod:`mere.txn.stage`)."""
        return self.transaction.stage

    @property
    def meta(self) -> TableMeta:
        """The table's full metadata as the transaction sees it."""
        return self.stage.meta(self.table_id)

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def schema(self) -> pa.Schema:
        return self.meta.schema

    @property
    def partition_by(self) -> list[str]:
        return list(self.meta.partition_columns)

    def append(
        self,
        data: Any,
        *,
        schema_mode: SchemaMode = "strict",
        on_duplicate: OnDuplicate = "error",
    ) -> int:
        """Add rows; returns how many were written. Validated against the schema first.

        With ``schema_mode="merge"``, columns the table lacks are added (as
        nullable) and integer/float columns are widened where that is safe.

        On a table with a primary key, ``on_duplicate`` says what a row whose
        key is already in the table does: ``"error"`` (DuplicateKey, nothing
        written), ``"skip"`` (the row is left out; of rows repeating a key in
        the data, the first is kept) or ``"update"`` (the row replaces the
        existing one: an upsert, a MERGE on the key).

        Accepts a pyarrow Table, RecordBatch or RecordBatchReader, a pandas
        DataFrame, or a list of dicts.

        Raises:
            SchemaMismatch: missing, extra or incompatible columns (nothing written).
            ConstraintViolation: nulls in a NOT NULL column (nothing written).
            DuplicateKey: a key already in the table or repeated in the data.
        """
        if schema_mode not in ("strict", "merge"):
            raise InvalidArgument(f"schema_mode must be 'strict' or 'merge', not {schema_mode!r}")
        if on_duplicate not in ("error", "skip", "update"):
            raise InvalidArgument(
                f"on_duplicate must be 'error', 'skip' or 'update', not {on_duplicate!r}"
            )
        if on_duplicate != "error" and not key_columns(self.meta):
            raise InvalidArgument(
                f"on_duplicate={on_duplicate!r} needs a primary key; table {self.name!r} has none"
            )
        with self.transaction.statement() as stage:
            meta = self.meta
            table = to_arrow_table(data, meta.schema, infer=schema_mode == "merge")
            if schema_mode == "merge":
                merged = merge_schema(meta.schema, table.schema, meta.partition_columns)
                if merged != meta.schema:
                    table = conform(table, merged)  # validate before changing anything
                    stage.set_metadata(self.table_id, replace(meta, schema=merged))
                    stage.record_operation("MERGE SCHEMA", self.table_id)
                    meta = self.meta
            table = conform(table, meta.schema)
            if on_duplicate != "error":  # its keys are compared as SQL compares them
                table = canonical_floats(table, key_columns(meta))
            if on_duplicate == "update":
                return self._upsert(table)
            if on_duplicate == "skip":
                table = self._without_present_keys(table)
            stage.write_rows(self.table_id, table)
            stage.record_operation("APPEND", self.table_id)
            return int(table.num_rows)

    def _without_present_keys(self, rows: pa.Table) -> pa.Table:
        """``rows`` minus those whose key the table holds, and minus repeats of a key."""
        columns = key_columns(self.meta)
        numbered = rows.append_column("__mere_row", pa.array(range(rows.num_rows), pa.int64()))
        first = numbered.group_by(columns, use_threads=False).aggregate([("__mere_row", "min")])
        chosen = first["__mere_row_min"]
        rows = rows.take(pc.take(chosen, pc.sort_indices(chosen)))
        present = self.stage.keys_present(self.table_id, rows.select(columns))
        if present.num_rows == 0:
            return rows
        absent = semi_join(rows.select(columns), present, anti=True)
        if len(columns) == 1:
            return rows.filter(pc.is_in(rows.column(columns[0]), value_set=absent.column(0)))
        numbered = rows.append_column("__mere_row", pa.array(range(rows.num_rows), pa.int64()))
        kept = numbered.join(present, columns, join_type="left anti", use_threads=False)
        kept_rows = kept["__mere_row"]
        return rows.take(pc.take(kept_rows, pc.sort_indices(kept_rows)))

    def _upsert(self, rows: pa.Table) -> int:
        """Insert ``rows``, replacing the rows with the same key: a MERGE on the key."""
        from mere.ops.merge import TableMerger

        on = " AND ".join(
            f"t.{quote_identifier(c)} = s.{quote_identifier(c)}" for c in key_columns(self.meta)
        )
        merger = TableMerger(self, rows, on).when_matched_update_all().when_not_matched_insert_all()
        metrics = merger.execute()
        return metrics.num_target_rows_inserted + metrics.num_target_rows_updated

    def delete(self, where: str) -> int:
        """Delete the rows matching the SQL condition; returns how many (see mere.ops.delete)."""
        from mere.ops.delete import delete

        with self.transaction.statement():
            return delete(self, where)

    def update(self, where: str | None, set: dict[str, Any]) -> int:
        """Set columns of matching rows to SQL expressions or literals (see mere.ops.update)."""
        from mere.ops.update import update

        with self.transaction.statement():
            return update(self, where, set)

    def overwrite(self, data: Any, where: str | None = None) -> int:
        """Replace all rows, or those matching ``where``, with ``data`` (see mere.ops.overwrite)."""
        from mere.ops.overwrite import overwrite

        with self.transaction.statement():
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
        self.transaction.check_open()
        plan, files = self.stage.plan_read(self.table_id, columns, filter)
        version = self.transaction.read_version
        return scan_files(self.transaction.store, plan, files, version=version)

    def scan_batches(
        self, columns: Sequence[str] | None = None, filter: str | None = None
    ) -> pa.RecordBatchReader:
        self.transaction.check_open()
        plan, files = self.stage.plan_read(self.table_id, columns, filter)
        version = self.transaction.read_version
        return scan_batches(self.transaction.store, plan, files, version=version)

    def describe(self) -> dict[str, Any]:
        base, own = self.stage.live_files(self.table_id)
        state = TableState(self.meta, {f.path: f for f in base + own})
        return describe_table(state, self.transaction.read_version)

    def __repr__(self) -> str:
        return f"<TxTable {self.name!r}>"


__all__ = [
    "DEFAULT_ISOLATION",
    "DEFAULT_MAX_COMMIT_ATTEMPTS",
    "STALE_SNAPSHOT_SECONDS",
    "Isolation",
    "SchemaMode",
    "Transaction",
    "TxTable",
]
