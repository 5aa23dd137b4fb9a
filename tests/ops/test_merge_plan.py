"""The MERGE plan: what the builder binds, immutable, picklable, and runnable as is."""

from __future__ import annotations

import ast
import dataclasses
import pickle
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import expr as sqlexpr
from mere.ops.merge import (
    IN_LIST_LIMIT,
    MergeClause,
    MergeMetrics,
    MergePlan,
    TableMerger,
    key_filters,
    run_merge,
)
from mere.txn.context import run_statement

KV = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.string()),
        pa.field("n", pa.int32()),
    ]
)
SOURCE = pa.table(
    {
        "id": [1, 2, 3, 6, 7, 8],
        "v": ["A", "B", "C", "F", "G", "H"],
        "n": [10, 20, 30, 60, 70, 80],
        "op": ["U", "D", "X", "I", "I", "X"],
    }
)


@pytest.fixture
def kv(db: mere.Database) -> mere.Table:
    """ids 1..3 in one file, 4..5 in another."""
    db.create_table("kv", KV)
    db.table("kv").append([{"id": 1, "v": "a", "n": 1}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])
    db.table("kv").append([{"id": 4, "v": "d", "n": 4}, {"id": 5, "v": "e", "n": 5}])
    return db.table("kv")


def every_clause(merger: TableMerger) -> TableMerger:
    """One clause of each kind, with conditions, expressions and a literal."""
    return (
        merger.when_matched_update({"v": "s.v || t.v", "n": 7}, cond="s.op = 'U'")
        .when_matched_delete(cond="s.op = 'D'")
        .when_matched_update_all(cond="t.n IS NULL")
        .when_not_matched_insert({"id": "s.id", "v": "'new'"}, cond="s.op = 'I'")
        .when_not_matched_insert_all()
    )


def content(table: mere.Table | mere.TxTable) -> dict[int, tuple[str | None, int | None]]:
    return {r["id"]: (r["v"], r["n"]) for r in table.scan().to_pylist()}


def test_the_plan_holds_the_bound_merge(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        merger = tx.table("kv").merge(SOURCE, on="t.id = s.id AND coalesce(t.n, 0) <> 99")
        plan = every_clause(merger).plan()
    assert isinstance(plan, MergePlan)
    assert plan.on_text == "t.id = s.id AND coalesce(t.n, 0) <> 99"
    assert (plan.target_alias, plan.source_alias) == ("t", "s")
    assert [(k.target_column, k.target_key, k.source_key) for k in plan.keys] == [
        ("id", sqlexpr.Column("t.id", type=pa.int64()), sqlexpr.Column("s.id", type=pa.int64()))
    ]
    assert [sqlexpr.to_sql(e) for e in plan.target_only] == ["coalesce(n, 0) != 99"]
    assert [c.action for c in plan.matched] == ["update", "delete", "update"]
    assert [c.action for c in plan.not_matched] == ["insert", "insert"]
    assert [c.cond_text for c in plan.matched + plan.not_matched] == [
        "s.op = 'U'",
        "s.op = 'D'",
        "t.n IS NULL",
        "s.op = 'I'",
        None,
    ]
    first = plan.matched[0]
    assert first.value("n") == pa.scalar(7, pa.int32())
    assert isinstance(first.value("v"), sqlexpr.Expr)
    assert first.value("id") is None
    assert plan.target_schema == KV
    assert plan.source_schema == SOURCE.schema
    assert plan.joined_schema.names == ["t.id", "t.v", "t.n", "s.id", "s.v", "s.n", "s.op"]
    assert plan.prefixed_source_schema.names == ["s.id", "s.v", "s.n", "s.op"]
    assert plan.key_types == (pa.int64(),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.on_text = "t.id = s.n"  # type: ignore[misc]


def test_a_plan_with_every_clause_kind_pickles(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        plan = every_clause(tx.table("kv").merge(SOURCE, on="t.id = s.id AND t.n > 0")).plan()
    restored = pickle.loads(pickle.dumps(plan))
    assert restored == plan
    assert {c.action for c in restored.matched + restored.not_matched} == {
        "update",
        "delete",
        "insert",
    }
    assert restored.history_parameters(METRICS) == plan.history_parameters(METRICS)


def test_a_round_tripped_plan_merges_like_execute(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        plan = every_clause(tx.table("kv").merge(SOURCE, on="t.id = s.id")).plan()
    restored = pickle.loads(pickle.dumps(plan))
    with db.transaction() as tx:
        table = tx.table("kv")
        got = run_statement(tx, lambda _: run_merge(restored, SOURCE, table), autocommit=False)
        after_plan = content(table)
        tx.abort()
    expected = every_clause(kv.merge(SOURCE, on="t.id = s.id")).execute()
    assert got == expected
    assert after_plan == content(kv)
    assert after_plan == {
        1: ("Aa", 7),
        3: ("C", 30),  # n was NULL: update_all
        4: ("d", 4),
        5: ("e", 5),
        6: ("new", None),
        7: ("new", None),
        8: ("H", 80),
    }


def test_plan_needs_a_clause_and_does_not_run_the_merge(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        merger = tx.table("kv").merge(SOURCE, on="t.id = s.id")
        with pytest.raises(ValueError, match="at least one"):
            merger.plan()
        merger.when_matched_delete()
        assert merger.plan() == merger.plan()
        assert content(tx.table("kv")) == content(kv)
        assert merger.execute().num_target_rows_deleted == 3


def test_history_parameters_describe_the_clauses(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        plan = every_clause(tx.table("kv").merge(SOURCE, on="t.id = s.id")).plan()
    params = plan.history_parameters(METRICS)
    assert params["predicate"] == "t.id = s.id"
    assert params["matchedPredicates"][0] == {
        "actionType": "update",
        "predicate": "s.op = 'U'",
        "values": {"v": "s.v || t.v", "n": "7"},
    }
    assert params["matchedPredicates"][1] == {"actionType": "delete", "predicate": "s.op = 'D'"}
    assert params["notMatchedPredicates"][1]["predicate"] is None
    assert params["numTargetRowsCopied"] == METRICS.num_target_rows_copied


def test_file_filters_go_from_exact_to_none(db: mere.Database, kv: mere.Table) -> None:
    with db.transaction() as tx:
        plain = tx.table("kv").merge(SOURCE, on="t.id = s.id").when_matched_delete().plan()
        narrowed = (
            tx.table("kv").merge(SOURCE, on="t.id = s.id AND t.n > 0").when_matched_delete().plan()
        )
    in_list, key_range = key_filters("id", pa.chunked_array([[3, 1, 3]]))
    assert in_list is not None and key_range is not None
    assert sqlexpr.to_sql(in_list) == "id IN (3, 1)"
    assert sqlexpr.to_sql(key_range) == "id >= 1 AND id <= 3"
    assert [sqlexpr.to_sql(f) for f in plain.file_filters([in_list], [key_range])] == [
        "id IN (3, 1)",
        "id >= 1 AND id <= 3",
    ]
    assert [sqlexpr.to_sql(f) for f in narrowed.file_filters([in_list], [key_range])] == [
        "id IN (3, 1) AND n > 0",
        "(id >= 1 AND id <= 3) AND n > 0",
        "n > 0",
    ]
    assert plain.file_filters([], []) == []
    many = pa.chunked_array([list(range(IN_LIST_LIMIT + 1))])
    assert key_filters("id", many)[0] == key_filters("id", many)[1]
    nanos = pa.chunked_array([pa.array([1], pa.timestamp("ns"))])
    assert key_filters("id", nanos) == (None, None)


def test_clauses_are_immutable() -> None:
    clause = MergeClause("delete", None, None, (), ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        clause.action = "insert"  # type: ignore[misc]
    assert clause.describe() == {"actionType": "delete", "predicate": None}


def test_spark_merge_reads_only_the_plans_public_side() -> None:
    """Spark's executor reaches no private attribute but its own (``self._x``)."""
    path = Path(mere.__file__).parent / "spark" / "_merge.py"
    wrong = [
        f"{path.name}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    ]
    assert wrong == []


METRICS = MergeMetrics(
    num_source_rows=6,
    num_target_rows_inserted=3,
    num_target_rows_updated=2,
    num_target_rows_deleted=1,
    num_target_rows_copied=4,
    num_target_files_added=2,
    num_target_files_removed=1,
)
