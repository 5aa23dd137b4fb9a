"""Spark-side MERGE gives exactly what the one-machine ``TxTable.merge`` gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from spark_helpers import ORDERS, data_files, orders

import mere
import mere.spark
from mere.ops.merge import MergeMetrics

#: Changes for ids 0..119 of a 0..89 target: updates, deletes (op = 'D') and inserts;
#: one NULL key (never matches).
CHANGES = pa.table(
    {
        "id": [*range(0, 120, 3), None],
        "amount": [float(i) for i in range(41)],
        "op": ["D" if i % 4 == 0 else "U" for i in range(40)] + ["U"],
        "country": ["ES" if i % 5 == 0 else None for i in range(41)],
    }
)


def twin_tables(uri: str, partition_by: tuple[str, ...] = ()) -> mere.Database:
    """``spark_side`` and ``arrow_side``: the same rows 0..89 in three appends each."""
    db = mere.connect(uri)
    for name in ("spark_side", "arrow_side"):
        db.create_table(name, ORDERS, partition_by=list(partition_by))
        for start in (0, 30, 60):
            db.table(name).append(orders(start, 30))
    return db


def content(db: mere.Database, name: str) -> list[dict]:
    rows = db.table(name).scan().to_pylist()
    return sorted(rows, key=lambda r: (r["id"] is None, r["id"] or 0, str(r)))


Clauses = Callable[[Any], Any]

CLAUSES: dict[str, Clauses] = {
    "upsert": lambda m: m.when_matched_update({"amount": "s.amount"}).when_not_matched_insert(
        {"id": "s.id", "amount": "s.amount", "country": "coalesce(s.country, 'XX')"}
    ),
    "ordered-conds": lambda m: (
        m.when_matched_delete(cond="s.op = 'D'")
        .when_matched_update({"amount": "t.amount + s.amount", "customer_id": 99}, cond="t.id > 30")
        .when_not_matched_insert({"id": "s.id", "customer_id": "s.id % 7"}, cond="s.op <> 'D'")
    ),
    "insert-only": lambda m: m.when_not_matched_insert(
        {"id": "s.id", "amount": "s.amount", "country": "s.country"}
    ),
    "update-country": lambda m: m.when_matched_update(
        {"country": "coalesce(s.country, t.country)"}, cond="s.op = 'U'"
    ),
}


def run_both(spark, uri: str, clauses: Clauses, on: str = "t.id = s.id", **kw: Any):
    db = twin_tables(uri, **kw)
    source = CHANGES
    df = spark.createDataFrame(
        source.to_pylist(), "id long, amount double, op string, country string"
    )
    spark_metrics = clauses(mere.spark.merge(spark, uri, "spark_side", df, on)).execute()
    arrow_metrics = clauses(db.table("arrow_side").merge(source, on)).execute()
    return db, spark_metrics, arrow_metrics


def same_counts(a: MergeMetrics, b: MergeMetrics) -> None:
    assert (a.num_source_rows, a.num_target_rows_inserted) == (
        b.num_source_rows,
        b.num_target_rows_inserted,
    )
    assert (a.num_target_rows_updated, a.num_target_rows_deleted, a.num_target_rows_copied) == (
        b.num_target_rows_updated,
        b.num_target_rows_deleted,
        b.num_target_rows_copied,
    )
    assert a.num_target_files_removed == b.num_target_files_removed


@pytest.mark.parametrize("clauses", list(CLAUSES), ids=list(CLAUSES))
def test_merge_equals_the_one_machine_merge(spark, uri, clauses):
    db, spark_metrics, arrow_metrics = run_both(spark, uri, CLAUSES[clauses])
    assert content(db, "spark_side") == content(db, "arrow_side")
    same_counts(spark_metrics, arrow_metrics)
    entry = db.history(1)[0]
    assert entry["operation"] == "MERGE"


def test_partitioned_target_and_extra_on_conjuncts(spark, uri):
    on = "t.id = s.id AND t.country <> 'IT'"
    db, spark_metrics, arrow_metrics = run_both(
        spark, uri, CLAUSES["ordered-conds"], on, partition_by=("country",)
    )
    assert content(db, "spark_side") == content(db, "arrow_side")
    same_counts(spark_metrics, arrow_metrics)
    assert spark_metrics.num_target_rows_deleted > 0 and spark_metrics.num_target_rows_updated > 0


def test_files_without_changed_rows_stay(spark, uri):
    db = twin_tables(uri)
    before = {f.path for f in db.snapshot().table("spark_side").files}
    source = spark.createDataFrame([(35, 1.0), (500, 2.0)], "id long, amount double")
    metrics = (
        mere.spark.merge(spark, uri, "spark_side", source, "t.id = s.id")
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert({"id": "s.id", "amount": "s.amount"})
        .execute()
    )
    after = {f.path for f in db.snapshot().table("spark_side").files}
    assert len(before - after) == 1  # only the file of ids 30..59 was rewritten
    assert metrics.num_target_files_removed == 1
    assert metrics.num_target_rows_copied == 29
    assert (metrics.num_target_rows_updated, metrics.num_target_rows_inserted) == (1, 1)
    rows = {r["id"]: r["amount"] for r in db.table("spark_side").scan().to_pylist()}
    assert rows[35] == 1.0 and rows[500] == 2.0 and len(rows) == 91
    # a source matching nothing (and no insert clause) commits no file change
    version = db.version
    none = spark.createDataFrame([(1000, 1.0)], "id long, amount double")
    metrics = (
        mere.spark.merge(spark, uri, "spark_side", none, "t.id = s.id")
        .when_matched_delete()
        .execute()
    )
    assert metrics.num_target_files_removed == metrics.num_target_files_added == 0
    assert db.version <= version + 1
    assert {f.path for f in db.snapshot().table("spark_side").files} == after


def test_a_target_row_matched_twice_commits_nothing(spark, uri):
    db = twin_tables(uri)
    version, files = db.version, data_files(uri)
    twice = spark.createDataFrame([(1, 10.0), (1, 20.0), (70, 3.0)], "id long, amount double")
    merger = mere.spark.merge(spark, uri, "spark_side", twice, "t.id = s.id")
    merger.when_matched_update({"amount": "s.amount"})
    with pytest.raises(mere.ConstraintViolation, match="several source rows"):
        merger.execute()
    assert db.version == version
    assert data_files(uri) == files
    with pytest.raises(ValueError, match="already executed"):
        merger.execute()
    # a condition that lets one source row act makes it fine, as on one machine
    (
        mere.spark.merge(spark, uri, "spark_side", twice, "t.id = s.id")
        .when_matched_update({"amount": "s.amount"}, cond="s.amount > 15")
        .execute()
    )
    assert db.table("spark_side").scan(filter="id = 1").column("amount").to_pylist() == [20.0]


def test_a_target_row_deleted_by_several_source_rows_is_deleted_once(spark, uri):
    """As on one machine: deleting a row twice is no ambiguity; a mix with an update is."""
    db = twin_tables(uri)
    rows = [(1, 10.0), (1, 20.0), (70, 3.0), (70, 4.0), (200, 1.0)]
    source = pa.table({"id": [r[0] for r in rows], "amount": [r[1] for r in rows]})
    df = spark.createDataFrame(rows, "id long, amount double")

    def clauses(m: Any) -> Any:
        return m.when_matched_delete(cond="s.amount > 15").when_matched_delete()

    spark_metrics = clauses(mere.spark.merge(spark, uri, "spark_side", df, "t.id = s.id")).execute()
    arrow_metrics = clauses(db.table("arrow_side").merge(source, "t.id = s.id")).execute()
    assert content(db, "spark_side") == content(db, "arrow_side")
    same_counts(spark_metrics, arrow_metrics)
    assert spark_metrics.num_target_rows_deleted == 2
    version = db.version
    again = spark.createDataFrame([(2, 10.0), (2, 20.0)], "id long, amount double")
    mixed = mere.spark.merge(spark, uri, "spark_side", again, "t.id = s.id")
    mixed.when_matched_delete(cond="s.amount > 15").when_matched_update({"amount": "s.amount"})
    with pytest.raises(mere.ConstraintViolation, match="several source rows"):
        mixed.execute()
    assert db.version == version


def test_merge_and_write_in_one_transaction(spark, uri):
    db = twin_tables(uri)
    version = db.version
    source = spark.createDataFrame([(2, 0.5), (200, 7.0)], "id long, amount double")
    with db.transaction() as tx:
        metrics = (
            mere.spark.merge(spark, tx, "spark_side", source, "t.id = src.id", source_alias="src")
            .when_matched_delete()
            .when_not_matched_insert({"id": "src.id", "amount": "src.amount"})
            .execute()
        )
        mere.spark.write(tx, spark.createDataFrame(orders(500, 5).to_pandas()), "arrow_side")
        assert db.version == version  # nothing visible before the commit
    assert db.version == version + 1
    assert (metrics.num_target_rows_deleted, metrics.num_target_rows_inserted) == (1, 1)
    ids = set(db.table("spark_side").scan().column("id").to_pylist())
    assert 2 not in ids and 200 in ids
    assert db.table("arrow_side").scan(filter="id >= 500").num_rows == 5


def upsert(spark, uri: str, key: int, **kw: Any):
    source = spark.createDataFrame([(key, 1.0)], "id long, amount double")
    return (
        mere.spark.merge(spark, uri, "spark_side", source, "t.id = s.id", **kw)
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert({"id": "s.id", "amount": "s.amount"})
    )


def test_a_concurrent_commit_to_a_matching_key_conflicts(spark, uri):
    db = twin_tables(uri)
    merger = upsert(spark, uri, 5)
    db.table("spark_side").update("id = 6", {"amount": 0.0})  # rewrites the file of id 5
    version = db.version
    with pytest.raises(mere.ConflictError):
        merger.execute()
    assert db.version == version
    # serializable: a concurrent append of the same key conflicts, one of another key does not
    merger = upsert(spark, uri, 95, isolation="serializable")
    db.table("spark_side").append(orders(95, 1))
    with pytest.raises(mere.ConflictError):
        merger.execute()
    merger = upsert(spark, uri, 96, isolation="serializable")
    db.table("spark_side").append(orders(300, 1))
    assert merger.execute().num_target_rows_inserted == 1


def test_bad_merges_fail_before_any_job(spark, uri):
    twin_tables(uri)
    source = spark.createDataFrame([(1, 1.0)], "id long, amount double")
    with pytest.raises(mere.InvalidExpression, match="no equality"):
        mere.spark.merge(spark, uri, "spark_side", source, "t.id > s.id")
    merger = mere.spark.merge(spark, uri, "spark_side", source, "t.id = s.id")
    with pytest.raises(mere.InvalidExpression):
        merger.when_matched_update({"amount": "s.nope"})
    with pytest.raises(mere.SchemaMismatch):
        merger.when_not_matched_insert_all()  # the source lacks customer_id and country
    with pytest.raises(ValueError, match="at least one"):
        merger.execute()
    with pytest.raises(mere.SchemaMismatch, match="DataFrame"):
        mere.spark.merge(spark, uri, "spark_side", orders(0, 1), "t.id = s.id")
