"""Schema evolution and constraints: old files keep reading, lossy changes are refused."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere

BASE = pa.schema([pa.field("k", pa.int32(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def t(db: mere.Database) -> mere.Database:
    db.create_table("t", BASE)
    db.table("t").append([{"k": 1, "v": "a"}])
    return db


def test_merge_schema_adds_columns_and_widens(t: mere.Database) -> None:
    t.table("t").append(
        pa.table({"k": pa.array([2], pa.int64()), "v": ["b"], "extra": [1.5]}),
        schema_mode="merge",
    )
    assert t.table("t").schema.names == ["k", "v", "extra"]
    assert t.table("t").schema.field("k").type == pa.int64()
    rows = t.table("t").scan().sort_by("k").to_pylist()
    assert rows == [{"k": 1, "v": "a", "extra": None}, {"k": 2, "v": "b", "extra": 1.5}]


def test_strict_append_of_new_column_is_refused(t: mere.Database) -> None:
    with pytest.raises(mere.SchemaMismatch, match="schema_mode='merge'"):
        t.table("t").append([{"k": 2, "v": "b", "extra": 1}])


def test_rename_keeps_old_files_readable_and_frees_the_name(t: mere.Database) -> None:
    with t.transaction() as tx:
        tx.alter_table("t").rename_column("v", "name").add_column("v", pa.int64())
        tx.table("t").append([{"k": 2, "name": "b", "v": 7}])
    rows = t.table("t").scan().sort_by("k").to_pylist()
    assert rows == [{"k": 1, "name": "a", "v": None}, {"k": 2, "name": "b", "v": 7}]
    assert t.table("t").scan(filter="name = 'a'").num_rows == 1  # statistics follow the rename
    assert t.snapshot(2).table("t").scan().column_names == ["k", "v"]  # time travel: old schema


def test_lossy_type_changes_are_refused(t: mere.Database) -> None:
    v = t.version
    for new_type in (pa.int16(), pa.string(), pa.float32()):
        with pytest.raises(mere.SchemaMismatch, match="could lose data"), t.transaction() as tx:
            tx.alter_table("t").widen_column("k", new_type)
    assert t.version == v


def test_widening_keeps_values(t: mere.Database) -> None:
    with t.transaction() as tx:
        tx.alter_table("t").widen_column("k", pa.int64())
    assert t.table("t").scan().column("k").type == pa.int64()
    assert t.table("t").scan(filter="k = 1").num_rows == 1


def test_new_columns_must_be_nullable(t: mere.Database) -> None:
    with pytest.raises(mere.SchemaMismatch, match="nullable"), t.transaction() as tx:
        tx.alter_table("t").add_column("n", pa.int64(), nullable=False)


def test_check_constraint_is_enforced_on_every_write(t: mere.Database) -> None:
    with t.transaction() as tx:
        tx.alter_table("t").add_check("positive_k", "k > 0")
    v = t.version
    with pytest.raises(mere.ConstraintViolation, match="positive_k"):
        t.table("t").append([{"k": -1, "v": "x"}])
    with pytest.raises(mere.ConstraintViolation, match="positive_k"):
        t.table("t").update("k = 1", {"k": "k - 5"})
    t.table("t").append([{"k": 5, "v": None}])  # NULL in other columns is fine
    assert t.version == v + 1


def test_check_that_existing_rows_break_is_refused(t: mere.Database) -> None:
    with pytest.raises(mere.ConstraintViolation), t.transaction() as tx:
        tx.alter_table("t").add_check("big", "k > 100")
    assert "mere.check.big" not in t.table("t").describe()["properties"]


def test_reserved_properties_and_bad_checks(t: mere.Database) -> None:
    with pytest.raises(mere.InvalidName), t.transaction() as tx:
        tx.alter_table("t").set_properties({"mere.check.x": "true"})
    with pytest.raises(mere.InvalidExpression), t.transaction() as tx:
        tx.alter_table("t").add_check("c", "k + 1")
    with t.transaction() as tx:
        tx.alter_table("t").set_properties({"owner": "data-team"})
    assert t.table("t").describe()["properties"] == {"owner": "data-team"}


def test_concurrent_append_conflicts_with_schema_change(t: mere.Database) -> None:
    writer = t.transaction()
    writer.table("t").append([{"k": 9, "v": "z"}])
    with t.transaction() as tx:
        tx.alter_table("t").add_check("small", "k < 5")
    with pytest.raises(mere.ConcurrentMetadataChange):
        writer.commit()
    assert t.table("t").scan(filter="k = 9").num_rows == 0


def test_alter_then_drop_in_one_transaction(t: mere.Database) -> None:
    with t.transaction() as tx:
        tx.alter_table("t").add_column("x", pa.int64())
        tx.drop_table("t")
    assert t.tables() == []


def test_widening_records_the_earlier_types() -> None:
    """Readers of files written before a widening may need their types (format §5);
    decimal type names hold commas, so the record is a JSON list."""
    from mere.schema import widen_column, widened_from

    schema = pa.schema([pa.field("d", pa.decimal128(10, 2)), pa.field("u", pa.uint8())])
    once = widen_column(widen_column(schema, "d", pa.decimal128(12, 2)), "u", pa.uint16())
    twice = widen_column(once, "d", pa.decimal128(14, 3))
    assert widened_from(twice.field("d")) == ["decimal128(10, 2)", "decimal128(12, 2)"]
    assert widened_from(twice.field("u")) == ["uint8"]
    assert widened_from(schema.field("d")) == []
