"""A scripted Spark write job for the tests: one task fails while another still writes.

This module runs on Spark's Python workers (the tests ship it with
``SparkContext.addPyFile``), so its functions and classes are pickled by
reference. Tasks coordinate through signal files in a directory every
process sees (local mode). The job's partitions play a role each, by the
first ``id`` they hold:

* the **finisher** (``id`` 0) writes its rows and reports them;
* the **failer** (``id`` ``FAILER``) waits until the finisher has finished and the
  straggler has all its rows, then raises: Spark fails the job;
* the **straggler** (``id`` ``STRAGGLER``) takes all its rows, then holds them
  until Spark reports the job failed (the test's driver signals ``job-failed``:
  :func:`signal_job_failure`), and only then uploads its file, as a task that
  was still writing when the job failed does. Its report never reaches the
  driver: without a location of the job's own, nobody knows of that file.

Spark kills the tasks of a failed job within seconds
(``spark.python.task.killTimeout``); the straggler, released within
milliseconds of the failure, finishes long before. Every wait is bounded
(``WAIT_SECONDS``); the straggler records whether it was released or gave
up, so a test can tell the scenario happened as scripted.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

from mere.log.actions import AddFile
from mere.spark import _files
from mere.spark._files import WriteTarget
from mere.spark.datasource import MereCommitMessage, MereDataSource, MereWriter

#: Rows per partition; the failer's and the straggler's partitions start at these ids.
ROWS = 1_000
FAILER = ROWS
STRAGGLER = 2 * ROWS
#: The longest any scripted task waits for another.
WAIT_SECONDS = 60.0


def _until(check: Callable[[], bool], seconds: float = WAIT_SECONDS) -> bool:
    """Poll ``check()`` until it holds (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def _signal(signals: str, name: str, payload: object = None) -> None:
    path = Path(signals, name)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def _first_id(batch: pa.RecordBatch) -> int:
    return int(batch.column(0)[0].as_py())


def scripted_write(
    signals: str, target: WriteTarget, batches: Iterable[pa.RecordBatch]
) -> list[AddFile]:
    """``write_batches`` as the task's role says (see the module's docstring)."""
    rows = iter(batches)
    first = next(rows, None)
    if first is None:
        return _files.write_batches(target, iter(()))
    role = {0: "finisher", FAILER: "failer", STRAGGLER: "straggler"}.get(_first_id(first))

    def all_rows() -> Iterator[pa.RecordBatch]:
        yield first
        yield from rows

    if role == "failer":
        ready = _until(lambda: Path(signals, "finisher").exists()) and _until(
            lambda: Path(signals, "straggler-ready").exists()
        )
        raise ValueError(f"scripted failure (the others {'ready' if ready else 'not ready'})")
    if role == "finisher":
        adds = _files.write_batches(target, all_rows())
        _signal(signals, "finisher", [target.table.prefix + a.path for a in adds])
        return adds
    if role != "straggler":
        return _files.write_batches(target, all_rows())

    outcome: dict[str, object] = {}

    def held() -> Iterator[pa.RecordBatch]:
        yield from all_rows()
        # Every row is in the writer (nothing uploaded yet): hold them until the job failed.
        _signal(signals, "straggler-ready")
        outcome["released"] = _until(lambda: Path(signals, "job-failed").exists())

    try:
        adds = _files.write_batches(target, held())
        outcome["wrote"] = [a.path for a in adds]
        return adds
    except BaseException as exc:
        outcome["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        _signal(signals, "straggler-done", outcome)


@contextmanager
def signal_job_failure(spark: SparkSession, signals: str) -> Iterator[None]:
    """Run the block's Spark jobs in a job group; signal ``job-failed`` once one fails.

    On the driver: a thread watches Spark's status tracker (the scheduler's
    own account of the job) while the block runs.
    """
    sc = spark.sparkContext
    group = f"mere-scripted-{secrets.token_hex(4)}"
    sc.setJobGroup(group, "a scripted failing write")
    stop = threading.Event()

    def watch() -> None:
        tracker = sc.statusTracker()
        while not stop.is_set():
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                if info is not None and info.status == "FAILED":
                    _signal(signals, "job-failed", job)
                    return
            stop.wait(0.01)

    watcher = threading.Thread(target=watch, name="mere-job-watcher", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        stop.set()
        watcher.join(WAIT_SECONDS)
        sc._jsc.clearJobGroup()


class ScriptedWriter(MereWriter):
    """The data source's writer, with the tasks' roles scripted."""

    def __init__(self, writer: MereWriter, signals: str) -> None:
        super().__init__(writer._job)
        self._signals = signals

    def write(self, iterator: Iterator[pa.RecordBatch]) -> MereCommitMessage:
        adds = scripted_write(self._signals, self._job.target, iterator)
        return MereCommitMessage([_files.add_to_json(a) for a in adds])


class ScriptedSource(MereDataSource):
    """``format("mere_scripted")``: the mere data source with option ``signals``."""

    extra_options = ("signals",)

    @classmethod
    def name(cls) -> str:
        return "mere_scripted"

    def writer(self, schema: object, overwrite: bool) -> ScriptedWriter:
        return ScriptedWriter(super().writer(schema, overwrite), self.options["signals"])  # type: ignore[arg-type]
