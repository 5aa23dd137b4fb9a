"""A write job that fails while another of its tasks still writes leaves no file behind.

Spark reports a job failed (the data source's ``abort``, the driver's
exception) as soon as one task fails; other tasks may still be writing, and
their reports never reach the driver. :mod:`spark_faults` scripts that
deterministically: a straggler holds its rows until Spark reports the job
failed, then uploads its file.
"""

from __future__ import annotations

import json
import threading
import time
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
import spark_faults
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import mere
import mere.spark
from mere.errors import DatabaseNotFound
from mere.spark import _core, _write, datasource
from mere.spark._files import (
    JobEnded,
    WriteTarget,
    end_job,
    open_job,
    rewrite_file,
    write_batches,
)
from mere.spark._write import commit_write, prepare_write
from mere.storage import open_store

SparkError = (PySparkException, Py4JJavaError)
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int64())])


@pytest.fixture(scope="module")
def scripted(spark: SparkSession) -> SparkSession:
    """The session, with :mod:`spark_faults` on the workers and ``mere_scripted`` registered."""
    path = str(Path(spark_faults.__file__).resolve())
    if not any(Path(p).name == "spark_faults.py" for p in spark.sparkContext._python_includes):
        spark.sparkContext.addPyFile(path)
    spark.dataSource.register(spark_faults.ScriptedSource)
    return spark


def _table(uri: str) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", SCHEMA)
    db.table("t").append(pa.table({"id": [-1], "v": [-2]}, schema=SCHEMA))
    return db


def _frame(spark: SparkSession):
    rows = 3 * spark_faults.ROWS
    return spark.range(0, rows, numPartitions=3).select("id", (F.col("id") * 2).alias("v"))


def _files(uri: str) -> set[Path]:
    """Every file under the database's tables (data files and anything else)."""
    return {p for p in Path(uri, "tables").rglob("*") if p.is_file()}


def _check_straggler(signals: Path) -> None:
    """The straggler uploaded its file after the job failed (the scenario happened)."""
    done = signals / "straggler-done"
    deadline = time.monotonic() + spark_faults.WAIT_SECONDS
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.exists(), "the straggler task never finished"
    outcome = json.loads(done.read_text())
    assert outcome.get("released") is True, outcome
    # It uploaded a file, which it reported (too late: the job had failed) or, finding
    # the job already ended, deleted itself.
    assert outcome.get("wrote") or "JobEnded" in outcome.get("error", ""), outcome


def _signals(tmp_path: Path) -> Path:
    signals = tmp_path / "signals"
    signals.mkdir()
    return signals


def test_a_data_source_job_failing_while_a_task_writes_leaves_no_file(scripted, uri, tmp_path):
    db = _table(uri)
    version, before = db.version, _files(uri)
    signals = _signals(tmp_path)
    with (
        spark_faults.signal_job_failure(scripted, str(signals)),
        pytest.raises(SparkError, match="scripted failure"),
    ):
        (
            _frame(scripted)
            .write.format("mere_scripted")
            .option("database", uri)
            .option("signals", str(signals))
            .mode("append")
            .save("t")
        )
    _check_straggler(signals)
    assert _files(uri) == before
    assert db.version == version
    assert db.table("t").scan().num_rows == 1


def test_an_arrow_write_failing_while_a_task_writes_leaves_no_file(
    scripted, uri, tmp_path, monkeypatch
):
    db = _table(uri)
    version, before = db.version, _files(uri)
    signals = _signals(tmp_path)
    # The Arrow path's tasks call _write.write_batches: the closure takes the scripted one.
    monkeypatch.setattr(_write, "write_batches", partial(spark_faults.scripted_write, str(signals)))
    with (
        spark_faults.signal_job_failure(scripted, str(signals)),
        pytest.raises(SparkError, match="scripted failure"),
        db.transaction() as tx,
    ):
        mere.spark.write(tx, _frame(scripted), "t", method="arrow")
    _check_straggler(signals)
    assert _files(uri) == before
    assert db.version == version
    assert db.table("t").scan().num_rows == 1


def test_a_successful_job_leaves_only_its_data_files(spark, uri):
    """The job's location is removed once its files are committed (both write paths)."""
    db = _table(uri)
    _frame(spark).write.format("mere").option("database", uri).mode("append").save("t")
    with db.transaction() as tx:
        mere.spark.write(tx, _frame(spark), "t", method="arrow")
    table = db.snapshot().table("t")
    live = {table.meta.prefix + a.path for a in table.files}
    assert {str(p.relative_to(uri)) for p in _files(uri)} == live
    assert not [p for p in Path(uri, "tables").rglob("_spark-*")]


# --- the job's location, without a Spark job ---------------------------------------------


def _target(db: mere.Database) -> WriteTarget:
    meta = _core.table_meta(db.snapshot().table("t"))
    return WriteTarget(db.uri, meta, job=open_job(open_store(db.uri), meta))


def _rows(start: int) -> list[pa.RecordBatch]:
    ids = list(range(start, start + 100))
    return pa.table({"id": ids, "v": ids}, schema=SCHEMA).to_batches(max_chunksize=50)


def _until(check, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_task_finding_its_job_ended_deletes_its_files(uri):
    """The driver ends the job while a task holds its rows: the task's upload does not stay."""
    db = _table(uri)
    before = _files(uri)
    target = _target(db)
    store = open_store(target.uri)
    job = target.job
    ender = threading.Thread(
        target=end_job, args=(store, target.table, job), kwargs={"wait_seconds": 30.0}
    )

    def rows():
        yield from _rows(0)
        ender.start()  # the job failed elsewhere; this task has not uploaded yet
        assert _until(lambda: not store.exists(job.open))

    with pytest.raises(JobEnded):
        write_batches(target, rows())
    ender.join(60)
    assert not ender.is_alive()
    assert _files(uri) == before  # its file, and the job's location, are gone


def test_a_task_starting_after_its_job_ended_writes_nothing(uri):
    """A task whose Python worker starts after the driver removed the job's location."""
    db = _table(uri)
    before = _files(uri)
    target = _target(db)
    end_job(open_store(target.uri), target.table, target.job, wait_seconds=30.0)
    with pytest.raises(JobEnded):
        write_batches(target, iter(_rows(0)))
    assert _files(uri) == before


def test_ending_a_job_deletes_the_files_it_does_not_keep(uri):
    """Files of tasks whose report never reached the driver go; the committed ones stay."""
    db = _table(uri)
    before = _files(uri)
    target = _target(db)
    unreported = write_batches(target, iter(_rows(0)))
    reported = write_batches(target, iter(_rows(100)))
    assert unreported and reported
    end_job(open_store(target.uri), target.table, target.job, {a.path for a in reported})
    prefix = Path(uri, target.table.prefix)
    assert _files(uri) == before | {prefix / a.path for a in reported}
    assert not list(prefix.glob("_spark-*"))


def test_ending_a_job_waits_a_bounded_time_for_a_task_that_never_ends(uri):
    """A task killed without a word stays registered: the wait gives up, the location stays."""
    db = _table(uri)
    target = _target(db)
    store = open_store(target.uri)
    job = target.job
    store.put(job.tasks + "killed", b"")
    leftover = write_batches(target, iter(_rows(0)))
    started = time.monotonic()
    end_job(store, target.table, job, wait_seconds=0.5)
    assert 0.5 <= time.monotonic() - started < 30
    assert not any(store.exists(target.table.prefix + a.path) for a in leftover)
    assert not store.exists(job.open)  # the task, should it still write, deletes its files
    assert store.exists(job.tasks + "killed")


# --- a missing database ---------------------------------------------------------------


def test_a_spark_write_to_a_missing_database_creates_nothing(spark, tmp_path):
    missing = tmp_path / "typo" / "db"
    df = _frame(spark)
    with pytest.raises(SparkError, match="DatabaseNotFound"):
        df.write.format("mere").option("database", str(missing)).mode("append").save("t")
    with pytest.raises(DatabaseNotFound, match="no mere database"):
        prepare_write(str(missing), "t", df.schema, overwrite=False)
    with pytest.raises(DatabaseNotFound, match="no mere database"):
        mere.spark.foreach_batch(missing, "t", app_id="a")(df, 0)
    missing.parent.mkdir()
    with pytest.raises(DatabaseNotFound, match="no mere database"):
        prepare_write(str(missing.parent), "t", df.schema, overwrite=False)
    assert not missing.exists()
    assert list(missing.parent.iterdir()) == []


def test_spark_writes_close_the_databases_they_open(spark, uri, monkeypatch):
    opened: list[mere.Database] = []
    closed: list[mere.Database] = []

    def connect(*args, **kwargs):
        assert kwargs.get("create") is False
        db = mere.connect(*args, **kwargs)
        opened.append(db)
        close = db.close

        def tracked() -> None:
            closed.append(db)
            close()

        db.close = tracked  # type: ignore[method-assign]
        return db

    for module in (_write, datasource, mere.spark):
        monkeypatch.setattr(module, "connect", connect)
    df = _frame(spark)
    job = prepare_write(uri, "t", df.schema, overwrite=False)
    commit_write(job, [])
    mere.spark.foreach_batch(uri, "t", app_id="a")(df.limit(10), 0)
    source = datasource.MereDataSource({"database": uri, "path": "t"})
    source.reader(source.schema()).partitions()
    mere.spark.read(spark, uri, "t")
    assert len(opened) >= 5
    assert [id(db) for db in closed] == [id(db) for db in opened]


def test_a_rewrite_finding_its_job_ended_deletes_its_files(uri):
    """The executor side of DML records its files too, when its target names a job."""
    db = _table(uri)
    before = _files(uri)
    target = _target(db)
    store = open_store(target.uri)
    add = db.snapshot().table("t").files[0]

    def change(rows: pa.Table, mask) -> pa.Table:
        end_job(store, target.table, target.job)  # the job failed meanwhile
        return rows

    with pytest.raises(JobEnded):
        rewrite_file(target, store, add, None, change)
    assert _files(uri) == before
    assert not list(Path(uri, target.table.prefix).glob("_spark-*/**/*.pending"))
