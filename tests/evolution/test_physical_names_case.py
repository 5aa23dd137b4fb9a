"""Physical column names stay distinct ignoring case (Spark's Parquet reader ignores it)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

import mere
from mere.names import name_key
from mere.schema import physical_name


def test_a_new_column_never_reuses_a_physical_name_in_another_case(tmp_path) -> None:
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    db.table("t").append([{"id": 1, "v": 10}])
    with db.transaction() as tx:
        tx.alter_table("t").rename_column("v", "w")
    with db.transaction() as tx:
        tx.alter_table("t").add_column("V", pa.int64())
    db.table("t").append([{"id": 2, "w": 20, "V": 200}])
    names = [physical_name(f) for f in db.table("t").schema]
    assert len({name_key(n) for n in names}) == len(names), names
    for path in (tmp_path / "db" / "tables").rglob("*.parquet"):
        stored = pq.read_schema(path).names
        assert len({name_key(n) for n in stored}) == len(stored), stored
    rows = sorted(db.table("t").scan().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "w": 10, "V": None}, {"id": 2, "w": 20, "V": 200}]


def test_a_merge_keeps_the_type_of_a_partition_column(tmp_path) -> None:
    """Files spell partition values in their paths: widening the column would re-read them."""
    db = mere.connect(str(tmp_path / "db"))
    schema = pa.schema([("id", pa.int64()), ("p", pa.decimal128(10, 2))])
    db.create_table("t", schema, partition_by=["p"])
    wider = pa.schema([("id", pa.int64()), ("p", pa.decimal128(12, 3))])
    from decimal import Decimal

    data = pa.table({"id": [1], "p": [Decimal("1.500")]}, schema=wider)
    db.table("t").append(data, schema_mode="merge")
    assert db.table("t").schema.field("p").type == pa.decimal128(10, 2)
    assert db.table("t").scan().column("p").to_pylist() == [Decimal("1.50")]
