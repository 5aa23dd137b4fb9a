"""Spark writes that extend the table's schema: ``schema_mode="merge"`` / ``mergeSchema``."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere
import mere.spark
from mere.errors import ConcurrentMetadataChange, SchemaMismatch
from mere.spark._write import commit_write, job_with_version, prepare_write

BASE = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int32())])


def _db(uri: str) -> mere.Database:
    db = mere.connect(uri)
    db.create_table("t", BASE)
    db.table("t").append([{"id": 1, "v": 10}, {"id": 2, "v": 20}])
    return db


def _rows(db: mere.Database) -> list[dict[str, object]]:
    return sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


@pytest.mark.parametrize("method", ["native", "arrow"])
def test_merge_adds_new_columns_and_widens(spark, uri, method):
    db = _db(uri)
    df = spark.createDataFrame([(3, 2**40, "x")], "id long, v long, note string")
    with db.transaction() as tx:
        written = mere.spark.write(tx, df, "t", schema_mode="merge", method=method)
    assert written == 1
    schema = db.table("t").schema
    assert schema.names == ["id", "v", "note"]
    assert schema.field("v").type == pa.int64()  # int -> long is a safe widening
    assert _rows(db) == [
        {"id": 1, "v": 10, "note": None},
        {"id": 2, "v": 20, "note": None},
        {"id": 3, "v": 2**40, "note": "x"},
    ]
    assert db.version == 3  # the schema change and the rows: one commit


def test_strict_is_the_default_and_changes_nothing(spark, uri):
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, "x")], "id long, v int, note string")
    with pytest.raises(SchemaMismatch, match="note"):
        with db.transaction() as tx:
            mere.spark.write(tx, df, "t")
    assert db.table("t").schema == BASE and db.version == 2


def test_merge_still_needs_every_table_column(spark, uri):
    db = _db(uri)
    df = spark.createDataFrame([(3, "x")], "id long, note string")  # no v
    with db.transaction() as tx:
        with pytest.raises(SchemaMismatch, match="missing columns"):
            mere.spark.write(tx, df, "t", schema_mode="merge")
        assert tx.table("t").schema == BASE  # nothing changed in the transaction either
    assert db.table("t").schema == BASE


def test_an_unknown_schema_mode_is_refused(spark, uri):
    db = _db(uri)
    df = spark.createDataFrame([(3, 30)], "id long, v int")
    with db.transaction() as tx:
        with pytest.raises(ValueError, match="schema_mode"):
            mere.spark.write(tx, df, "t", schema_mode="evolve")  # type: ignore[arg-type]


def test_the_data_source_merges_with_the_mergeSchema_option(spark, uri):
    db = _db(uri)
    df = spark.createDataFrame([(3, 30, 1.5)], "id long, v int, score double")
    writer = df.write.format("mere").option("database", uri).mode("append")
    with pytest.raises(Exception, match="score"):
        writer.save("t")
    with pytest.raises(Exception, match="mergeSchema must be true or false"):
        writer.option("mergeSchema", "yes").save("t")
    assert db.table("t").schema == BASE and db.version == 2
    writer.option("mergeSchema", "true").save("t")
    assert db.version == 3  # the schema change and the rows: one commit
    assert db.table("t").schema.names == ["id", "v", "score"]
    assert [r["score"] for r in _rows(db)] == [None, None, 1.5]


def test_a_planned_merge_commits_once_then_later_batches_match(spark, uri):
    """A stream plans once and commits each micro-batch: only the first extends the schema."""
    db = _db(uri)
    schema = spark.createDataFrame([], "id long, v int, note string").schema
    job = prepare_write(
        db.uri, "t", schema, overwrite=False, merge_schema=True, app_id="s", app_version=0
    )
    assert job.evolved_from is not None
    assert db.table("t").schema == BASE  # planning changes nothing
    assert commit_write(job_with_version(job, 1), []) is not None
    assert db.table("t").schema.names == ["id", "v", "note"]
    assert commit_write(job_with_version(job, 2), []) is not None
    assert db.table("t").schema.names == ["id", "v", "note"]


def test_a_merge_planned_against_an_old_schema_conflicts(spark, uri):
    db = _db(uri)
    schema = spark.createDataFrame([], "id long, v int, note string").schema
    job = prepare_write(db.uri, "t", schema, overwrite=False, merge_schema=True)
    with db.transaction() as tx:  # another writer changes the table meanwhile
        tx.alter_table("t").add_column("other", pa.string())
    with pytest.raises(ConcurrentMetadataChange):
        commit_write(job, [])
    assert db.table("t").schema.names == ["id", "v", "other"]
