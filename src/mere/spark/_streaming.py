"""Exactly-once Structured Streaming into mere with ``foreachBatch``."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from mere.spark._write import Mode, check_uri, open_database, write
from mere.txn.transaction import DEFAULT_ISOLATION, Isolation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def foreach_batch(
    uri: str | os.PathLike[str],
    table: str,
    app_id: str,
    *,
    mode: Mode = "append",
    partition_by: Sequence[str] | None = None,
    isolation: Isolation = DEFAULT_ISOLATION,
) -> Callable[[DataFrame, int], None]:
    """A ``writeStream.foreachBatch`` function writing each micro-batch exactly once.

    Each micro-batch is written in one transaction that records ``batch_id``
    as the version of ``app_id``; a batch Spark replays after a restart (its
    output landed but the checkpoint did not record it) finds its id already
    recorded and commits nothing::

        (stream.writeStream
            .foreachBatch(mere.spark.foreach_batch(uri, "events", app_id="events-ingest"))
            .option("checkpointLocation", checkpoint)
            .start())

    Use one ``app_id`` per checkpoint location: batch ids restart at 0 with a
    new checkpoint, and would all be skipped under the old id. The database
    must exist (each batch raises ``DatabaseNotFound`` otherwise); a missing
    table is created by the first batch.
    """
    location = check_uri(os.fspath(uri))

    def write_batch(df: DataFrame, batch_id: int) -> None:
        with open_database(location) as db, db.transaction(isolation) as tx:
            write(
                tx,
                df,
                table,
                mode=mode,
                partition_by=partition_by,
                app_id=app_id,
                app_version=batch_id,
            )

    return write_batch
