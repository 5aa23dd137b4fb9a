"""The ``mere`` Python data source for Spark: ``spark.read/df.write.format("mere")``.

Register it once per session with :func:`mere.spark.register`, then::

    df.write.format("mere").option("database", uri).mode("append").save("orders")
    spark.read.format("mere").option("database", uri).option("versionAsOf", 3).load("orders")

Reading pins one snapshot per DataFrame (in ``schema()``, whose state Spark
pickles into the reader), prunes files with the filters Spark pushes down
(``spark.sql.python.filterPushdown.enabled=true``), and reads one Spark
partition per group of file pieces (runs of whole row groups). Writing runs
:mod:`mere.spark._files` on the executors and commits once on the driver;
see :mod:`mere.spark._write`.

Options (case-insensitive):

* ``database`` (required): the database URI. The table is the ``load``/``save``
  argument, or the ``table`` option.
* reads: ``versionAsOf`` (int), ``timestampAsOf`` (ISO date-time, UTC when it
  has no offset, or milliseconds since the epoch).
* writes: ``replaceWhere`` (SQL condition; with ``overwrite``), ``partitionBy``
  (comma-separated, when the write creates the table), ``isolation``,
  ``txnAppId`` + ``txnVersion`` (idempotent writes), ``targetFileSize`` (bytes),
  ``mergeSchema`` (``true``: add the DataFrame's new columns to the table).
* streaming writes: ``txnAppId`` (required): each micro-batch commits with its
  batch id as the app version, so a replayed batch commits nothing.

Any other option is an error that lists the known ones (a misspelt
``versionAsOf`` must not silently read the latest version). Spark itself
passes ``path`` (the ``load``/``save`` argument) and, to streaming sinks,
``checkpointLocation``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    Filter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from mere.database import connect
from mere.errors import InvalidArgument, SchemaMismatch
from mere.log.actions import AddFile, TableMeta
from mere.names import name_key
from mere.spark import _core
from mere.spark._files import add_from_json, add_to_json, read_batches, write_batches
from mere.spark._types import spark_arrow_schema, spark_schema
from mere.spark._write import WriteJob, abort_write, commit_write, job_with_version, prepare_write

log = logging.getLogger("mere.spark")

#: Input partitions hold at most this many bytes of files (Spark's own default) ...
PARTITION_BYTES = 128 * 1024 * 1024
#: ... and at least this many, unless the table is that small ...
MIN_SPLIT_BYTES = 4 * 1024 * 1024
#: ... aiming at this many partitions, so that a table of a few large files still
#: keeps several cores busy (a Python data source cannot ask Spark how many it has).
MIN_PARTITIONS = 8

#: Part ``part`` of ``parts`` of a data file (contiguous whole row groups).
Piece = tuple[AddFile, int, int]


@dataclass(frozen=True)
class PinnedTable:
    """The snapshot a DataFrame reads: one version of one table."""

    uri: str
    version: int
    table: TableMeta


@dataclass
class MereCommitMessage(WriterCommitMessage):
    """What a write task reports: the data files it wrote (add-action JSON)."""

    files: list[str]


#: The options every use takes (``path`` is set by Spark from ``load``/``save``).
COMMON_OPTIONS = ("database", "table", "path")
#: The options of a batch read.
READ_OPTIONS = (*COMMON_OPTIONS, "versionAsOf", "timestampAsOf")
#: The options of a batch write.
WRITE_OPTIONS = (
    *COMMON_OPTIONS,
    "replaceWhere",
    "partitionBy",
    "isolation",
    "txnAppId",
    "txnVersion",
    "targetFileSize",
    "mergeSchema",
)
#: The options of a streaming write (Spark passes ``checkpointLocation`` on).
STREAM_WRITE_OPTIONS = (*WRITE_OPTIONS, "checkpointLocation")


def check_options(options: Any, known: Sequence[str], what: str) -> None:
    """Refuse an option the data source does not know for ``what`` (``reading``, ...).

    Spark hands options over with their names lower-cased, so they are
    compared ignoring case; the error names the known ones as documented.

    Raises:
        InvalidArgument: an unknown option, naming it and listing the known ones.
    """
    refuse_catalog_table(options)
    by_key = {k.lower(): k for k in known}
    unknown = sorted(str(key) for key in options.keys() if str(key).lower() not in by_key)
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise InvalidArgument(
            f"the mere data source does not know the option(s) {names} for {what}; "
            f"known options: {', '.join(known)}"
        )


#: Why ``CREATE TABLE ... USING mere`` cannot work, and what to use instead.
CATALOG_TABLE_HINT = (
    "Spark's session catalog passes a Python data source no options when a table made "
    "with CREATE TABLE ... USING mere is read or written; use CREATE TEMPORARY VIEW <name> "
    "USING mere OPTIONS (database '<uri>', table '<table>') instead"
)


def refuse_catalog_table(options: Any) -> None:
    """Refuse ``CREATE TABLE ... USING mere`` when Spark creates it, with the way out.

    At CREATE TABLE, Spark hands the data source the catalog's table
    properties (``provider``, ``owner``, ``option.*``) besides the options;
    later reads and writes of that table get no options at all.

    Raises:
        InvalidArgument: the options are those of a catalog table being created.
    """
    if "provider" in {str(key).lower() for key in options.keys()}:
        raise InvalidArgument(f"CREATE TABLE ... USING mere is not supported: {CATALOG_TABLE_HINT}")


def _option(options: Any, key: str) -> str | None:
    value = options.get(key)
    return None if value is None or value == "" else str(value)


def _table_name(options: Any) -> str:
    name = _option(options, "table") or _option(options, "path")
    if name is None:
        raise ValueError('name the table: .load("orders") / .save("orders") or option("table")')
    return name


def _database(options: Any) -> str:
    uri = _option(options, "database")
    if uri is None:
        if not dict(options):  # a catalog table's reads and writes get no options
            raise ValueError(
                f'the mere data source needs option("database", <uri>) and got no options: '
                f"{CATALOG_TABLE_HINT}"
            )
        raise ValueError('the mere data source needs option("database", <uri>)')
    return uri


def _int_option(options: Any, key: str) -> int | None:
    text = _option(options, key)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"option {key} must be an integer, not {text!r}") from None


def _bool_option(options: Any, key: str) -> bool:
    text = _option(options, key)
    if text is None or text.strip().lower() == "false":
        return False
    if text.strip().lower() == "true":
        return True
    raise ValueError(f"option {key} must be true or false, not {text!r}")


def parse_timestamp(text: str) -> datetime | int:
    """A ``timestampAsOf`` value: ms since the epoch, or an ISO date-time (UTC if naive)."""
    if text.strip().lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"timestampAsOf must be an ISO date-time or milliseconds since the epoch, not {text!r}"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _messages_files(messages: Sequence[WriterCommitMessage | None]) -> list[AddFile]:
    return [
        add_from_json(text)
        for message in messages
        if isinstance(message, MereCommitMessage)
        for text in message.files
    ]


def plan_partitions(
    files: Sequence[AddFile],
    *,
    max_bytes: int = PARTITION_BYTES,
    min_partitions: int = MIN_PARTITIONS,
) -> list[list[Piece]]:
    """Spark input partitions for ``files``: pieces of about the same size, packed together.

    The split size is the total over ``min_partitions``, kept between
    ``MIN_SPLIT_BYTES`` and ``max_bytes`` (as Spark sizes file splits). A file
    larger than that is cut into parts of whole row groups; smaller pieces are
    packed into groups of at most the split size, largest first.
    """
    total = sum(a.size for a in files)
    split = max(MIN_SPLIT_BYTES, min(max_bytes, total // max(1, min_partitions)))
    pieces = [
        (add, part, parts)
        for add in files
        for parts in [max(1, math.ceil(add.size / split))]
        for part in range(parts)
    ]
    groups: list[list[Piece]] = []
    sizes: list[float] = []
    for piece in sorted(pieces, key=lambda p: p[0].size / p[2], reverse=True):
        size = piece[0].size / piece[2]
        for i, used in enumerate(sizes):
            if used + size <= split:
                groups[i].append(piece)
                sizes[i] += size
                break
        else:
            groups.append([piece])
            sizes.append(size)
    return groups


class MereDataSource(DataSource):
    """A mere table as a Spark data source (batch reads, batch and streaming writes)."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._pinned: PinnedTable | None = None

    #: Options a subclass adds to every use (a wrapping source's own settings).
    extra_options: tuple[str, ...] = ()

    @classmethod
    def name(cls) -> str:
        return "mere"

    def _pin(self) -> PinnedTable:
        """Choose the snapshot once; ``schema()`` and the reader then agree on it."""
        if self._pinned is None:
            check_options(self.options, (*READ_OPTIONS, *self.extra_options), "reading")
            with connect(_database(self.options), create=False) as db:
                version = _int_option(self.options, "versionAsOf")
                text = _option(self.options, "timestampAsOf")
                snapshot = db.snapshot(
                    version=version, timestamp=None if text is None else parse_timestamp(text)
                )
                table = _core.table_meta(snapshot.table(_table_name(self.options)))
                self._pinned = PinnedTable(db.uri, snapshot.version, table)
        return self._pinned

    def schema(self) -> StructType:
        return spark_schema(self._pin().table.schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return MereReader(self._pin(), schema)

    def _job(self, schema: StructType, overwrite: bool, *, streaming: bool) -> WriteJob:
        options = self.options
        known = STREAM_WRITE_OPTIONS if streaming else WRITE_OPTIONS
        check_options(
            options, (*known, *self.extra_options), "a streaming write" if streaming else "writing"
        )
        partition_by = _option(options, "partitionBy")
        app_id = _option(options, "txnAppId")
        if streaming and app_id is None:
            raise ValueError(
                'a streaming write to mere needs option("txnAppId", ...): each micro-batch '
                "records its batch id under it, so a replayed batch is not committed twice"
            )
        return prepare_write(
            _database(options),
            _table_name(options),
            schema,
            overwrite=overwrite,
            replace_where=_option(options, "replaceWhere"),
            partition_by=None
            if partition_by is None
            else [c.strip() for c in partition_by.split(",") if c.strip()],
            isolation=_option(options, "isolation") or "write_serializable",
            app_id=app_id,
            # A stream records each micro-batch's id instead (job_with_version).
            app_version=0 if streaming else _int_option(options, "txnVersion"),
            target_file_size=_int_option(options, "targetFileSize"),
            create_now=streaming,
            merge_schema=_bool_option(options, "mergeSchema"),
        )

    def writer(self, schema: StructType, overwrite: bool) -> MereWriter:
        return MereWriter(self._job(schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> MereStreamWriter:
        return MereStreamWriter(self._job(schema, overwrite, streaming=True))


class MereReader(DataSourceReader):
    """Reads one pinned table version, every live file of it.

    Filters Spark pushes down do not prune files. Spark 4.3 keeps the partitions a
    reader planned after a pushdown on the data source instance, which every scan of
    the same DataFrame shares: a file pruned for ``df.where(a)`` stayed pruned for a
    later ``df.where(b)`` and rows went missing. So ``pushFilters`` accepts the
    filters (Spark still evaluates every one on the rows) and plans nothing with
    them; for file skipping, use the native read (``mere.spark.read``).
    """

    def __init__(self, pinned: PinnedTable, schema: StructType) -> None:
        self._pinned = pinned
        table = pinned.table
        by_key = {name_key(n): n for n in table.schema.names}
        columns = []
        for name in schema.fieldNames():
            if name_key(name) not in by_key:
                raise SchemaMismatch(f"table {table.name!r} has no column {name!r}")
            columns.append(by_key[name_key(name)])
        self._columns = columns
        self._arrow_schema = spark_arrow_schema(schema)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Leave every filter to Spark, and prune nothing by them (see the class)."""
        return filters

    def planned_files(self) -> list[AddFile]:
        """Every live file of the pinned table version (filters prune none: see the class)."""
        pinned = self._pinned
        with connect(pinned.uri, create=False) as db:
            table = _core.find_table(db.snapshot(version=pinned.version), pinned.table.id)
            return [] if table is None else list(table.files)

    def partitions(self) -> list[InputPartition]:
        """Input partitions of file pieces, each ``[add-action JSON, part, parts]``."""
        return [
            InputPartition([[add_to_json(add), part, parts] for add, part, parts in group])
            for group in plan_partitions(self.planned_files())
        ]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        # When partitions() is empty (every file skipped), Spark still runs one task
        # and hands it a partition without a value: it reads nothing.
        value = None if partition is None else partition.value
        pieces = [(add_from_json(text), part, parts) for text, part, parts in value or []]
        pinned = self._pinned
        yield from read_batches(pinned.uri, pinned.table, pieces, self._columns, self._arrow_schema)


class MereWriter(DataSourceArrowWriter):
    """A batch write: executors write files, ``commit`` publishes them in one transaction."""

    def __init__(self, job: WriteJob) -> None:
        self._job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        adds = write_batches(self._job.target, iterator)
        return MereCommitMessage([add_to_json(a) for a in adds])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_write(self._job, _messages_files(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_write(self._job, _messages_files(messages))


class MereStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: one idempotent commit per micro-batch, keyed by its batch id."""

    def __init__(self, job: WriteJob) -> None:
        self._job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        adds = write_batches(self._job.target, iterator)
        return MereCommitMessage([add_to_json(a) for a in adds])

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        commit_write(job_with_version(self._job, batchId), _messages_files(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_write(job_with_version(self._job, batchId), _messages_files(messages))
