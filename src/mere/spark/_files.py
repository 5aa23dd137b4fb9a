"""What Spark executors do: write Arrow batches as mere data files, read files back.

Executors never commit. A write task turns the batches Spark hands it into
Parquet data files under the table's prefix, with mere's layout and
statistics (:class:`~mere.data.writer.DataFileWriter`), and reports them as
:class:`~mere.log.actions.AddFile` actions; the driver publishes them in one
commit. A task that fails deletes the files it wrote before re-raising, so
only files of finished tasks are left for the driver to clean up.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.constraints import enforce
from mere.data.reader import read_file
from mere.data.writer import DEFAULT_TARGET_FILE_SIZE, DataFileWriter
from mere.errors import ConstraintViolation, InvalidExpression, MereError
from mere.log.actions import AddFile, TableMeta, action_from_json, action_to_json
from mere.ops.rewrite import match_mask
from mere.schema import conform
from mere.spark._core import iter_row_groups
from mere.spark._types import to_spark_batches
from mere.storage import ObjectStore, open_store

log = logging.getLogger("mere.spark")

#: Spark hands writers batches of 10,000 rows; they are gathered up to this much
#: Arrow memory before being conformed and written, so that row groups are large
#: and per-batch costs (schema checks, partition splits, statistics) stay small.
BUFFER_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class WriteTarget:
    """Everything an executor needs to write data files for one table."""

    uri: str
    table: TableMeta
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    #: With ``replaceWhere``: every written row must satisfy this condition.
    replace_where: str | None = None


def add_to_json(add: AddFile) -> str:
    return json.dumps(action_to_json(add), separators=(",", ":"))


def add_from_json(text: str) -> AddFile:
    action = action_from_json(json.loads(text))
    if not isinstance(action, AddFile):
        raise MereError(f"expected an add action, got {type(action).__name__}")
    return action


def check_condition(table: TableMeta, where: str) -> sqlexpr.Expr:
    """Parse and bind a boolean condition over ``table``."""
    predicate = sqlexpr.bind(sqlexpr.parse(where), table.schema)
    if not sqlexpr.is_boolean(predicate):
        raise InvalidExpression(f"{where!r} is not a boolean condition")
    return predicate


def delete_files(store: ObjectStore, table: TableMeta, paths: Iterable[str]) -> None:
    """Delete data files, best effort: a file left behind is an orphan for vacuum."""
    for path in paths:
        try:
            store.delete(table.prefix + path)
        except MereError as exc:
            log.warning("could not delete %s%s: %s", table.prefix, path, exc)


class _Writer:
    """Writes one task's rows through a DataFileWriter, checking constraints first."""

    def __init__(self, target: WriteTarget, store: ObjectStore) -> None:
        self.target = target
        self.store = store
        self.files = DataFileWriter(store, target.table, target_file_size=target.target_file_size)
        self.check = (
            None
            if target.replace_where is None
            else check_condition(target.table, target.replace_where)
        )

    def write_batches(self, batches: list[pa.RecordBatch]) -> None:
        """Write batches as Spark sent them (conformed to the table schema first)."""
        if batches:
            data = pa.Table.from_batches(batches)
            self.write_rows(conform(data, self.target.table.schema, what="the DataFrame"))

    def write_rows(self, rows: pa.Table) -> None:
        """Write rows already in the table schema, after checking constraints."""
        table = self.target.table
        enforce(table.schema, table.properties, rows, f"the rows written to {table.name!r}")
        if self.check is not None:
            outside = rows.num_rows - (pc.sum(match_mask(self.check, rows)).as_py() or 0)
            if outside:
                raise ConstraintViolation(
                    f"{outside} row(s) written to {table.name!r} do not satisfy "
                    f"replaceWhere {self.target.replace_where!r}"
                )
        self.files.write(rows)

    def finish(self) -> list[AddFile]:
        return self.files.finish()

    def discard(self) -> None:
        """Delete every file this task uploaded (it failed; nobody will reference them)."""
        delete_files(self.store, self.target.table, [a.path for a in self.files.written])


def write_batches(target: WriteTarget, batches: Iterable[pa.RecordBatch]) -> list[AddFile]:
    """Write one task's batches as data files of ``target.table``; return them.

    The batches must hold the table's columns (by name, case-insensitively)
    with types that convert losslessly. They are gathered ``BUFFER_BYTES`` at
    a time, and each such chunk is encoded on a background thread while the
    next one arrives from Spark, so Spark's side of the transfer and the
    Parquet encoding (which releases the GIL) overlap instead of taking
    turns. On any failure the files this task wrote are deleted before the
    error propagates.
    """
    writer = _Writer(target, open_store(target.uri))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mere-write") as encoder:
        in_flight: Future[None] | None = None
        try:
            pending: list[pa.RecordBatch] = []
            pending_bytes = 0
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                pending.append(batch)
                pending_bytes += batch.nbytes
                if pending_bytes >= BUFFER_BYTES:
                    if in_flight is not None:
                        in_flight.result()  # one chunk at a time; its error surfaces here
                    in_flight = encoder.submit(writer.write_batches, pending)
                    pending, pending_bytes = [], 0
            if in_flight is not None:
                in_flight.result()
            in_flight = None
            writer.write_batches(pending)
            return writer.finish()
        except BaseException:
            if in_flight is not None:
                wait([in_flight])  # nothing may still be uploading while the files are deleted
            writer.discard()
            raise


def read_batches(
    uri: str,
    table: TableMeta,
    pieces: Sequence[tuple[AddFile, int, int]],
    columns: Sequence[str],
    target: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """Stream ``columns`` of file pieces as batches of exactly the Arrow schema ``target``.

    A piece ``(add, part, parts)`` is part ``part`` of ``parts`` of a file's row groups.
    """
    store = open_store(uri)
    for add, part, parts in pieces:
        for data in iter_row_groups(store, table, add, columns, part, parts):
            yield from to_spark_batches(data, target)


#: Given a file's rows and the mask of rows matching the condition, the rows to keep.
Change = Callable[[pa.Table, pa.ChunkedArray], pa.Table]


@dataclass(frozen=True)
class Rewritten:
    """What rewriting one file did: rows matched, and the files replacing it."""

    path: str
    matched: int
    adds: list[AddFile]


def rewrite_file(
    target: WriteTarget, store: ObjectStore, add: AddFile, where: str | None, change: Change
) -> Rewritten:
    """Copy-on-write of one data file (the executor side of a Spark delete or update).

    A file with no matching row is left alone (``matched == 0``, no files).
    """
    table = target.table
    predicate = None if where is None else check_condition(table, where)
    rows = read_file(store, table, add, table.schema.names)
    mask = match_mask(predicate, rows)
    matched = pc.sum(mask).as_py() or 0
    if not matched:
        return Rewritten(add.path, 0, [])
    replacement = change(rows, mask)
    writer = _Writer(target, store)
    try:
        if replacement.num_rows:
            writer.write_rows(replacement)
        return Rewritten(add.path, matched, writer.finish())
    except BaseException:
        writer.discard()
        raise
