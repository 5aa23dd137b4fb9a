"""The MERGE builder: its API, name resolution, errors, metrics and transactions."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Callable

import pandas as pd
import pyarrow as pa
import pytest

import mere
from mere.ops.merge import MergeMetrics, TableMerger

KV = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
        pa.field("n", pa.int32()),
    ]
)


@pytest.fixture
def kv(db: mere.Database) -> mere.Table:
    """ids 1..3 in one file, 4..5 in another."""
    db.create_table("kv", KV)
    db.table("kv").append([{"id": 1, "v": "a", "n": 1}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])
    db.table("kv").append([{"id": 4, "v": "d", "n": 4}, {"id": 5, "v": "e", "n": 5}])
    return db.table("kv")


def content(table: mere.Table | mere.TxTable) -> dict[int, tuple[str | None, int | None]]:
    return {r["id"]: (r["v"], r["n"]) for r in table.scan().to_pylist()}


SOURCE = pa.table({"id": [2, 6], "v": ["B", "F"], "n": [20, 60]})


@pytest.mark.parametrize(
    "make_source",
    [
        lambda: SOURCE,
        lambda: SOURCE.to_batches()[0],
        lambda: pa.RecordBatchReader.from_batches(SOURCE.schema, SOURCE.to_batches()),
        lambda: SOURCE.to_pandas(),
        lambda: SOURCE.to_pylist(),
    ],
    ids=["table", "batch", "reader", "pandas", "dicts"],
)
def test_upsert_from_every_source_form(kv: mere.Table, make_source: Callable[[], object]) -> None:
    source = make_source()
    metrics = (
        kv.merge(source, on="t.id = s.id")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert content(kv) == {
        1: ("a", 1),
        2: ("B", 20),
        3: ("c", None),
        4: ("d", 4),
        5: ("e", 5),
        6: ("F", 60),
    }
    assert metrics == MergeMetrics(
        num_source_rows=2,
        num_target_rows_inserted=1,
        num_target_rows_updated=1,
        num_target_rows_deleted=0,
        num_target_rows_copied=2,  # ids 1 and 3 shared the file of id 2
        num_target_files_added=1,  # rewritten and inserted rows share one new file
        num_target_files_removed=1,
    )


def test_table_merge_is_one_commit_with_history(kv: mere.Table) -> None:
    db = kv._db
    version = db.version
    kv.merge(SOURCE, on="t.id = s.id").when_matched_delete().execute()
    assert db.version == version + 1
    entry = db.history(1)[0]
    assert entry["operation"] == "MERGE"
    params = entry["parameters"]
    assert params["table"] == "kv" and params["predicate"] == "t.id = s.id"
    assert params["matchedPredicates"] == [{"actionType": "delete", "predicate": None}]
    assert params["numTargetRowsDeleted"] == 1 and params["numSourceRows"] == 2
    assert entry["metrics"]["numRemovedFiles"] == 1


def test_clauses_are_tried_in_order_first_match_wins(kv: mere.Table) -> None:
    source = [
        {"id": 1, "op": "D"},
        {"id": 2, "op": "U", "v": "two"},
        {"id": 3, "op": "X"},
        {"id": 7, "op": "I", "v": "seven"},
        {"id": 8, "op": "D", "v": "eight"},
    ]
    metrics = (
        kv.merge(source, on="t.id = s.id")
        .when_matched_delete(cond="s.op = 'D'")
        .when_matched_update({"v": "s.v"}, cond="s.op = 'U'")
        .when_matched_update({"v": "'other'"})
        .when_not_matched_insert({"id": "s.id", "v": "s.v"}, cond="s.op = 'I'")
        .execute()
    )
    assert content(kv) == {
        2: ("two", None),
        3: ("other", None),
        4: ("d", 4),
        5: ("e", 5),
        7: ("seven", None),
    }
    assert (metrics.num_target_rows_deleted, metrics.num_target_rows_updated) == (1, 2)
    assert metrics.num_target_rows_inserted == 1


def test_values_may_be_python_literals(kv: mere.Table) -> None:
    kv.merge([{"id": 1}, {"id": 9}], on="t.id = s.id").when_matched_update(
        {"v": "'literal ''text'''", "n": 7}
    ).when_not_matched_insert({"id": "s.id", "v": None, "n": -1}).execute()
    assert content(kv)[1] == ("literal 'text'", 7)
    assert content(kv)[9] == (None, -1)


@pytest.mark.parametrize("value", [1.5, 2**40, True, dt.date(2024, 1, 1)])
def test_lossy_or_mistyped_python_literals_are_refused(kv: mere.Table, value: object) -> None:
    """1.5 must not become 1 in an INT column (as ``pa.scalar(1.5, pa.int32())`` would make it)."""
    merger = kv.merge([{"id": 1}], on="t.id = s.id")
    with pytest.raises(mere.SchemaMismatch, match="cannot set column 'n'"):
        merger.when_matched_update({"n": value})


def test_lossy_expression_values_are_refused_and_nothing_is_written(kv: mere.Table) -> None:
    db = kv._db
    version = db.version
    merger = kv.merge([{"id": 1, "big": 2**40}], on="t.id = s.id").when_matched_update(
        {"n": "s.big"}
    )
    with pytest.raises(mere.SchemaMismatch, match="'n'"):
        merger.execute()
    assert db.version == version and content(kv)[1] == ("a", 1)


def test_null_into_not_null_is_a_constraint_violation(kv: mere.Table) -> None:
    with pytest.raises(mere.ConstraintViolation, match="NOT NULL"):
        kv.merge([{"id": None, "v": "no id"}], on="t.id = s.id").when_not_matched_insert(
            {"v": "s.v"}
        ).execute()
    assert len(content(kv)) == 5


def test_null_keys_never_match(db: mere.Database) -> None:
    schema = pa.schema([pa.field("k", pa.int64()), pa.field("v", pa.string())])
    db.create_table("t", schema)
    db.table("t").append([{"k": None, "v": "target null"}, {"k": 1, "v": "one"}])
    metrics = (
        db.table("t")
        .merge([{"k": None, "v": "source null"}, {"k": 1, "v": "ONE"}], on="t.k = s.k")
        .when_matched_update({"v": "s.v"})
        .when_not_matched_insert_all()
        .execute()
    )
    got = sorted((r["k"] is None, r["v"]) for r in db.table("t").scan().to_pylist())
    assert got == [(False, "ONE"), (True, "source null"), (True, "target null")]
    assert (metrics.num_target_rows_updated, metrics.num_target_rows_inserted) == (1, 1)


def test_a_source_row_may_update_several_target_rows(db: mere.Database) -> None:
    schema = pa.schema([pa.field("grp", pa.string()), pa.field("v", pa.int64())])
    db.create_table("t", schema)
    db.table("t").append([{"grp": "a", "v": 1}, {"grp": "a", "v": 2}, {"grp": "b", "v": 3}])
    metrics = (
        db.table("t")
        .merge([{"grp": "a", "delta": 10}], on="t.grp = s.grp")
        .when_matched_update({"v": "t.v + s.delta"})
        .execute()
    )
    assert metrics.num_target_rows_updated == 2
    assert sorted(db.table("t").scan().column("v").to_pylist()) == [3, 11, 12]


def test_a_target_row_acted_on_twice_is_an_error_but_not_if_a_condition_picks_one(
    kv: mere.Table,
) -> None:
    db = kv._db
    version = db.version
    twice = [{"id": 1, "v": "x", "n": 1}, {"id": 1, "v": "y", "n": 1}]
    objects = sorted(m.key for m in db.store.list(""))
    with pytest.raises(mere.ConstraintViolation, match="several source rows"):
        kv.merge(twice, on="t.id = s.id").when_matched_update({"v": "s.v"}).execute()
    assert sorted(m.key for m in db.store.list("")) == objects
    assert db.version == version
    kv.merge(twice, on="t.id = s.id").when_matched_update({"v": "s.v"}, cond="s.v = 'y'").execute()
    assert content(kv)[1] == ("y", 1)
    # not matched clauses only: duplicates of a matched key are simply not inserted
    kv.merge(twice, on="t.id = s.id").when_not_matched_insert_all().execute()
    assert len(content(kv)) == 5


def test_failed_table_merge_leaves_no_files_and_aborts(kv: mere.Table) -> None:
    db = kv._db
    objects = sorted(m.key for m in db.store.list(""))
    merger = kv.merge([{"id": 1, "n": None}, {"id": 99, "n": None}], on="t.id = s.id")
    merger.when_matched_update({"v": "'changed'"}).when_not_matched_insert({"v": "'no id'"})
    with pytest.raises(mere.ConstraintViolation):
        merger.execute()
    assert sorted(m.key for m in db.store.list("")) == objects
    with pytest.raises(ValueError, match="already executed"):
        merger.execute()


def test_table_merge_that_loses_a_conflict_raises_and_cleans_up(kv: mere.Table) -> None:
    db = kv._db
    merger = kv.merge([{"id": 1, "v": "mine"}], on="t.id = s.id").when_matched_update({"v": "s.v"})
    kv.delete("id = 2")  # commits first and removes the file merger reads
    with pytest.raises(mere.ConcurrentDeleteDelete):  # both removed the file of ids 1..3
        merger.execute()
    assert content(kv)[1] == ("a", 1)
    referenced = {
        f"tables/{db.snapshot().table('kv').id}/{f.path}" for f in db.snapshot().table("kv").files
    }
    assert {m.key for m in db.store.list("tables/")} >= referenced
    assert len({m.key for m in db.store.list("tables/")}) == 3  # 2 live + 1 removed by delete


def test_merge_inside_a_transaction_with_other_work(kv: mere.Table) -> None:
    db = kv._db
    version = db.version
    with db.transaction() as tx:
        t = tx.table("kv")
        t.append([{"id": 10, "v": "ten"}])
        metrics = (
            t.merge([{"id": 10, "v": "TEN"}, {"id": 5, "v": "E"}], on="t.id = s.id")
            .when_matched_update({"v": "s.v"})
            .execute()
        )
        assert metrics.num_target_rows_updated == 2
        assert content(t)[10] == ("TEN", None)
    assert db.version == version + 1
    assert content(kv)[10] == ("TEN", None) and content(kv)[5] == ("E", 5)


def test_merge_into_a_table_created_in_the_same_transaction(db: mere.Database) -> None:
    with db.transaction() as tx:
        t = tx.create_table("new", KV)
        t.merge(SOURCE, on="t.id = s.id").when_not_matched_insert_all().execute()
        t.merge(SOURCE, on="t.id = s.id").when_matched_update({"n": "t.n + 1"}).execute()
    assert content(db.table("new")) == {2: ("B", 21), 6: ("F", 61)}


def test_empty_source_changes_nothing(kv: mere.Table) -> None:
    version = kv._db.version
    metrics = (
        kv.merge(SOURCE.slice(0, 0), on="t.id = s.id")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    assert metrics == MergeMetrics(0, 0, 0, 0, 0, 0, 0)
    assert kv._db.version == version


def test_keys_of_different_types_join_in_their_common_type(kv: mere.Table) -> None:
    source = pa.table({"key": pa.array([1, 4], pa.int8()), "n": pa.array([10, 40], pa.int64())})
    kv.merge(source, on="t.id = s.key").when_matched_update({"n": "s.n"}).execute()
    assert content(kv)[1] == ("a", 10) and content(kv)[4] == ("d", 40)


def test_extra_on_conjuncts_filter_pairs(kv: mere.Table) -> None:
    """``t.n IS NOT NULL`` is part of the match: id 2 (n NULL) does not match, so it inserts."""
    kv.merge(
        [{"id": 1, "v": "A", "n": 1}, {"id": 2, "v": "B", "n": None}],
        on="t.id = s.id AND t.n IS NOT NULL",
    ).when_matched_update({"v": "s.v"}).when_not_matched_insert_all().execute()
    rows = sorted((r["id"], r["v"]) for r in kv.scan().to_pylist())
    assert rows == [(1, "A"), (2, "B"), (2, "b"), (3, "c"), (4, "d"), (5, "e")]


def test_multi_column_keys_and_other_types(db: mere.Database) -> None:
    schema = pa.schema(
        [
            pa.field("day", pa.date32()),
            pa.field("who", pa.string()),
            pa.field("amount", pa.decimal128(10, 2)),
            pa.field("at", pa.timestamp("us", tz="UTC")),
        ]
    )
    db.create_table("t", schema, partition_by=["day"])
    d1, d2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    at = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    db.table("t").append(
        [
            {"day": d1, "who": "O'Brien", "amount": decimal.Decimal("1.50"), "at": at},
            {"day": d2, "who": "O'Brien", "amount": decimal.Decimal("2.00"), "at": at},
        ]
    )
    source = pd.DataFrame({"day": [d1], "who": ["O'Brien"], "amount": [decimal.Decimal("9.99")]})
    db.table("t").merge(source, on="t.day = s.day AND t.who = s.who").when_matched_update(
        {"amount": "t.amount + s.amount", "at": "t.at"}
    ).execute()
    got = {r["day"]: r["amount"] for r in db.table("t").scan().to_pylist()}
    assert got == {d1: decimal.Decimal("11.49"), d2: decimal.Decimal("2.00")}


def test_update_can_move_rows_between_partitions(db: mere.Database) -> None:
    db.create_table("p", KV, partition_by=["v"])
    db.table("p").append([{"id": 1, "v": "old"}, {"id": 2, "v": "old"}])
    db.table("p").merge([{"id": 1}], on="t.id = s.id").when_matched_update({"v": "'new'"}).execute()
    files = db.snapshot().table("p").files
    assert sorted((f.partition_values["v"], f.rows) for f in files) == [("new", 1), ("old", 1)]


def test_aliases_and_name_resolution(kv: mere.Table) -> None:
    source = [{"key": 1, "V": "upper-case source column"}]
    kv.merge(source, on="tgt.id = key", source_alias="src", target_alias="tgt").when_matched_update(
        {"tgt.v": "src.V", "N": "n + 1"}  # a qualified key; an unambiguous bare name
    ).execute()
    assert content(kv)[1] == ("upper-case source column", 2)


@pytest.mark.parametrize(
    ("on", "match"),
    [
        ("t.id > s.id", "no equality"),
        ("t.id = 1", "no equality"),
        ("t.id = s.id OR t.v = s.v", "no equality"),
        ("id = s.id", "ambiguous"),
        ("t.id = x.id", "unknown table alias"),
        ("t.nope = s.id", "unknown column"),
        ("t.id = s.v", "cannot|compare"),
        ("t.id + s.id", "not a boolean"),
        ("", "needs an 'on'"),
    ],
)
def test_bad_on_conditions(kv: mere.Table, on: str, match: str) -> None:
    source = [{"id": 1, "v": "x"}]
    with pytest.raises(mere.InvalidExpression, match=match):
        kv.merge(source, on=on)


def test_bad_aliases(kv: mere.Table) -> None:
    with pytest.raises(mere.InvalidExpression, match="must differ"):
        kv.merge(SOURCE, on="a.id = A.id", source_alias="a", target_alias="A")
    with pytest.raises(mere.InvalidExpression, match="plain identifier"):
        kv.merge(SOURCE, on="t.id = s.id", source_alias="s.x")


def test_bad_clauses(kv: mere.Table) -> None:
    merger = kv.merge(SOURCE, on="t.id = s.id")
    with pytest.raises(ValueError, match="at least one"):
        merger.execute()
    with pytest.raises(mere.InvalidExpression, match="WHEN NOT MATCHED"):
        merger.when_not_matched_insert({"id": "t.id"})
    with pytest.raises(mere.InvalidExpression, match="WHEN NOT MATCHED"):
        merger.when_not_matched_insert_all(cond="t.v IS NULL")
    with pytest.raises(mere.SchemaMismatch, match="unknown column"):
        merger.when_matched_update({"nope": "1"})
    with pytest.raises(mere.InvalidExpression, match="not a boolean"):
        merger.when_matched_delete(cond="s.n + 1")
    with pytest.raises(mere.InvalidExpression, match="at least one column"):
        merger.when_matched_update({})
    with pytest.raises(mere.SchemaMismatch, match="twice"):
        merger.when_matched_update({"v": "s.v", "t.v": "'x'"})
    merger.when_matched_delete()
    with pytest.raises(ValueError, match="can never run"):
        merger.when_matched_update({"v": "s.v"})


def test_all_clauses_need_every_target_column_in_the_source(kv: mere.Table) -> None:
    merger = kv.merge([{"id": 1, "v": "x"}], on="t.id = s.id")
    with pytest.raises(mere.SchemaMismatch, match=r"\['n'\]"):
        merger.when_matched_update_all()
    with pytest.raises(mere.SchemaMismatch, match=r"\['n'\]"):
        merger.when_not_matched_insert_all()


def test_unsupported_source(kv: mere.Table) -> None:
    with pytest.raises(mere.SchemaMismatch, match="cannot merge from a dict"):
        kv.merge({"id": [1]}, on="t.id = s.id")
    with pytest.raises(mere.SchemaMismatch, match="not a dict"):
        kv.merge([1, 2], on="t.id = s.id")


def test_builder_type_is_exported_from_tx_and_table(kv: mere.Table) -> None:
    assert isinstance(kv.merge(SOURCE, on="t.id = s.id"), TableMerger)
    with kv._db.transaction() as tx:
        assert isinstance(tx.table("kv").merge(SOURCE, on="t.id = s.id"), TableMerger)


def test_nanosecond_timestamp_keys_match_exactly(db: mere.Database) -> None:
    """Keys that differ only in nanoseconds; file skipping must not round them."""
    schema = pa.schema([pa.field("at", pa.timestamp("ns")), pa.field("v", pa.int64())])
    db.create_table("t", schema)
    base = 1_700_000_000_000_000_000
    for offset in (1, 2):  # two files
        db.table("t").append(
            pa.table({"at": pa.array([base + offset], pa.timestamp("ns")), "v": [0]})
        )
    source = pa.table({"at": pa.array([base + 2], pa.timestamp("ns")), "v": [7]})
    metrics = (
        db.table("t").merge(source, on="t.at = s.at").when_matched_update({"v": "s.v"}).execute()
    )
    assert metrics.num_target_rows_updated == 1
    got = {r["at"].value: r["v"] for r in db.table("t").scan().to_pylist()}
    assert got == {base + 1: 0, base + 2: 7}


@pytest.mark.parametrize("files", [1, 2])
def test_nan_keys_match_as_in_duckdb_and_spark(db: mere.Database, files: int) -> None:
    """NaN = NaN (mere's filters, DuckDB's and Spark's joins), whatever its sign bit;
    a file holding only NaN keys is not skipped (NaN is above every number)."""
    schema = pa.schema([pa.field("k", pa.float64()), pa.field("v", pa.int64())])
    db.create_table("t", schema)
    if files == 1:
        db.table("t").append([{"k": float("nan"), "v": 1}, {"k": 1.5, "v": 1}])
    else:
        db.table("t").append([{"k": float("nan"), "v": 1}])
        db.table("t").append([{"k": 1.5, "v": 1}])
    metrics = (
        db.table("t")
        .merge([{"k": -float("nan"), "v": 2}, {"k": 1.5, "v": 2}], on="t.k = s.k")
        .when_matched_update({"v": "s.v"})
        .when_not_matched_insert_all()
        .execute()
    )
    assert (metrics.num_target_rows_updated, metrics.num_target_rows_inserted) == (2, 0)
    assert sorted(db.table("t").scan().column("v").to_pylist()) == [2, 2]


def test_many_string_keys_use_the_key_range(db: mere.Database) -> None:
    schema = pa.schema([pa.field("k", pa.string()), pa.field("v", pa.int64())])
    db.create_table("t", schema)
    db.table("t").append([{"k": f"a{i:05d}", "v": 0} for i in range(2000)])
    db.table("t").append([{"k": f"z{i:05d}", "v": 0} for i in range(10)])
    source = pa.table({"k": [f"a{i:05d}" for i in range(0, 2000, 1)], "v": [1] * 2000})
    metrics = (
        db.table("t").merge(source, on="t.k = s.k").when_matched_update({"v": "s.v"}).execute()
    )
    assert metrics.num_target_rows_updated == 2000
    assert metrics.num_target_files_removed == 1  # the 'z' file is outside the key range


def test_a_target_row_deleted_by_several_source_rows_is_deleted_once(kv: mere.Table) -> None:
    """Deleting a row twice is no ambiguity (Delta Lake and DuckDB take it); it raised."""
    twice = [{"id": 1, "v": "x", "n": 1}, {"id": 1, "v": "y", "n": 1}, {"id": 4, "v": "x"}]
    metrics = kv.merge(twice, on="t.id = s.id").when_matched_delete().execute()
    assert metrics.num_target_rows_deleted == 2
    assert sorted(content(kv)) == [2, 3, 5]
    kv.merge([{"id": 2, "v": "x"}, {"id": 2, "v": "y"}], on="t.id = s.id").when_matched_delete(
        cond="s.v = 'x'"
    ).when_matched_delete().execute()
    assert sorted(content(kv)) == [3, 5]
    version = kv._db.version
    mixed = kv.merge([{"id": 3, "v": "x"}, {"id": 3, "v": "y"}], on="t.id = s.id")
    mixed.when_matched_delete(cond="s.v = 'x'").when_matched_update({"v": "s.v"})
    with pytest.raises(mere.ConstraintViolation, match="several source rows"):
        mixed.execute()
    assert kv._db.version == version


@pytest.mark.parametrize(
    "kind", [pa.string_view(), pa.large_string(), pa.dictionary(pa.int8(), pa.string())]
)
def test_a_source_of_view_or_dictionary_strings_merges(kv: mere.Table, kind: pa.DataType) -> None:
    """A string_view source raised a raw ArrowNotImplementedError (no array_take kernel)."""
    source = pa.table({"id": [2, 6], "v": pa.array(["B", "F"]).cast(kind), "n": [20, 60]})
    merger = kv.merge(source, "t.id = s.id")
    merger.when_matched_update_all().when_not_matched_insert_all().execute()
    assert content(kv)[2] == ("B", 20) and content(kv)[6] == ("F", 60)
