"""Writing a DataFrame into a mere table: the driver's side of every Spark write.

A write has three steps: :func:`prepare_write` (on the driver, before the
job: find or plan the table, validate options), the executors' tasks
(:func:`mere.spark._files.write_batches`), and :func:`commit_write` (on the
driver: one mere transaction that publishes the files) or
:func:`abort_write` (delete the files, unless the commit landed). Each job
has a location of its own under the table where its tasks record their
files (:class:`mere.spark._files.JobLocation`): ending the job there also
deletes the files of tasks that were still running when Spark reported
the job failed. :func:`write` does all three inside a caller's
transaction, so several DataFrames can be written to several tables in one
atomic commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.sql.types import StructType

from mere.database import Database, connect
from mere.errors import (
    ConcurrentMetadataChange,
    ConcurrentTransaction,
    DatabaseNotFound,
    SchemaMismatch,
)
from mere.log.actions import ISOLATION_LEVELS, AddFile, TableMeta
from mere.names import check_table_name
from mere.schema import conform, merge_schema
from mere.spark import _core
from mere.spark._files import (
    STRAGGLER_WAIT_SECONDS,
    WriteTarget,
    add_from_json,
    add_to_json,
    check_condition,
    delete_files,
    end_job,
    open_job,
    write_batches,
)
from mere.spark._native_write import native_write_refusal, write_natively
from mere.spark._types import table_schema_from_spark
from mere.storage import LocalStore, open_store
from mere.txn.transaction import DEFAULT_ISOLATION, Isolation, Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("mere.spark")

Mode = Literal["append", "overwrite"]
#: How :func:`write` makes the data files: Spark's Parquet writer, Arrow in Python, or
#: the first where it applies.
Method = Literal["auto", "native", "arrow"]
_ADD_SCHEMA = pa.schema([pa.field("add", pa.string(), nullable=False)])


@dataclass(frozen=True)
class WriteJob:
    """A planned write: what executors write and how the driver commits it."""

    target: WriteTarget
    name: str
    overwrite: bool
    #: The table does not exist yet: the commit creates it (with ``target.table.id``).
    create: bool
    #: The latest version when the job was planned: a commit of its files comes later.
    base_version: int
    isolation: Isolation = DEFAULT_ISOLATION
    app_id: str | None = None
    app_version: int | None = None
    #: With ``mergeSchema``: the table's schema before the write extended it
    #: (``target.table`` holds the extended one, which the commit gives the table).
    evolved_from: pa.Schema | None = None


def open_database(uri: str) -> Database:
    """The existing database at ``uri`` (a Spark write never creates one: a mistyped
    URI would silently get an empty database). The caller closes it.

    Raises:
        DatabaseNotFound: there is no database at ``uri``.
    """
    try:
        return connect(uri, create=False)
    except DatabaseNotFound:
        raise DatabaseNotFound(
            f"no mere database at {uri!r} to write to (Spark writes never create one)",
            help="check the URI; to start a new database, create it first with mere.connect(uri)",
        ) from None


def check_uri(uri: str) -> str:
    """Refuse stores that Spark executors (other processes) cannot reach."""
    if uri.startswith("memory://"):
        raise ValueError(
            f"Spark executors run in other processes and cannot reach {uri}: "
            "use a local path (or a store every executor can reach)"
        )
    return uri


def check_isolation(isolation: str) -> Isolation:
    if isolation not in ISOLATION_LEVELS:
        raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, not {isolation!r}")
    return isolation  # type: ignore[return-value]


def check_app(app_id: str | None, app_version: int | None) -> None:
    if (app_id is None) != (app_version is None):
        raise ValueError("an idempotent write needs both an app id and an app version")
    if app_version is not None and (
        not isinstance(app_version, int) or isinstance(app_version, bool) or app_version < 0
    ):
        raise ValueError(f"an app version is a non-negative int, not {app_version!r}")


def already_applied(recorded: int | None, version: int | None) -> bool:
    """Whether an idempotent write of ``version`` was committed before (skip it)."""
    return recorded is not None and version is not None and recorded >= version


def check_partition_by(meta: TableMeta, partition_by: Sequence[str] | None) -> None:
    if partition_by is not None and tuple(partition_by) != meta.partition_columns:
        raise SchemaMismatch(
            f"table {meta.name!r} is partitioned by {list(meta.partition_columns)}, "
            f"not {list(partition_by)}",
            help="partitionBy applies only when a write creates the table",
        )


def check_dataframe_schema(schema: StructType, meta: TableMeta) -> None:
    """Fail before the job if the DataFrame's columns cannot be written to the table."""
    conform(table_schema_from_spark(schema).empty_table(), meta.schema, what="the DataFrame")


def merge_dataframe_schema(meta: TableMeta, schema: StructType) -> TableMeta:
    """The table extended for a ``mergeSchema`` write of a DataFrame with ``schema``.

    Columns the table lacks are added (nullable), safe widenings applied
    (``int`` to ``long``...). Nothing is changed here: callers check the
    DataFrame against the result (it must still hold every column of the
    table) before anything is written or committed.

    A partition column keeps its type (its values are cast, as in a strict
    write), as ``alter_table().widen_column`` requires: files already written
    spell their values in paths in that type's text, and Spark's Parquet
    reader reads ``p=1.50`` as a ``decimal(12, 3)`` of 0.150.
    """
    evolved = merge_schema(meta.schema, table_schema_from_spark(schema), meta.partition_columns)
    return replace(meta, schema=evolved)


def prepare_write(
    uri: str,
    name: str,
    schema: StructType,
    *,
    overwrite: bool,
    replace_where: str | None = None,
    partition_by: Sequence[str] | None = None,
    isolation: str = DEFAULT_ISOLATION,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int | None = None,
    create_now: bool = False,
    merge_schema: bool = False,
) -> WriteJob:
    """Plan a data-source write of a DataFrame with ``schema`` into table ``name``.

    A missing table is planned for creation with the DataFrame's schema (every
    column nullable) and ``partition_by``, in the same commit as the data. With
    ``create_now`` it is created at once in a commit of its own instead: a
    streaming write plans its job in several processes, which must agree on
    the table's id (and, for the same reason, has no job location: a failed
    micro-batch deletes the files its tasks reported). With ``merge_schema``
    an existing table is extended to the DataFrame's columns
    (:func:`merge_dataframe_schema`) by the commit.

    Raises:
        DatabaseNotFound: there is no database at ``uri``.
    """
    check_uri(uri)
    check_app(app_id, app_version)
    level = check_isolation(isolation)
    if replace_where is not None and not overwrite:
        raise ValueError("replaceWhere needs mode('overwrite')")
    with open_database(uri) as db:
        return _plan_write(
            db,
            name,
            schema,
            overwrite=overwrite,
            replace_where=replace_where,
            partition_by=partition_by,
            isolation=level,
            app_id=app_id,
            app_version=app_version,
            target_file_size=target_file_size,
            create_now=create_now,
            merge_schema=merge_schema,
        )


def _plan_write(
    db: Database,
    name: str,
    schema: StructType,
    *,
    overwrite: bool,
    replace_where: str | None,
    partition_by: Sequence[str] | None,
    isolation: Isolation,
    app_id: str | None,
    app_version: int | None,
    target_file_size: int | None,
    create_now: bool,
    merge_schema: bool,
) -> WriteJob:
    snapshot = db.snapshot()
    create = False
    evolved_from = None
    if snapshot.has_table(name):
        meta = _core.table_meta(snapshot.table(name))
        check_partition_by(meta, partition_by)
        if merge_schema:
            merged = merge_dataframe_schema(meta, schema)
            if not merged.schema.equals(meta.schema, check_metadata=True):
                evolved_from, meta = meta.schema, merged
    elif create_now:
        db.create_table(
            name,
            table_schema_from_spark(schema),
            partition_by=partition_by or (),
            if_not_exists=True,
        )
        snapshot = db.snapshot()
        meta = _core.table_meta(snapshot.table(name))
        check_partition_by(meta, partition_by)
    else:
        # The id is chosen now so executors can write under the table's prefix; the
        # table is created by the same commit as its data.
        meta = _core.new_table_meta(name, table_schema_from_spark(schema), partition_by or (), {})
        create = True
    check_dataframe_schema(schema, meta)
    if replace_where is not None:
        check_condition(meta, replace_where)
    return WriteJob(
        target=WriteTarget(
            uri=db.uri,
            table=meta,
            target_file_size=target_file_size or db.target_file_size,
            replace_where=replace_where,
            job=None if create_now else open_job(db.store, meta),
        ),
        name=name,
        overwrite=overwrite,
        create=create,
        base_version=snapshot.version,
        isolation=isolation,
        app_id=app_id,
        app_version=app_version,
        evolved_from=evolved_from,
    )


def _same_table(a: TableMeta, b: TableMeta) -> bool:
    """Whether files written for ``b`` fit ``a`` unchanged (creation times aside)."""
    return (
        a.id == b.id
        and a.schema.equals(b.schema, check_metadata=True)
        and a.partition_columns == b.partition_columns
        and a.properties == b.properties
    )


def _bind_table(tx: Transaction, job: WriteJob) -> None:
    """Create the planned table, or check the table is still the one the files were written for."""
    meta = job.target.table
    if not tx.has_table(job.name):
        if job.create:
            _core.create_table_with_id(tx, meta)
            return
        raise ConcurrentMetadataChange(
            f"table {job.name!r} was dropped while the Spark job wrote its files",
            winning_version=tx.read_version,
            table=job.name,
        )
    current = _core.tx_table_meta(tx, job.name)
    if _same_table(current, meta):
        return  # a stream's later batches: an earlier one already extended the schema
    if job.evolved_from is not None and _same_table(
        current, replace(meta, schema=job.evolved_from)
    ):
        _core.evolve_schema(tx, job.name, meta.schema)
        return
    if job.create:
        what = "created by another writer"
    else:
        what = "dropped and re-created" if current.id != meta.id else "altered"
    raise ConcurrentMetadataChange(
        f"table {job.name!r} was {what} while the Spark job wrote its files",
        winning_version=tx.read_version,
        table=job.name,
    )


def commit_write(job: WriteJob, adds: list[AddFile]) -> int | None:
    """Publish the files of a finished job in one transaction; return its version.

    Returns None when the write was skipped because ``job.app_id`` already
    recorded ``job.app_version`` (its files are deleted). On any error the
    files stay for :func:`abort_write`, which Spark calls next. Once the
    outcome is settled, the job's location is cleared (files recorded there
    that the commit does not publish are deleted: task attempts whose
    output Spark discarded).
    """
    with open_database(job.target.uri) as db:
        skipped, version = _commit(db, job, adds)
    target = job.target
    if target.job is not None:
        kept = [] if skipped else [a.path for a in adds]
        end_job(open_store(target.uri), target.table, target.job, kept)
    return None if skipped else version


def _commit(db: Database, job: WriteJob, adds: list[AddFile]) -> tuple[bool, int | None]:
    """Commit the job's files: (skipped as already applied, the version committed)."""
    skipped = False
    try:
        with db.transaction(job.isolation) as tx:
            if job.app_id is not None and already_applied(
                tx.app_version(job.app_id), job.app_version
            ):
                skipped = True
            else:
                _bind_table(tx, job)
                if job.overwrite:
                    table = tx.table(job.name)
                    table.overwrite(table.schema.empty_table(), where=job.target.replace_where)
                tx.add_files(job.name, adds)
                if job.app_id is not None and job.app_version is not None:
                    tx.set_app_transaction(job.app_id, job.app_version)
    except ConcurrentTransaction:
        # Another writer committed the same app id first: if it recorded this
        # version, this write is a duplicate and is skipped, as above.
        if job.app_id is None or not already_applied(
            db.snapshot().app_version(job.app_id), job.app_version
        ):
            raise
        skipped = True
    if skipped:
        log.info("skipping write of %s version %s: already committed", job.app_id, job.app_version)
        delete_files(open_store(job.target.uri), job.target.table, [a.path for a in adds])
        return True, None
    return False, tx.commit_version


def abort_write(
    job: WriteJob, adds: list[AddFile], *, wait_seconds: float = STRAGGLER_WAIT_SECONDS
) -> None:
    """Delete a failed job's files, unless a commit that references them landed.

    Spark calls abort even when ``commit`` raised after its commit landed;
    deleting the files then would corrupt the table. When the log cannot be
    read, the reported files (``adds``) are kept (vacuum reclaims true
    orphans). Files only the job's location knows of (tasks that did not
    report: still running, or failed) are never in a commit and are always
    deleted; tasks still running are waited for, ``wait_seconds`` at most
    (Spark calls abort as soon as one task failed).
    """
    target = job.target
    paths = {a.path for a in adds}
    landed = (
        _core.commit_added(target.uri, target.table.id, paths, job.base_version) if paths else False
    )
    if landed:
        log.warning("abort after a commit of %d file(s) landed: nothing deleted", len(paths))
    elif landed is None:
        log.warning("abort: cannot tell whether the commit landed; %d file(s) kept", len(paths))
    kept = () if landed is False else paths
    store = open_store(target.uri)
    if target.job is not None:
        end_job(store, target.table, target.job, kept, wait_seconds=wait_seconds)
    elif landed is False:
        delete_files(store, target.table, sorted(paths))


# --- writes inside a caller's transaction --------------------------------------------


class _PathList(AccumulatorParam[list[str]]):
    """Collects the paths executors wrote, including those of tasks in a failed job."""

    def zero(self, value: list[str]) -> list[str]:
        return []

    def addInPlace(self, value1: list[str], value2: list[str]) -> list[str]:
        value1.extend(value2)
        return value1


def run_write_job(df: DataFrame, target: WriteTarget) -> list[AddFile]:
    """Write ``df`` as data files of ``target.table`` on the executors; return them.

    Nothing is committed. The job gets a location of its own
    (:class:`~mere.spark._files.JobLocation`, unless ``target`` names one).
    If the job fails, every file its tasks wrote is deleted: those of tasks
    still running when Spark reported the failure too (they are waited for,
    :data:`~mere.spark._files.STRAGGLER_WAIT_SECONDS` at most, and delete
    their own files if they finish later). Files of task attempts whose
    output Spark discarded are deleted too.
    """
    store = open_store(target.uri)
    if target.job is None:
        target = replace(target, job=open_job(store, target.table))
    job = target.job
    assert job is not None
    names = df.columns

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        adds = write_batches(target, (b.rename_columns(names) for b in batches))
        if adds:
            yield pa.RecordBatch.from_pydict({"add": [add_to_json(a) for a in adds]}, _ADD_SCHEMA)

    # mapInArrow resolves columns by parsing their names ("a.b" is a field of a):
    # they travel under positional names and get theirs back in the task.
    positional = df.toDF(*[f"_{i}" for i in range(len(names))])
    try:
        rows = positional.mapInArrow(task, "add string").collect()
    except BaseException:
        end_job(store, target.table, job, wait_seconds=STRAGGLER_WAIT_SECONDS)
        raise
    adds = [add_from_json(row["add"]) for row in rows]
    end_job(store, target.table, job, {a.path for a in adds})
    return adds


def write(
    tx: Transaction,
    df: DataFrame,
    table: str,
    *,
    mode: Mode = "append",
    replace_where: str | None = None,
    partition_by: Sequence[str] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    target_file_size: int | None = None,
    method: Method = "auto",
    schema_mode: Literal["strict", "merge"] = "strict",
) -> int:
    """Write a DataFrame into ``table`` as part of the transaction ``tx``; return the rows.

    Executors write the data files; they become visible when ``tx`` commits,
    atomically with everything else in it (other tables included). A missing
    table is created in ``tx`` with the DataFrame's schema and
    ``partition_by``.

    Args:
        mode: ``append``, or ``overwrite`` to replace the table's rows (only
            those matching ``replace_where`` if given; every new row must match it).
        app_id, app_version: an idempotent write: skipped (returns 0) when
            ``app_id`` already recorded ``app_version`` or a later version;
            otherwise ``tx`` records it.
        schema_mode: ``merge`` adds the DataFrame's columns the table lacks
            (nullable) and applies safe widenings, in ``tx``, as
            ``append(..., schema_mode="merge")`` does; ``strict`` (default)
            refuses a DataFrame that does not match the table.
        target_file_size: the size data files are cut at (default: the database's;
            the native method writes one file per task and partition instead).
        method: ``native`` has Spark's own Parquet writer make the data files
            (the fastest: no rows pass through Python; a local store, flat
            columns and the table's exact Spark types are needed);
            ``arrow`` sends Arrow batches to Python tasks that write them with
            pyarrow (any store and type, with lossless casts); ``auto``
            (default) is ``native`` where it applies, Spark runs in local
            mode and no ``target_file_size`` is asked for, else ``arrow``.
            On a cluster, ``native`` needs the database's directory at the
            same path on a file system the driver and every executor share:
            the driver finds the files Spark wrote by listing it.

    Raises:
        SchemaMismatch: the DataFrame's columns do not fit the table.
        ValueError: ``method="native"`` where it does not apply (says why).
        ConstraintViolation: a NOT NULL, CHECK or replaceWhere condition fails
            (native method; with the Arrow method the executors find it and
            Spark raises ``PythonException``). Either way the files are deleted.
    """
    if mode not in ("append", "overwrite"):
        raise ValueError(f"mode must be 'append' or 'overwrite', not {mode!r}")
    if replace_where is not None and mode != "overwrite":
        raise ValueError("replace_where needs mode='overwrite'")
    if method not in ("auto", "native", "arrow"):
        raise ValueError(f"method must be 'auto', 'native' or 'arrow', not {method!r}")
    if schema_mode not in ("strict", "merge"):
        raise ValueError(f"schema_mode must be 'strict' or 'merge', not {schema_mode!r}")
    check_app(app_id, app_version)
    uri = check_uri(_core.tx_uri(tx))
    if app_id is not None and already_applied(tx.app_version(app_id), app_version):
        return 0
    exists = tx.has_table(table)
    evolve = False
    if exists:
        meta = _core.tx_table_meta(tx, table)
        check_partition_by(meta, partition_by)
        if schema_mode == "merge":
            merged = merge_dataframe_schema(meta, df.schema)
            evolve = not merged.schema.equals(meta.schema, check_metadata=True)
            meta = merged
    else:  # planned here, created below once the files are written
        check_table_name(table)
        schema = table_schema_from_spark(df.schema)
        meta = _core.new_table_meta(table, schema, partition_by or (), {})
    check_dataframe_schema(df.schema, meta)
    if replace_where is not None:
        check_condition(meta, replace_where)
    store = open_store(uri)
    refusal = native_write_refusal(store, meta, df.schema)
    if method == "native" and refusal is not None:
        raise ValueError(f"mere.spark.write cannot use Spark's Parquet writer: {refusal}")
    # The files are written for the planned table (its id, the merged schema's physical
    # names); ``tx`` gets the new table or schema only with them, so a failed job
    # leaves it as it was.
    local_mode = (df.sparkSession.sparkContext.master or "").startswith("local")
    if method == "native" or (
        method == "auto" and refusal is None and target_file_size is None and local_mode
    ):
        assert isinstance(store, LocalStore)
        adds = write_natively(df, store, meta, replace_where, count_rows=not local_mode)
    else:
        target = WriteTarget(uri, meta, target_file_size or tx.target_file_size, replace_where)
        adds = run_write_job(df, target)
    try:
        # One block: a failure (a duplicate key in the new rows) undoes the overwrite's
        # removals and a new table or schema too, leaving the caller's transaction as it was.
        with tx.savepoint():
            if not exists:
                _core.create_table_with_id(tx, meta)
            elif evolve:
                _core.evolve_schema(tx, table, meta.schema)
            if mode == "overwrite":
                handle = tx.table(table)
                handle.overwrite(handle.schema.empty_table(), where=replace_where)
            tx.add_files(table, adds)
            if app_id is not None and app_version is not None:
                tx.set_app_transaction(app_id, app_version)
    except BaseException:
        delete_files(store, meta, [a.path for a in adds])
        raise
    return sum(a.rows for a in adds)


def job_with_version(job: WriteJob, app_version: int) -> WriteJob:
    """The same job recording another app version (one per streaming micro-batch)."""
    return replace(job, app_version=app_version)
