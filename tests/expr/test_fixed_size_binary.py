"""Fixed-size binary columns compare as BLOBs do, in filters, DML and merges (as in
DuckDB); they were refused: "cannot compare values of type fixed_size_binary"."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere

duckdb = pytest.importorskip("duckdb")

FSB = pa.binary(4)
VALUES = [b"abcd", b"\x00\x01\x02\x03", None, b"abce", b"\xff\xff\xff\xff"]
FILTERS = [
    "v = 'abcd'::BLOB",
    "v <> 'abcd'::BLOB",
    "v < 'b'::BLOB",
    "v >= '\\x00\\x01\\x02\\x03'::BLOB",
    "v IN ('abce'::BLOB, '\\xFF\\xFF\\xFF\\xFF'::BLOB)",
    "v IS NULL OR v > 'abcd'::BLOB",
]


@pytest.mark.parametrize("where", FILTERS)
def test_filters_match_duckdb(db: mere.Database, where: str) -> None:
    data = pa.table({"id": range(len(VALUES)), "v": pa.array(VALUES, FSB)})
    db.create_table("t", data.schema)
    db.table("t").append(data)
    want = [i for (i,) in duckdb.sql(f"SELECT id FROM data WHERE {where} ORDER BY id").fetchall()]
    got = db.table("t").scan(filter=where).sort_by("id").column("id").to_pylist()
    assert got == want
    db.table("t").delete(where)
    left = db.table("t").scan().sort_by("id").column("id").to_pylist()
    assert left == [i for i in range(len(VALUES)) if i not in want]


def test_a_fixed_size_binary_key_takes_upserts_and_merges(db: mere.Database) -> None:
    schema = pa.schema([("v", FSB), ("x", pa.int32())])
    db.create_table("k", schema, primary_key=["v"])
    db.table("k").append(pa.table({"v": pa.array([b"abcd", b"wxyz"], FSB), "x": [1, 2]}))
    upsert = pa.table({"v": pa.array([b"abcd", b"new!"], FSB), "x": [10, 3]}, schema=schema)
    db.table("k").append(upsert, on_duplicate="update")
    source = pa.table({"v": pa.array([b"wxyz"], FSB), "x": [20]}, schema=schema)
    db.table("k").merge(source, "t.v = s.v").when_matched_update_all().execute()
    rows = db.table("k").scan().sort_by("x").to_pylist()
    assert rows == [
        {"v": b"new!", "x": 3},
        {"v": b"abcd", "x": 10},
        {"v": b"wxyz", "x": 20},
    ]
    with pytest.raises(mere.DuplicateKey):
        db.table("k").append(pa.table({"v": pa.array([b"abcd"], FSB), "x": [0]}, schema=schema))
