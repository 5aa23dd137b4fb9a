"""DELETE and UPDATE with Spark: copy-on-write of the affected files on the executors.

The driver chooses the files a condition may touch from partition values
and statistics (recording the read in the transaction, for conflict
detection); executors each read some of those files, evaluate the condition
with mere's own SQL evaluator (so the result equals the pyarrow-side
``TxTable.delete``/``update`` exactly), and write the surviving or updated
rows as new files. A file with no matching row is left alone. The driver
then removes the rewritten files and adds the new ones in one commit; it
never holds any rows. MERGE (:func:`merge`) joins a DataFrame with the
target's candidate files on the executors (:mod:`mere.spark._merge`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from mere.database import connect
from mere.errors import InvalidExpression
from mere.log.actions import AddFile
from mere.ops.update import UpdateRows
from mere.spark import _core
from mere.spark._files import (
    STRAGGLER_WAIT_SECONDS,
    Rewritten,
    WriteTarget,
    add_from_json,
    add_to_json,
    delete_files,
    end_job,
    open_job,
    rewrite_file,
)
from mere.spark._merge import SparkMerger
from mere.spark._write import check_uri
from mere.storage import open_store
from mere.txn.context import run_statement
from mere.txn.transaction import DEFAULT_ISOLATION, Isolation, Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")


class DeleteRows:
    """The change of a DELETE: keep the rows that do not match."""

    def __call__(self, rows: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
        return rows.filter(pc.invert(mask))


def _rewritten_to_json(r: Rewritten) -> str:
    return json.dumps(
        {"path": r.path, "matched": r.matched, "adds": [add_to_json(a) for a in r.adds]}
    )


def _rewritten_from_json(text: str) -> Rewritten:
    obj = json.loads(text)
    return Rewritten(obj["path"], obj["matched"], [add_from_json(a) for a in obj["adds"]])


def rewrite_job(
    spark: SparkSession,
    target: WriteTarget,
    files: list[AddFile],
    where: str | None,
    change: Callable[[pa.Table, pa.ChunkedArray], pa.Table],
) -> list[Rewritten]:
    """Rewrite ``files`` on the executors; return what happened to each.

    The job gets a location of its own (:class:`~mere.spark._files.JobLocation`,
    unless ``target`` names one) where its tasks record their files, as write
    jobs do: if the job fails, every file its tasks wrote is deleted, those
    of tasks still running when Spark reported the failure included (they
    are waited for, :data:`~mere.spark._files.STRAGGLER_WAIT_SECONDS` at most,
    and delete their own files if they finish later); files of task attempts
    whose output Spark discarded are deleted too.
    """
    sc = spark.sparkContext
    store = open_store(target.uri)
    if target.job is None:
        target = replace(target, job=open_job(store, target.table))
    job = target.job
    assert job is not None

    def task(texts: Iterable[str]) -> Iterable[str]:
        task_store = open_store(target.uri)
        done: list[Rewritten] = []
        try:
            for text in texts:
                done.append(rewrite_file(target, task_store, add_from_json(text), where, change))
        except BaseException:
            delete_files(task_store, target.table, [a.path for r in done for a in r.adds])
            raise
        return [_rewritten_to_json(r) for r in done]

    slices = max(1, min(len(files), 4 * sc.defaultParallelism))
    try:
        results = (
            sc.parallelize([add_to_json(f) for f in files], slices).mapPartitions(task).collect()
        )
    except BaseException:
        end_job(store, target.table, job, wait_seconds=STRAGGLER_WAIT_SECONDS)
        raise
    rewritten = [_rewritten_from_json(text) for text in results]
    end_job(store, target.table, job, {a.path for r in rewritten for a in r.adds})
    return rewritten


def _rewrite(
    spark: SparkSession,
    tx: Transaction,
    table: str,
    where: str | None,
    change: Callable[[pa.Table, pa.ChunkedArray], pa.Table],
    operation: str,
) -> int:
    """Rewrite the files holding rows that match ``where``; return how many matched."""
    uri = check_uri(_core.tx_uri(tx))
    meta = _core.tx_table_meta(tx, table)
    _, files = _core.plan_tx_read(tx, table, where)
    target = WriteTarget(uri, meta, tx.target_file_size)
    rewritten = rewrite_job(spark, target, files, where, change) if files else []
    changed = [r for r in rewritten if r.matched]
    by_path = {f.path: f for f in files}
    new = [a for r in changed for a in r.adds]
    try:
        _core.remove_files(tx, table, [by_path[r.path] for r in changed])
        if new:
            tx.add_files(table, new, operation=operation)  # owned: a failed commit deletes them
    except BaseException:
        delete_files(open_store(uri), meta, [a.path for a in new])
        raise
    return sum(r.matched for r in changed)


def _in_transaction(
    uri: str | os.PathLike[str] | Transaction,
    isolation: Isolation,
    work: Callable[[Transaction], T],
) -> T:
    if isinstance(uri, Transaction):
        tx = uri
        return run_statement(tx, lambda _: work(tx), autocommit=False)
    with connect(uri, create=False) as db:
        own = db.begin(isolation)
        return run_statement(own, lambda _: work(own), autocommit=True)


def delete(
    spark: SparkSession,
    uri: str | os.PathLike[str] | Transaction,
    table: str,
    where: str,
    *,
    isolation: Isolation = DEFAULT_ISOLATION,
) -> int:
    """Delete the rows of ``table`` for which ``where`` is TRUE, rewriting files with Spark.

    ``uri`` is a database URI (the delete commits on its own) or an open
    :class:`~mere.Transaction` (the delete becomes part of it). Returns the
    number of rows deleted. Same semantics as ``TxTable.delete``.
    """
    if not isinstance(where, str) or not where.strip():
        raise InvalidExpression("delete needs a condition; to empty a table use overwrite")

    def work(tx: Transaction) -> int:
        deleted = _rewrite(spark, tx, table, where, DeleteRows(), "DELETE")
        _core.record_operation(tx, table, "DELETE", predicate=where, numDeletedRows=deleted)
        return deleted

    return _in_transaction(uri, isolation, work)


def update(
    spark: SparkSession,
    uri: str | os.PathLike[str] | Transaction,
    table: str,
    where: str | None,
    set: Mapping[str, Any],
    *,
    isolation: Isolation = DEFAULT_ISOLATION,
) -> int:
    """Set columns of the rows of ``table`` where ``where`` is TRUE, rewriting files with Spark.

    ``set`` maps columns to SQL expressions over the row (strings; a string
    constant is written ``"'text'"``) or Python literals, as in
    ``TxTable.update``. Returns the number of rows updated.
    """

    def work(tx: Transaction) -> int:
        change = UpdateRows(_core.tx_table_meta(tx, table).schema, dict(set))
        change.assignments()  # fail on the driver, before any job
        updated = _rewrite(spark, tx, table, where, change, "UPDATE")
        _core.record_operation(
            tx,
            table,
            "UPDATE",
            predicate=where,
            set={k: str(v) for k, v in set.items()},
            numUpdatedRows=updated,
        )
        return updated

    return _in_transaction(uri, isolation, work)


def merge(
    spark: SparkSession,
    uri: str | os.PathLike[str] | Transaction,
    table: str,
    source: DataFrame,
    on: str,
    *,
    source_alias: str = "s",
    target_alias: str = "t",
    isolation: Isolation = DEFAULT_ISOLATION,
) -> SparkMerger:
    """Start a MERGE of the DataFrame ``source`` into ``table``; finish it with ``execute()``.

    The builder is the one of ``TxTable.merge`` (``when_matched_update[_all]``,
    ``when_matched_delete``, ``when_not_matched_insert[_all]``, same SQL MERGE
    semantics, same :class:`~mere.ops.merge.MergeMetrics`), with a Spark
    DataFrame as the source: Spark joins it with the target files that may
    match on the executors, and only files holding an updated or deleted row
    are rewritten (see :mod:`mere.spark._merge`).

    ``uri`` is a database URI (``execute()`` commits a transaction of its own,
    reading the latest version as of this call, and aborts it on failure) or
    an open :class:`~mere.Transaction` (the merge becomes part of it).

    Raises:
        InvalidExpression: a bad ``on``, alias or clause (at the call that gave it).
        SchemaMismatch: the source is not a DataFrame, or the table has a column
            Spark cannot hold exactly (nanosecond timestamps).
    """
    if isinstance(uri, Transaction):
        return SparkMerger(
            spark, uri, table, source, on, source_alias=source_alias, target_alias=target_alias
        )
    db = connect(uri, create=False)
    try:
        tx = db.transaction(isolation)
        try:
            return SparkMerger(
                spark,
                tx,
                table,
                source,
                on,
                source_alias=source_alias,
                target_alias=target_alias,
                commit=True,
                owner=db,
            )
        except BaseException:
            tx.abort()
            raise
    except BaseException:
        db.close()
        raise
