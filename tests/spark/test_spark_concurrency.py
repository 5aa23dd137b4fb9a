"""Spark writers running at once: concurrent appends land, multi-table commits are atomic.

No assertion depends on timing: concurrency is forced with file barriers
(bounded waits), and readers check invariants at every version they happen
to see.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import mere
import mere.spark

pytestmark = pytest.mark.spark

WAIT = 150.0  # upper bound for any single wait (threads, processes, barriers); generous: CI load
ROWS = 2_000  # rows per writer / per batch

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("batch", pa.int64())])


def _wait_for(paths: list[Path], timeout: float) -> bool:
    """Wait until every path exists; False on timeout (never raises)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.exists() for p in paths):
            return True
        time.sleep(0.02)
    return all(p.exists() for p in paths)


def _rows_df(spark, start: int, batch: int, barrier: Path | None = None, me: str = ""):
    """``ROWS`` rows ``start ..`` tagged with ``batch``, in one partition.

    With ``barrier``, the task marks itself started and waits (bounded) until
    every writer's task has started, so the Spark jobs really overlap.
    """
    df = spark.range(start, start + ROWS, 1, 1)
    if barrier is None:
        return df.select(F.col("id"), F.lit(batch).cast("long").alias("batch"))
    folder = str(barrier)

    @F.udf("long")
    def wait_for_both(value):
        import time as _time
        from pathlib import Path as _Path

        here = _Path(folder)
        (here / f"started-{me}").touch()
        deadline = _time.monotonic() + 10.0
        while len(list(here.glob("started-*"))) < 2 and _time.monotonic() < deadline:
            _time.sleep(0.02)
        return value

    return df.select(F.col("id"), wait_for_both(F.lit(batch).cast("long")).alias("batch"))


def _run_threads(targets: list[Callable[[], None]]) -> None:
    errors: list[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=guarded(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    deadline = time.monotonic() + WAIT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not [t for t in threads if t.is_alive()], "writer threads still running"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("method", ["datasource", "transaction"])
def test_two_concurrent_spark_appends_both_land(spark, uri, tmp_path, method):
    db = mere.connect(uri)
    db.create_table("t", SCHEMA)
    created = db.version
    barrier = tmp_path / "barrier"
    barrier.mkdir()

    def writer(k: int) -> Callable[[], None]:
        def run() -> None:
            df = _rows_df(spark, k * 1_000_000, k, barrier, me=str(k))
            if method == "datasource":
                # Spark looks Python data sources up in the thread's ACTIVE session, and
                # a new Python thread has none: without this, DATA_SOURCE_NOT_FOUND.
                spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
                df.write.format("mere").option("database", uri).mode("append").save("t")
            else:
                with mere.connect(uri).transaction() as tx:
                    assert mere.spark.write(tx, df, "t") == ROWS

        return run

    _run_threads([writer(1), writer(2)])

    ids = db.table("t").scan().sort_by("id")
    expected = list(range(1_000_000, 1_000_000 + ROWS)) + list(range(2_000_000, 2_000_000 + ROWS))
    assert ids.column("id").to_pylist() == expected  # both row sets, each exactly once
    counts = pc.value_counts(ids.column("batch")).to_pylist()
    assert sorted((c["values"], c["counts"]) for c in counts) == [(1, ROWS), (2, ROWS)]
    assert db.version == created + 2
    commits = db.history(2)
    assert [c["version"] for c in commits] == [created + 2, created + 1]
    assert all(c["tables"] == ["t"] and c["rows_added"] == ROWS for c in commits)


def _count_batches(snapshot: mere.Snapshot, name: str) -> dict[str, int]:
    column = snapshot.table(name).scan(columns=["batch"]).column("batch")
    return {str(c["values"]): c["counts"] for c in pc.value_counts(column).to_pylist()}


def read_until_done(uri: str, ready: str, done: str, out: str) -> None:
    """Child process (pyarrow only): read ``a`` and ``b`` at one version, again and again."""
    db = mere.connect(uri)
    seen: list[dict[str, object]] = []
    deadline = time.monotonic() + WAIT
    finished = False
    while True:
        snapshot = db.snapshot()
        seen.append(
            {
                "version": snapshot.version,
                "a": _count_batches(snapshot, "a"),
                "b": _count_batches(snapshot, "b"),
            }
        )
        Path(ready).touch()
        if finished or time.monotonic() > deadline:
            break
        finished = Path(done).exists()  # one more read after the writer is done
        time.sleep(0.005)
    Path(out).write_text(json.dumps(seen))


def test_multi_table_spark_transaction_is_atomic_for_a_reader_process(spark, uri, tmp_path):
    db = mere.connect(uri)
    with db.transaction() as tx:
        for name in ("a", "b"):
            tx.create_table(name, SCHEMA)
            tx.table(name).append(pa.table({"id": [0], "batch": [0]}, schema=SCHEMA))
    initial = db.version
    ready, done, out = tmp_path / "ready", tmp_path / "done", tmp_path / "seen.json"

    reader = multiprocessing.get_context("spawn").Process(
        target=read_until_done, args=(uri, str(ready), str(done), str(out)), daemon=True
    )
    reader.start()
    try:
        assert _wait_for([ready], WAIT), "the reader process did not start"
        for batch in (1, 2):
            start = batch * 1_000_000
            a = spark.range(start, start + ROWS, 1, 2).select(
                "id", F.lit(batch).cast("long").alias("batch")
            )
            b = spark.range(start, start + ROWS, 1, 3).select(
                "id", F.lit(batch).cast("long").alias("batch")
            )
            with db.transaction() as tx:
                assert mere.spark.write(tx, a, "a") == ROWS
                assert mere.spark.write(tx, b, "b") == ROWS
        done.touch()
        reader.join(WAIT)
        assert not reader.is_alive(), "the reader process is still running"
        assert reader.exitcode == 0
    finally:
        if reader.is_alive():
            reader.kill()
            reader.join(WAIT)

    final = db.version
    assert final == initial + 2
    seen = json.loads(out.read_text())
    torn = [s for s in seen if s["a"] != s["b"]]
    assert torn == [], f"a reader saw one table without the other: {torn[:3]}"
    versions = sorted({s["version"] for s in seen})
    assert versions[0] == initial and versions[-1] == final
    assert all(initial <= v <= final for v in versions)
    by_version = {s["version"]: s["a"] for s in seen}
    assert by_version[initial] == {"0": 1}
    assert by_version[final] == {"0": 1, "1": ROWS, "2": ROWS}
    if initial + 1 in by_version:
        assert by_version[initial + 1] == {"0": 1, "1": ROWS}
