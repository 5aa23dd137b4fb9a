"""Columns of Arrow's ``null`` type: never created, and widened when values arrive.

A list of dicts or a pandas column holding only None is inferred as type
``null``, which can hold nothing but NULL. A schema merge added such a column
as is, and no later write could put a value in it (nor could it be widened,
dropped or exported to Delta Lake). As in Spark's schema merging, a ``null``
column now widens to any type, and a new column must come with a type.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import schema as schemas


@pytest.fixture
def c(db: mere.Database) -> mere.Database:
    db.create_table("c", pa.schema([("id", pa.int64())]))
    db.table("c").append([{"id": 1}])
    return db


@pytest.fixture
def with_null_column(c: mere.Database, monkeypatch: pytest.MonkeyPatch) -> mere.Database:
    """A table holding a column of type null and a file that stores it, as an older mere left."""
    with monkeypatch.context() as m:
        m.setattr(schemas, "refuse_null_type", lambda *args, **kwargs: None, raising=False)
        c.table("c").append([{"id": 2, "e": None}], schema_mode="merge")
    assert c.table("c").schema.field("e").type == pa.null()
    return c


def widen(db: mere.Database, type_: pa.DataType) -> None:
    with db.transaction() as tx:
        tx.alter_table("c").widen_column("e", type_)


@pytest.mark.parametrize(
    "data",
    [
        [{"id": 2, "e": None}],
        [{"id": 2, "e": None}, {"id": 3}],
        pa.table({"id": [2], "e": pa.nulls(1)}),
        [{"id": 2, "e": []}],  # list<null>
        [{"id": 2, "e": {"a": None}}],  # struct<a: null>
    ],
    ids=["dicts", "missing-key", "arrow", "empty-list", "struct-of-null"],
)
def test_a_merge_adding_a_column_of_only_nulls_is_refused(c: mere.Database, data: object) -> None:
    """It added a column of type null that no later write could put a value in."""
    before = c.version
    with pytest.raises(mere.SchemaMismatch, match=r"column 'e'.*null") as caught:
        c.table("c").append(data, schema_mode="merge")
    assert "type" in (caught.value.help or "")
    assert c.version == before
    assert c.table("c").schema.names == ["id"]


def test_a_pandas_column_of_only_none_is_refused_in_a_merge(c: mere.Database) -> None:
    pd = pytest.importorskip("pandas")
    with pytest.raises(mere.SchemaMismatch, match=r"column 'e'"):
        c.table("c").append(pd.DataFrame({"id": [2], "e": [None]}), schema_mode="merge")
    assert c.table("c").schema.names == ["id"]


def test_a_typed_column_of_only_nulls_is_added_by_a_merge(c: mere.Database) -> None:
    c.table("c").append(pa.table({"id": [2], "e": pa.nulls(1, pa.int32())}), schema_mode="merge")
    assert c.table("c").schema.field("e").type == pa.int32()
    c.table("c").append([{"id": 3, "e": 7}])
    assert c.table("c").scan().sort_by("id").column("e").to_pylist() == [None, None, 7]


def test_nulls_for_an_existing_column_still_merge(c: mere.Database) -> None:
    c.table("c").append([{"id": 2, "e": 5}], schema_mode="merge")
    c.table("c").append([{"id": 3, "e": None}], schema_mode="merge")
    c.table("c").append(pa.table({"id": [4], "e": pa.nulls(1)}), schema_mode="merge")
    assert c.table("c").schema.field("e").type == pa.int64()
    assert c.table("c").scan().sort_by("id").column("e").to_pylist() == [None, 5, None, None]


@pytest.mark.parametrize(
    "type_",
    [
        pa.null(),
        pa.list_(pa.null()),
        pa.struct([("a", pa.null())]),
        pa.map_(pa.string(), pa.null()),
    ],
)
def test_create_table_refuses_a_column_of_the_null_type(
    db: mere.Database, type_: pa.DataType
) -> None:
    with pytest.raises(mere.SchemaMismatch, match=r"column 'x'.*null"):
        db.create_table("n", pa.schema([("id", pa.int64()), ("x", type_)]))
    assert "n" not in db.tables()


@pytest.mark.parametrize("type_", [pa.null(), pa.list_(pa.null())])
def test_add_column_refuses_the_null_type(c: mere.Database, type_: pa.DataType) -> None:
    before = c.version
    with pytest.raises(mere.SchemaMismatch, match=r"column 'y'.*null"):
        with c.transaction() as tx:
            tx.alter_table("c").add_column("y", type_)
    assert c.version == before


def test_a_null_column_widens_to_any_type(with_null_column: mere.Database) -> None:
    """It was refused as "could lose data", though the column holds only NULL."""
    db = with_null_column
    widen(db, pa.int64())
    assert db.table("c").schema.field("e").type == pa.int64()
    db.table("c").append([{"id": 3, "e": 3}])
    db.table("c").update("id = 1", {"e": 5})
    table = db.table("c")
    assert table.scan().sort_by("id").to_pylist() == [
        {"id": 1, "e": 5},
        {"id": 2, "e": None},
        {"id": 3, "e": 3},
    ]
    assert table.scan(filter="e IS NULL").column("id").to_pylist() == [2]
    assert table.scan(filter="e = 3").column("id").to_pylist() == [3]
    assert sorted(db.sql("SELECT id FROM c WHERE e IS NULL OR e > 4").column("id").to_pylist()) == [
        1,
        2,
    ]
    assert db.check().findings == []


@pytest.mark.parametrize(
    "type_",
    [
        pa.string(),
        pa.timestamp("us", tz="UTC"),
        pa.list_(pa.int32()),
        pa.struct([("a", pa.bool_())]),
    ],
)
def test_a_null_column_widens_to_nested_and_other_types(
    with_null_column: mere.Database, type_: pa.DataType
) -> None:
    widen(with_null_column, type_)
    table = with_null_column.table("c")
    assert table.schema.field("e").type == type_
    assert table.scan().column("e").to_pylist() == [None, None]
    assert table.scan().schema.field("e").type == type_


def test_a_null_column_is_not_widened_to_a_null_or_unsupported_type(
    with_null_column: mere.Database,
) -> None:
    for type_ in (pa.list_(pa.null()), pa.month_day_nano_interval()):
        with pytest.raises(mere.SchemaMismatch):
            widen(with_null_column, type_)
    assert with_null_column.table("c").schema.field("e").type == pa.null()


def test_a_widening_to_a_dictionary_stores_its_value_type(with_null_column: mere.Database) -> None:
    widen(with_null_column, pa.dictionary(pa.int32(), pa.string()))
    assert with_null_column.table("c").schema.field("e").type == pa.string()


def test_a_merge_widens_a_null_column_when_values_arrive(with_null_column: mere.Database) -> None:
    """A merge-append of values into the null column failed with "Invalid null value"."""
    db = with_null_column
    db.table("c").append([{"id": 3, "e": None}], schema_mode="merge")  # still nothing to go on
    assert db.table("c").schema.field("e").type == pa.null()
    db.table("c").append([{"id": 4, "e": 4}], schema_mode="merge")
    assert db.table("c").schema.field("e").type == pa.int64()
    db.table("c").append(pa.table({"id": [5], "e": pa.array([5], pa.int32())}))
    assert db.table("c").scan().sort_by("id").column("e").to_pylist() == [None, None, None, 4, 5]


def test_a_strict_append_of_values_into_a_null_column_says_how_to_widen_it(
    with_null_column: mere.Database,
) -> None:
    for data in ([{"id": 3, "e": 3}], pa.table({"id": [3], "e": [3]})):
        with pytest.raises(mere.SchemaMismatch, match="column 'e'") as caught:
            with_null_column.table("c").append(data)
        assert "widen_column" in (caught.value.help or "")


def test_a_widened_null_column_compacts_and_exports(
    with_null_column: mere.Database, tmp_path: Path
) -> None:
    db = with_null_column
    widen(db, pa.int64())
    db.table("c").append([{"id": 3, "e": 3}])
    db.table("c").compact(sort_by=["e"])
    assert db.table("c").scan().sort_by("id").column("e").to_pylist() == [None, None, 3]
    result = db.table("c").export_delta(str(tmp_path / "delta"))
    assert result.rows == 3
    deltalake = pytest.importorskip("deltalake")
    exported = deltalake.DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    assert sorted(exported.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "e": None},
        {"id": 2, "e": None},
        {"id": 3, "e": 3},
    ]


def test_merge_schema_and_is_safe_widening() -> None:
    table = pa.schema([("id", pa.int64()), ("e", pa.null())])
    assert schemas.is_safe_widening(pa.null(), pa.int8())
    assert schemas.is_safe_widening(pa.null(), pa.list_(pa.string()))
    assert not schemas.is_safe_widening(pa.null(), pa.list_(pa.null()))
    assert not schemas.is_safe_widening(pa.int8(), pa.null())
    merged = schemas.merge_schema(table, pa.schema([("e", pa.float64())]))
    assert merged.field("e").type == pa.float64()
    assert schemas.widened_from(merged.field("e")) == ["null"]
    assert schemas.merge_schema(table, pa.schema([("E", pa.null())])) == table
    with pytest.raises(mere.SchemaMismatch, match="column 'f'"):
        schemas.merge_schema(table, pa.schema([("f", pa.null())]))
