"""mere with PySpark: a ``mere`` data source, native reads, transactional writes, DML.

Reads::

    mere.spark.register(spark)                       # the "mere" data source, once per session
    spark.read.format("mere").option("database", uri).load("orders")
    mere.spark.read(spark, uri, "orders", version=3)  # Spark's own Parquet reader (fastest)

Writes::

    df.write.format("mere").option("database", uri).mode("append").save("orders")
    with mere.connect(uri).transaction() as tx:       # several tables, one atomic commit
        mere.spark.write(tx, orders_df, "orders")
        mere.spark.write(tx, lineitem_df, "lineitem")

Streaming: ``writeStream.foreachBatch(mere.spark.foreach_batch(uri, table, app_id))``
or ``writeStream.format("mere").option("txnAppId", ...)``, exactly once per
micro-batch. Row changes on tables too large for one machine:
:func:`delete` and :func:`update` rewrite the affected files on the executors,
and :func:`merge` upserts a DataFrame (the ``TxTable.merge`` builder; Spark
joins it with the candidate files)::

    (mere.spark.merge(spark, uri, "orders", changes_df, on="t.id = s.id")
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert_all()
        .execute())

Spark SQL: :func:`views` registers every table as a temp view, all at one
version; :func:`transaction` runs Spark SQL statements (queries, INSERT,
UPDATE, DELETE, MERGE) in one mere transaction that commits them together::

    with mere.spark.transaction(spark, uri) as tx:
        tx.sql("INSERT INTO orders SELECT * FROM new_orders")
        tx.sql("UPDATE customers SET last_order = DATE'2024-05-01' WHERE cid = 7")

Spark workers must be able to import mere (install it where they run) and
reach the database's store (a local path in local mode, or a store every
executor can reach).
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "mere.spark needs PySpark: pip install 'mere[spark]' (and Java 17 for Spark)"
    ) from exc

import os
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pyspark.sql import SparkSession

from mere.database import connect
from mere.spark._dml import delete, merge, update
from mere.spark._filter import where
from mere.spark._native import native_read, native_read_refusal
from mere.spark._sql import PinnedViews, SparkTransaction, transaction, views
from mere.spark._streaming import foreach_batch
from mere.spark._write import write
from mere.spark.datasource import MereDataSource
from mere.timestamps import epoch_ms

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

#: Spark's switch for filter pushdown into Python data sources.
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
#: Sessions the data source was registered with (registration costs about a second).
_registered: set[int] = set()


def register(spark: SparkSession) -> None:
    """Register the ``mere`` data source with a session (idempotent).

    Spark looks Python data sources up in the JVM's *active* session of the
    calling thread, and a thread other than the one that built the session
    has none (``DATA_SOURCE_NOT_FOUND``). So this also makes ``spark`` the
    active session of the calling thread when it has none: call it once in
    each thread that uses ``format("mere")``.

    It also turns on ``spark.sql.python.filterPushdown.enabled`` for the
    session: the ``mere`` reader accepts pushed filters (to prune files), and
    Spark refuses to read from such a source while the setting is off
    (``DATA_SOURCE_PUSHDOWN_DISABLED``).
    """
    _activate(spark)
    if (spark.conf.get(PUSHDOWN_CONF, "false") or "").lower() != "true":
        spark.conf.set(PUSHDOWN_CONF, "true")
    key = id(spark._jsparkSession)
    if key not in _registered:
        spark.dataSource.register(MereDataSource)
        _registered.add(key)


def _activate(spark: SparkSession) -> None:
    """Make ``spark`` the JVM's active session in this thread, unless one is set."""
    jvm = spark.sparkContext._jvm
    if jvm is None:  # pragma: no cover - a stopped context
        return
    sessions = SparkSession._get_j_spark_session_class(jvm)  # the class PySpark itself uses
    if not sessions.getActiveSession().isDefined():
        sessions.setActiveSession(spark._jsparkSession)


def read(
    spark: SparkSession,
    uri: str | os.PathLike[str],
    table: str,
    version: int | None = None,
    timestamp: datetime | int | None = None,
    *,
    filter: str | None = None,
    method: Literal["auto", "native", "datasource"] = "auto",
) -> DataFrame:
    """A table at a version (latest by default) as a DataFrame.

    ``native`` resolves the snapshot's files on the driver and reads them
    with Spark's Parquet reader: column pruning, row-group skipping and file
    splitting included. ``datasource`` reads through the ``mere`` Python data
    source (any store the executors can open; timestamps finer than
    microseconds are truncated). ``auto`` (the default) is ``native`` unless
    the table has a column Spark's Parquet reader cannot read (nanosecond
    timestamps, durations), then ``datasource``.

    Args:
        version, timestamp: time travel (a datetime, or ms since the epoch).
        filter: a SQL condition in mere's dialect, meaning what it means in mere's
            scans (and DuckDB): the rows are kept by mere's engine on the
            DataFrame's Arrow batches (``mapInArrow``), not by Spark's SQL, whose
            answers differ (REAL literals, LIKE escapes, zoned timestamps, division
            by zero). With the native read, files it rules out (by partition values
            and statistics) are not read.
    """
    location = os.fspath(uri)
    if method not in ("auto", "native", "datasource"):
        raise ValueError(f"method must be 'auto', 'native' or 'datasource', not {method!r}")
    if method == "auto":
        with connect(location, create=False) as db:
            snapshot = db.snapshot(version=version, timestamp=timestamp)
        readable = native_read_refusal(snapshot.table(table).schema) is None
        method = "native" if readable else "datasource"
        # Both reads then take the version just resolved (a commit meanwhile changes nothing).
        version, timestamp = snapshot.version, None
    if method == "native":
        return native_read(
            spark, location, table, version=version, timestamp=timestamp, filter=filter
        )
    register(spark)
    reader = spark.read.format("mere").option("database", location)
    if version is not None:
        reader = reader.option("versionAsOf", version)
    if timestamp is not None:
        reader = reader.option("timestampAsOf", epoch_ms(timestamp))  # naive: UTC
    df = reader.load(table)
    if filter is None:
        return df
    with connect(location, create=False) as db:
        schema = db.snapshot(version=version, timestamp=timestamp).table(table).schema
    return where(df, schema, filter)


__all__ = [
    "MereDataSource",
    "PinnedViews",
    "SparkTransaction",
    "delete",
    "foreach_batch",
    "merge",
    "read",
    "register",
    "transaction",
    "update",
    "views",
    "write",
]
