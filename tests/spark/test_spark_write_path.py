"""The executors' write path (chunks encoded on a background thread) and registration per thread."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from spark_helpers import ORDERS, data_files, orders

import mere
import mere.spark
from mere.errors import ConstraintViolation
from mere.spark import _core, _files
from mere.spark._files import WriteTarget, write_batches


def _target(uri: str, replace_where: str | None = None) -> WriteTarget:
    db = mere.connect(uri)
    if "orders" not in db.tables():
        db.create_table("orders", ORDERS)
    meta = _core.table_meta(db.snapshot().table("orders"))
    # Small files, so that several are uploaded while batches still arrive.
    return WriteTarget(db.uri, meta, target_file_size=64 * 1024, replace_where=replace_where)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of a few batches, so that most of them go through the encoder thread."""
    monkeypatch.setattr(_files, "BUFFER_BYTES", 16 * 1024)


def test_chunks_keep_their_order_and_statistics_stay_exact(uri, small_chunks):
    data = orders(0, 20_000)
    adds = write_batches(_target(uri), iter(data.to_batches(max_chunksize=500)))
    assert len(adds) >= 2
    assert sum(a.rows for a in adds) == data.num_rows
    prefix = Path(uri) / "tables"
    read_back = []
    for add in adds:
        [path] = list(prefix.rglob(add.path))
        rows = pq.read_table(path)
        read_back.append(rows)
        for name in ("id", "customer_id", "amount", "country"):
            bounds = pc.min_max(rows.column(name))
            assert add.stats["minValues"][name] == bounds["min"].as_py()
            assert add.stats["maxValues"][name] == bounds["max"].as_py()
            assert add.stats["nullCount"][name] == 0
    # The files hold the batches in the order Spark sent them.
    assert pa.concat_tables(read_back).column("id").to_pylist() == list(range(20_000))


def test_a_constraint_failing_in_a_background_chunk_deletes_every_file(uri, small_chunks):
    fr = orders(0, 20_000, countries=("FR",))
    de = orders(20_000, 100, countries=("DE",))
    batches = fr.to_batches(max_chunksize=500) + de.to_batches()
    with pytest.raises(ConstraintViolation, match="replaceWhere"):
        write_batches(_target(uri, "country = 'FR'"), iter(batches))
    assert data_files(uri) == []


def test_an_error_from_spark_while_a_chunk_encodes_deletes_every_file(uri, small_chunks):
    def batches() -> Iterator[pa.RecordBatch]:
        yield from orders(0, 20_000).to_batches(max_chunksize=500)
        raise RuntimeError("the task was killed")

    with pytest.raises(RuntimeError, match="killed"):
        write_batches(_target(uri), batches())
    assert data_files(uri) == []


def test_format_mere_works_from_another_thread_after_register(spark, uri):
    # Built here: creating a DataFrame in the thread would make the session active there.
    df = spark.createDataFrame(
        orders(0, 30).to_pylist(), "id long, customer_id long, amount double, country string"
    )
    errors: list[BaseException] = []
    counted: list[int] = []

    def run() -> None:
        try:
            mere.spark.register(spark)  # this thread has no active session in the JVM yet
            df.write.format("mere").option("database", uri).mode("append").save("orders")
            counted.append(spark.read.format("mere").option("database", uri).load("orders").count())
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == []
    assert counted == [30]
    assert mere.connect(uri).table("orders").scan().num_rows == 30


def test_the_arrow_path_writes_columns_whose_names_spark_would_parse(spark, uri):
    """``a.b`` and ``c`d`` are plain column names to mere; mapInArrow must not parse them."""
    df = spark.createDataFrame([(1, "x"), (2, None)], "`a.b` long, `c``d` string")
    db = mere.connect(uri)
    with db.transaction() as tx:
        assert mere.spark.write(tx, df, "t", method="arrow") == 2
    assert db.table("t").schema.names == ["a.b", "c`d"]
    rows = sorted(db.table("t").scan().to_pylist(), key=lambda r: r["a.b"])
    assert rows == [{"a.b": 1, "c`d": "x"}, {"a.b": 2, "c`d": None}]
