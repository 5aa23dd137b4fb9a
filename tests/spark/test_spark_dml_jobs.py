"""Spark DML and native reads: what they open they close, and a rewrite job leaves no file."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

import mere
import mere.spark
from mere.spark import _dml, _native
from mere.spark._files import Change, WriteTarget

SparkError = (PySparkException, Py4JJavaError)
SCHEMA = pa.schema([("k", pa.int64()), ("p", pa.string())])


def _table(uri: str) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", SCHEMA, partition_by=["p"])
    db.table("t").append(pa.table({"k": [1, 2, 3, 4], "p": ["a", "a", "b", "b"]}, SCHEMA))
    return db


def _on_disk(uri: str) -> set[str]:
    return {str(p.relative_to(uri)) for p in Path(uri, "tables").rglob("*") if p.is_file()}


def test_native_reads_and_merges_close_the_databases_they_open(spark, uri, monkeypatch):
    _table(uri)
    opened: list[mere.Database] = []
    closed: list[mere.Database] = []

    def connect(*args, **kwargs):
        assert kwargs.get("create") is False  # a mistyped URI must not become a database
        db = mere.connect(*args, **kwargs)
        opened.append(db)
        close = db.close

        def tracked() -> None:
            closed.append(db)
            close()

        db.close = tracked  # type: ignore[method-assign]
        return db

    for module in (_native, _dml, mere.spark):
        monkeypatch.setattr(module, "connect", connect)
    assert mere.spark.read(spark, uri, "t", method="native").count() == 4
    source = spark.createDataFrame([(1, "a"), (9, "c")], "k long, p string")
    merger = mere.spark.merge(spark, uri, "t", source, on="t.k = s.k")
    merger.when_matched_delete().when_not_matched_insert_all().execute()
    with pytest.raises(mere.SchemaMismatch):
        mere.spark.merge(spark, uri, "t", pa.table({"k": [1]}), on="t.k = s.k")  # type: ignore[arg-type]
    assert len(opened) >= 3
    assert [id(db) for db in closed] == [id(db) for db in opened]
    assert sorted(mere.connect(uri).table("t").scan()["k"].to_pylist()) == [2, 3, 4, 9]


def test_a_mistyped_uri_is_not_created(spark, tmp_path):
    missing = tmp_path / "no-such-db"
    frame = spark.createDataFrame([(1, "a")], "k long, p string")
    with pytest.raises(mere.DatabaseNotFound):
        mere.spark.read(spark, missing, "t", method="native")
    with pytest.raises(mere.DatabaseNotFound):
        mere.spark.merge(spark, missing, "t", frame, on="t.k = s.k")
    with pytest.raises(mere.DatabaseNotFound):
        mere.spark.delete(spark, missing, "t", "k = 1")
    assert not missing.exists()


def _needs_a_job_location(table_dir: str, fail_on: int | None = None) -> Change:
    """A DELETE's change that runs only inside an open job location (fails on ``fail_on``).

    A closure, so that Spark's workers get it by value (they cannot import tests).
    """
    delete = _dml.DeleteRows()

    def change(rows: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
        if not list(Path(table_dir).glob("_spark-*/open")):
            raise RuntimeError("the rewrite runs in no open job location")
        if fail_on is not None and fail_on in rows["k"].to_pylist():
            raise RuntimeError("boom")
        return delete(rows, mask)

    return change


def test_a_rewrite_job_records_its_files_in_a_job_location_and_a_failed_one_leaves_none(spark, uri):
    db = _table(uri)
    meta = db.snapshot().table("t").meta
    table_dir = str(Path(uri, meta.prefix))
    files = db.snapshot().table("t").files
    target = WriteTarget(uri, meta)
    before = _on_disk(uri)

    done = _dml.rewrite_job(spark, target, files, "k IN (1, 3)", _needs_a_job_location(table_dir))
    assert sorted(r.matched for r in done) == [1, 1]
    new = {f"{meta.prefix}{a.path}" for r in done for a in r.adds}
    assert _on_disk(uri) == before | new  # the job's location is gone, its files kept

    for path in new:
        Path(uri, path).unlink()
    with pytest.raises(SparkError, match="boom"):
        _dml.rewrite_job(spark, target, files, "k IN (1, 3)", _needs_a_job_location(table_dir, 3))
    assert _on_disk(uri) == before
