"""What Spark executors do: write Arrow batches as mere data files, read files back.

Executors never commit. A write task turns the batches Spark hands it into
Parquet data files under the table's prefix, with mere's layout and
statistics (:class:`~mere.data.writer.DataFileWriter`), and reports them as
:class:`~mere.log.actions.AddFile` actions; the driver publishes them in one
commit. A task that fails deletes the files it wrote before re-raising.

Spark reports a job failed as soon as one task fails, while its other tasks
may still be writing (or not even started: their Python workers start
late); their reports never reach the driver. So each write job has a
location of its own (:class:`JobLocation`), opened by the driver before the
job runs, where its tasks record every data file before uploading it. The
driver ends the job there (:func:`end_job`): it closes the location, which
a task checks when it starts and before it finishes (finding it closed, it
deletes its files), waits a bounded time for the tasks still running, and
deletes every recorded file it does not publish.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.constraints import enforce
from mere.data.reader import read_file
from mere.data.writer import DEFAULT_TARGET_FILE_SIZE, DataFileWriter, delete_orphans
from mere.errors import ConstraintViolation, InvalidExpression, MereError
from mere.log.actions import AddFile, TableMeta, action_from_json, action_to_json
from mere.ops.rewrite import match_mask
from mere.schema import conform
from mere.spark._core import iter_row_groups
from mere.spark._types import to_spark_batches
from mere.storage import LocalStore, ObjectMeta, ObjectStore, open_store

log = logging.getLogger("mere.spark")

#: Spark hands writers batches of 10,000 rows; they are gathered up to this much
#: Arrow memory before being conformed and written, so that row groups are large
#: and per-batch costs (schema checks, partition splits, statistics) stay small.
BUFFER_BYTES = 32 * 1024 * 1024

#: A Spark write job's location is ``<table prefix>_spark-<job id>/`` (format §6).
JOB_LOCATION_PREFIX = "_spark-"
#: How long ending a failed job waits, at most, for its tasks still running to stop.
#: Spark kills the Python workers of a failed job's tasks within seconds
#: (``spark.python.task.killTimeout``, 2 s by default, after it notices the kill).
STRAGGLER_WAIT_SECONDS = 30.0
_PENDING = ".pending"


class JobEnded(MereError):
    """A write task found its job over (another task failed): it deleted its own files."""


def open_job(store: ObjectStore, table: TableMeta) -> JobLocation:
    """A new location for a write job of ``table``, open: its tasks may write."""
    job = JobLocation(f"{table.prefix}{JOB_LOCATION_PREFIX}{secrets.token_hex(8)}/")
    store.put(job.open, b"")
    return job


@dataclass(frozen=True)
class JobLocation:
    """The location of one Spark write job under its table: ``<table prefix>_spark-<id>/``.

    Data files are written in mere's layout (format §6), not here: the job's
    location records what its tasks do, so that whoever ends the job (the
    driver: a commit or an abort) can delete every file the job does not
    publish, those of tasks still running when Spark reported the job
    failed included. It holds

    * ``open``: put by the driver before the job runs (:func:`open_job`), deleted
      first when the job ends. A task checks for it when it starts and after its
      last upload; not finding it, the task deletes every file it uploaded and fails.
      (A mark that the job *ended* would not do: a task whose Python worker
      starts after the driver removed the location would not find it.)
    * ``files/<data path>.pending``: put by a task before it uploads that data file;
    * ``tasks/<attempt>``: a task attempt writing (put when it starts, deleted when it ends).

    The driver's side and the tasks must hold the same location: the data
    source pickles one writer for both, and :func:`~mere.spark._write.run_write_job`
    sends its own to its tasks. (A streaming sink's commits get a writer
    planned anew, which cannot know its tasks' location: streams go without.)
    A job that runs longer than vacuum's retention may lose its ``open`` mark,
    as it may lose its data files: its tasks then fail instead.
    """

    prefix: str

    @property
    def open(self) -> str:
        return self.prefix + "open"

    @property
    def files(self) -> str:
        return self.prefix + "files/"

    @property
    def tasks(self) -> str:
        return self.prefix + "tasks/"

    def file_marker(self, path: str) -> str:
        return f"{self.files}{path}{_PENDING}"


@dataclass(frozen=True)
class WriteTarget:
    """Everything an executor needs to write data files for one table."""

    uri: str
    table: TableMeta
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    #: With ``replaceWhere``: every written row must satisfy this condition.
    replace_where: str | None = None
    #: Where the job's tasks record their files (None: not recorded; the driver
    #: then knows only the files of the tasks that reported them).
    job: JobLocation | None = None


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
    delete_orphans(store, (table.prefix + path for path in paths))


class _RecordingStore(ObjectStore):
    """The store as a task of a job writes to it: each data file is recorded before its upload."""

    def __init__(self, inner: ObjectStore, table: TableMeta, job: JobLocation) -> None:
        self.inner = inner
        self.table = table
        self.job = job
        self.uri = inner.uri
        self.concurrent_reads = inner.concurrent_reads

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        if key.startswith(self.table.prefix):
            self.inner.put(self.job.file_marker(key[len(self.table.prefix) :]), b"")
        self.inner.put_if_absent(key, data)

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        self.inner.put(key, data)

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def head(self, key: str) -> ObjectMeta:
        return self.inner.head(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        return self.inner.list(prefix, start_after)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def open_input(self, key: str) -> pa.NativeFile:
        return self.inner.open_input(key)


class _JobTask:
    """A task attempt of a job: registered in the job's location while it writes."""

    def __init__(self, store: ObjectStore, job: JobLocation) -> None:
        self.store = store
        self.job = job
        self.key = f"{job.tasks}{secrets.token_hex(8)}"
        info = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        store.put(self.key, json.dumps(info).encode())

    def check_running(self) -> None:
        """Raise JobEnded if the job is over (the caller then deletes its files)."""
        if not self.store.exists(self.job.open):
            raise JobEnded(
                "the Spark job this task writes for has ended (another task failed, or "
                "the job was committed without this attempt): its files are deleted"
            )

    def leave(self) -> None:
        try:
            self.store.delete(self.key)
        except MereError as exc:
            log.warning("could not delete %s: %s", self.key, exc)


def _recorded_files(store: ObjectStore, job: JobLocation) -> list[tuple[str, str]]:
    """``(data path, marker key)`` of every file the job's tasks recorded."""
    found = []
    for meta in store.list(job.files):
        if meta.key.endswith(_PENDING):
            found.append((meta.key[len(job.files) : -len(_PENDING)], meta.key))
    return found


def _running_tasks(store: ObjectStore, job: JobLocation) -> list[str]:
    return [meta.key for meta in store.list(job.tasks)]


def _delete_recorded(
    store: ObjectStore, table: TableMeta, job: JobLocation, keep: Collection[str]
) -> None:
    for path, marker in _recorded_files(store, job):
        if path not in keep:
            store.delete(table.prefix + path)
            store.delete(marker)


def end_job(
    store: ObjectStore,
    table: TableMeta,
    job: JobLocation,
    keep: Collection[str] = (),
    *,
    wait_seconds: float = 0.0,
) -> None:
    """End a write job: delete every file its tasks recorded but ``keep``, then its location.

    First the job's location is closed, so that a task still running (or
    starting late) deletes its own files instead of finishing. With
    ``wait_seconds`` (a failed job: Spark reports the failure while other
    tasks may still write), the tasks still registered are waited for that
    long at most, and what they recorded meanwhile is deleted too. The
    location is then removed, unless a task is still registered (its
    records are then orphans that vacuum reclaims). Best effort: a storage
    error is logged, never raised (the job's outcome is settled; leftovers
    are orphans).
    """
    try:
        store.delete(job.open)
        _delete_recorded(store, table, job, keep)
        running = _running_tasks(store, job)
        deadline = time.monotonic() + wait_seconds
        pause = 0.02
        while running and time.monotonic() < deadline:
            time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            pause = min(pause * 2, 0.5)
            running = _running_tasks(store, job)
        _delete_recorded(store, table, job, keep)
        if running:
            log.warning(
                "%d task(s) of the Spark job at %s still run: they delete their own files",
                len(running),
                job.prefix,
            )
            return
        for meta in list(store.list(job.prefix)):
            store.delete(meta.key)
        if isinstance(store, LocalStore):
            _remove_empty_directories(os.path.join(store.root, *job.prefix.strip("/").split("/")))
    except MereError as exc:
        log.warning("could not clean up the Spark job at %s: %s", job.prefix, exc)


def _remove_empty_directories(top: str) -> None:
    """Remove ``top`` and the directories under it that are empty (a local job location)."""
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
        try:
            os.rmdir(dirpath)
        except OSError:
            pass


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

    With ``target.job``, the task registers in the job's location, records
    each file there before uploading it, and checks that the job is still
    open when it starts and before it returns (see :class:`JobLocation`).
    """
    store = open_store(target.uri)
    job = target.job
    if job is None:
        return _write_task(target, store, batches, None)
    task = _JobTask(store, job)
    try:
        task.check_running()
        return _write_task(target, _RecordingStore(store, target.table, job), batches, task)
    finally:
        task.leave()


def _write_task(
    target: WriteTarget,
    store: ObjectStore,
    batches: Iterable[pa.RecordBatch],
    task: _JobTask | None,
) -> list[AddFile]:
    writer = _Writer(target, store)
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
            adds = writer.finish()
            if task is not None:
                task.check_running()  # after the last upload: see JobLocation
            return adds
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
    With ``target.job``, the new files are recorded in the job's location
    as :func:`write_batches` records them.
    """
    table = target.table
    predicate = None if where is None else check_condition(table, where)
    rows = read_file(store, table, add, table.schema.names)
    mask = match_mask(predicate, rows)
    matched = pc.sum(mask).as_py() or 0
    if not matched:
        return Rewritten(add.path, 0, [])
    replacement = change(rows, mask)
    job = target.job
    task = None if job is None else _JobTask(store, job)
    writer = _Writer(target, store if job is None else _RecordingStore(store, table, job))
    try:
        if task is not None:
            task.check_running()
        if replacement.num_rows:
            writer.write_rows(replacement)
        adds = writer.finish()
        if task is not None:
            task.check_running()
        return Rewritten(add.path, matched, adds)
    except BaseException:
        writer.discard()
        raise
    finally:
        if task is not None:
            task.leave()
