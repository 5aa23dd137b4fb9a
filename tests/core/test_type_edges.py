"""Column types at their edges: primary keys, casts and values Arrow holds but Python does not."""

from __future__ import annotations

import math
import re

import pyarrow as pa
import pytest

import mere

ZONED = pa.timestamp("us", tz="+05:30")
#: 9999-12-31 23:59:59 UTC: a valid instant, but year 10000 in local time (+05:30).
LAST_INSTANT = 253402300799 * 10**6


def test_a_zoned_timestamp_key_past_year_9999_in_local_time_is_checked(
    db: mere.Database,
) -> None:
    """A new key whose local time Python cannot hold raised a raw OverflowError."""
    db.create_table("z", pa.schema([("v", ZONED), ("x", pa.int32())]), primary_key=["v"])
    table = db.table("z")
    table.append(pa.table({"v": pa.array([0], pa.int64()).cast(ZONED), "x": [1]}))
    late = pa.array([LAST_INSTANT], pa.int64()).cast(ZONED)
    table.append(pa.table({"v": late, "x": [2]}))
    assert sorted(table.scan().column("x").to_pylist()) == [1, 2]
    with pytest.raises(mere.DuplicateKey, match="10000-01-01"):
        table.append(pa.table({"v": late, "x": [3]}))
    assert table.scan().num_rows == 2


@pytest.mark.parametrize(
    "type_",
    [pa.duration("s"), pa.duration("ns"), pa.float16()],
    ids=["duration_s", "duration_ns", "float16"],
)
def test_a_key_type_mere_cannot_match_is_refused_at_creation(
    db: mere.Database, type_: pa.DataType
) -> None:
    """A duration key took rows but no upsert or merge (durations do not compare); a
    float16 key took no row at all (raw ArrowNotImplementedError on every append)."""
    schema = pa.schema([("v", type_), ("x", pa.int32())])
    v = db.version
    with pytest.raises(mere.InvalidName, match=f"'v' has type {re.escape(str(type_))}"):
        db.create_table("k", schema, primary_key=["v"])
    with pytest.raises(mere.InvalidName, match=f"'v' has type {re.escape(str(type_))}"):
        db.create_table("k", schema, properties={"mere.primaryKey": '["v"]'})
    assert db.version == v
    db.create_table("k", schema)
    with pytest.raises(mere.InvalidName, match=f"'v' has type {re.escape(str(type_))}"):
        with db.transaction() as tx:
            tx.alter_table("k").set_primary_key(["v"])


def test_key_values_python_cannot_hold_are_named_by_their_text() -> None:
    """describe_keys raised a raw OverflowError for a duration past timedelta's range."""
    from mere.txn.keys import describe_keys, key_rows

    keys = pa.table({"v": pa.array([2**62], pa.duration("s")), "n": [1]})
    assert describe_keys(keys) == "('4611686018427387904', 1)"
    assert key_rows(keys) == [{"v": "4611686018427387904", "n": 1}]


@pytest.mark.parametrize(
    ("value", "stored"), [("0.1", 0.0999755859375), ("d", 1.25), ("b", 1.0), ("i", 7.0)]
)
def test_every_value_a_real_column_takes_a_float16_column_takes(
    db: mere.Database, value: str, stored: float
) -> None:
    """A decimal (the literal 0.1 too) or a boolean into float16 was an "Unsupported cast"."""
    import decimal

    columns = {
        "id": pa.array([1], pa.int64()),
        "v": pa.array([0.0], pa.float32()).cast(pa.float16()),
        "r": pa.array([0.0], pa.float32()),
        "d": pa.array([decimal.Decimal("1.25")], pa.decimal128(5, 2)),
        "b": pa.array([True]),
        "i": pa.array([7], pa.int64()),
    }
    db.create_table("h", pa.schema([(n, a.type) for n, a in columns.items()]))
    table = db.table("h")
    table.append(pa.table(columns))
    table.update("id = 1", {"r": value})  # what REAL takes, float16 takes
    table.update("id = 1", {"v": value})
    row = table.scan().to_pylist()[0]
    assert row["v"] == stored
    assert row["r"] == pytest.approx(stored, abs=1e-3)


MAP = pa.map_(pa.string(), pa.int64())


def _nested_map_cases() -> list[tuple[pa.DataType, list[object], str]]:
    """(column type, one row's value holding a repeated map key somewhere, the key)."""
    inner = pa.map_(pa.string(), MAP)
    return [
        (MAP, [("k", 1), ("k", 2)], "k"),
        (pa.struct([("s", MAP)]), {"s": [("a", 1), ("b", 2), ("a", 3)]}, "a"),
        (pa.list_(MAP), [[("x", 1)], [("y", 1), ("y", 2)]], "y"),
        (inner, [("o", [("i", 1), ("i", 2)])], "i"),
        (pa.map_(pa.float64(), pa.int64()), [(0.0, 1), (-0.0, 2)], "0.0"),
        (pa.map_(pa.float64(), pa.int64()), [(math.nan, 1), (-math.nan, 2)], "nan"),
    ]


@pytest.mark.parametrize(("type_", "value", "key"), _nested_map_cases())
def test_a_map_with_a_repeated_key_is_refused_at_any_depth(
    db: mere.Database, type_: pa.DataType, value: object, key: str
) -> None:
    """It was written, then db.sql and Spark could not read the table."""
    db.create_table("t", pa.schema([("id", pa.int64()), ("m", type_)]))
    table = db.table("t")
    good = pa.array([None], type_)
    table.append(pa.table({"id": [1], "m": good}))
    v = db.version
    bad = pa.table({"id": [2, 3], "m": pa.array([None, value], type_)})
    with pytest.raises(mere.SchemaMismatch, match=f"column 'm'.*repeated key.*{key}"):
        table.append(bad)
    with pytest.raises(mere.SchemaMismatch, match="column 'm'"):
        table.append(bad.to_pylist())
    with pytest.raises(mere.SchemaMismatch, match="column 'm'"):
        table.overwrite(bad)
    assert db.version == v


def test_maps_with_distinct_keys_are_taken_however_sliced(db: mere.Database) -> None:
    """Keys repeat across rows, and in a slice's hidden rows, not within one map."""
    db.create_table(
        "t", pa.schema([("id", pa.int64()), ("m", MAP), ("s", pa.struct([("n", MAP)]))])
    )
    maps = pa.array([[("k", 1), ("k", 2)], [("k", 1)], [("k", 2), ("j", 3)], None], MAP)
    hidden = pa.StructArray.from_arrays(
        [maps], names=["n"], mask=pa.array([True, False, False, False])
    )
    data = pa.table({"id": [0, 1, 2, 3], "m": maps, "s": hidden}).slice(1)
    db.table("t").append(data)
    assert db.table("t").scan().sort_by("id").column("m").to_pylist() == [
        [("k", 1)],
        [("k", 2), ("j", 3)],
        None,
    ]
    # the first row's map is hidden under a NULL struct: not a value, not refused
    db.table("t").append(pa.table({"id": [4], "m": maps.slice(3), "s": hidden.slice(0, 1)}))


def _ticks(values: list[int], type_: pa.DataType) -> pa.Array:
    return pa.array(values, pa.int32() if pa.types.is_time32(type_) else pa.int64()).cast(type_)


@pytest.mark.parametrize(
    ("column", "given", "ticks"),
    [
        (pa.time32("s"), pa.time64("us"), 45296 * 10**6),
        (pa.time64("ns"), pa.time32("ms"), 45296 * 10**3),
        (pa.time32("ms"), pa.time32("s"), 45296),
        (pa.duration("s"), pa.duration("ns"), 3 * 10**9),
    ],
)
def test_times_and_durations_change_unit_when_no_value_is_lost(
    db: mere.Database, column: pa.DataType, given: pa.DataType, ticks: int
) -> None:
    """A time in another unit was refused whatever its value (12:34:56 as time64[us] into
    time32[s], which SQL's INSERT of TIME '12:34:56' makes); a lossy one still is."""
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", column)]))
    table = db.table("t")
    exact = _ticks([ticks], given)
    table.append(pa.table({"id": [1], "v": exact}))
    assert table.scan().column("v").to_pylist() == exact.cast(column).to_pylist()
    assert table.scan().schema.field("v").type == column
    finer = {"s": 1, "ms": 1_000, "us": 10**6, "ns": 10**9}
    if finer[given.unit] > finer[column.unit]:  # one tick of the finer unit does not fit
        lossy = _ticks([ticks + 1], given)
        with pytest.raises(mere.SchemaMismatch, match="without loss"):
            table.append(pa.table({"id": [2], "v": lossy}))
    with pytest.raises(mere.SchemaMismatch, match="has type"):
        table.append(pa.table({"id": [3], "v": pa.array([1], pa.timestamp("s"))}))
    assert table.scan().num_rows == 1


@pytest.mark.parametrize(
    ("given", "stored", "value"),
    [
        (pa.string_view(), pa.string(), "a"),
        (pa.binary_view(), pa.binary(), b"a"),
        (pa.dictionary(pa.int32(), pa.string()), pa.string(), "a"),
        (pa.list_(pa.string_view()), pa.list_(pa.string()), ["a"]),
    ],
)
def test_a_column_type_create_table_takes_add_column_and_merge_take(
    db: mere.Database, given: pa.DataType, stored: pa.DataType, value: object
) -> None:
    """View types were "unsupported column type string_view" when added, not created."""
    db.create_table("t", pa.schema([("id", pa.int64())]))
    with db.transaction() as tx:
        tx.alter_table("t").add_column("a", given)
    data = pa.table(
        {
            "id": [1],
            "a": pa.array([value], stored).cast(given),
            "b": pa.array([value], stored).cast(given),
        }
    )
    db.table("t").append(data.select(["id", "a"]))
    db.table("t").append(data, schema_mode="merge")
    assert db.table("t").schema == pa.schema([("id", pa.int64()), ("a", stored), ("b", stored)])
    assert db.table("t").scan().column("b").to_pylist() == [None, value]


@pytest.mark.parametrize("given", [pa.dictionary(pa.int32(), pa.string()), pa.string_view()])
def test_a_partition_column_is_judged_by_the_type_it_is_stored_as(
    db: mere.Database, given: pa.DataType
) -> None:
    """A dictionary-encoded string column (stored as a string) could not partition."""
    schema = pa.schema([("p", given), ("x", pa.int64())])
    db.create_table("t", schema, partition_by=["p"])
    assert db.table("t").schema.field("p").type == pa.string()
    db.table("t").append(pa.table({"p": pa.array(["a", "b"]).cast(given), "x": [1, 2]}))
    assert db.table("t").scan(filter="p = 'b'").column("x").to_pylist() == [2]


def test_a_null_map_row_backed_by_entries_is_taken(db: mere.Database) -> None:
    """Legal Arrow (a NULL row's offsets may span entries, repeated keys even): the check of
    repeated keys raised a raw ArrowInvalid where the append had succeeded before."""
    db.create_table("t", pa.schema([("id", pa.int64()), ("m", MAP)]))
    offsets = pa.array([0, 2, 4, 5], pa.int32())
    keys, items = pa.array(["a", "b", "x", "x", "c"]), pa.array([1, 2, 3, 4, 5])
    maps = pa.MapArray.from_arrays(offsets, keys, items, mask=pa.array([False, True, False]))
    db.table("t").append(pa.table({"id": [0, 1, 2], "m": maps}))
    db.table("t").append(pa.table({"id": [3, 4], "m": maps.slice(1)}))
    assert db.table("t").scan().sort_by("id").column("m").to_pylist() == [
        [("a", 1), ("b", 2)],
        None,
        [("c", 5)],
        None,
        [("c", 5)],
    ]
