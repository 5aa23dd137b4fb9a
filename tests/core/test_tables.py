"""Tables: create, drop, list, describe, append in every input form, scan with filters."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pytest

import mere
from mere.storage import FaultyStore, MemoryStore

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("day", pa.date32()),
    ]
)


def rows(n: int, start: int = 0) -> pa.Table:
    countries = ["FR", "DE", "GB", "US"]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "country": [countries[i % 4] for i in range(start, start + n)],
            "amount": [float(i) for i in range(start, start + n)],
            "day": [dt.date(2024, 1, 1 + i % 3) for i in range(start, start + n)],
        },
        schema=ORDERS,
    )


def test_create_list_describe_drop(db: mere.Database) -> None:
    db.create_table("orders", ORDERS, partition_by=["day"])
    db.create_table("customers", pa.schema([("id", pa.int64())]))
    assert db.tables() == ["customers", "orders"]

    db.table("orders").append(rows(10))
    info = db.table("orders").describe()
    assert info["name"] == "orders"
    assert info["partition_by"] == ["day"]
    assert info["rows"] == 10
    assert info["files"] == 3  # one per day
    assert [c["name"] for c in info["schema"]] == ["id", "country", "amount", "day"]

    db.drop_table("customers")
    assert db.tables() == ["orders"]
    with pytest.raises(mere.TableNotFound):
        db.table("customers")


def test_append_accepts_every_input_form(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    t = db.table("orders")
    t.append(rows(2))
    t.append(rows(2, 2).to_batches()[0])
    t.append(pa.RecordBatchReader.from_batches(ORDERS, rows(2, 4).to_batches()))
    t.append(rows(2, 6).to_pandas())
    t.append(
        [{"id": 8, "country": "FR", "amount": 1.5, "day": dt.date(2024, 1, 1)}, {"id": 9}]
    )  # a missing key in a dict is a null
    got = t.scan().sort_by("id")
    assert got.column("id").to_pylist() == list(range(10))
    assert got.column("country").to_pylist()[9] is None


def test_append_reorders_columns_and_widens_safely(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    data = pa.table(
        {
            "amount": pa.array([1.0], pa.float64()),
            "id": pa.array([1], pa.int32()),  # int32 into int64 is lossless
            "day": pa.array([dt.date(2024, 1, 1)]),
            "country": pa.array(["FR"], pa.large_string()),
        }
    )
    db.table("orders").append(data)
    assert db.table("orders").scan().schema == ORDERS


def test_scan_columns_and_filter(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    db.table("orders").append(rows(100))
    got = db.table("orders").scan(columns=["id"], filter="amount > 10 AND country IN ('FR','DE')")
    assert got.column_names == ["id"]
    expected = [i for i in range(100) if i > 10 and i % 4 in (0, 1)]
    assert sorted(got.column("id").to_pylist()) == expected


def test_scan_batches_streams_the_same_rows(db: mere.Database) -> None:
    db.create_table("orders", ORDERS, partition_by=["day"])
    db.table("orders").append(rows(50))
    reader = db.table("orders").scan_batches(filter="day = '2024-01-02'")
    got = reader.read_all()
    assert reader.schema == ORDERS
    assert sorted(got.column("id").to_pylist()) == [i for i in range(50) if i % 3 == 1]


def test_partition_values_come_back_typed(db: mere.Database) -> None:
    db.create_table("orders", ORDERS, partition_by=["day", "country"])
    db.table("orders").append(rows(12))
    got = db.table("orders").scan(filter="country = 'GB'").sort_by("id")
    assert got.column("country").to_pylist() == ["GB"] * 3
    assert got.column("day").type == pa.date32()


def test_partition_pruning_and_stats_skip_files() -> None:
    """Files ruled out by partition values or statistics are never opened."""
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("orders", ORDERS, partition_by=["country"])
    for start in range(0, 400, 100):  # four appends: ids 0-99, 100-199, ...
        db.table("orders").append(rows(100, start))
    assert db.table("orders").describe()["files"] == 16

    before = store.calls["open_input"]
    got = db.table("orders").scan(filter="country = 'FR' AND id >= 300")
    assert store.calls["open_input"] - before == 1
    assert sorted(got.column("id").to_pylist()) == [i for i in range(300, 400) if i % 4 == 0]


def test_statistics_are_recorded_per_file(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    db.table("orders").append(
        pa.table(
            {
                "id": pa.array([5, 1, 9], pa.int64()),
                "country": ["b", None, "a"],
                "amount": [1.5, None, -2.0],
                "day": [dt.date(2024, 1, 3), dt.date(2024, 1, 1), None],
            },
            schema=ORDERS,
        )
    )
    (add,) = db.snapshot().table("orders").files
    assert add.rows == 3
    assert add.stats == {
        "numRecords": 3,
        "minValues": {"id": 1, "country": "a", "amount": -2.0, "day": "2024-01-01"},
        "maxValues": {"id": 9, "country": "b", "amount": 1.5, "day": "2024-01-03"},
        "nullCount": {"id": 0, "country": 1, "amount": 1, "day": 1},
        "nanCount": {"amount": 0},  # floating-point columns only
    }


def test_target_file_size_splits_large_appends(db_uri: str) -> None:
    db = mere.connect(db_uri, target_file_size=64 * 1024)
    db.create_table("orders", ORDERS)
    db.table("orders").append(rows(200_000))
    files = db.snapshot().table("orders").files
    assert len(files) > 3
    assert sum(f.rows for f in files) == 200_000
    assert db.table("orders").scan(columns=["id"]).num_rows == 200_000


def test_empty_append_commits_nothing(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    v = db.version
    with db.transaction() as tx:
        tx.table("orders").append(ORDERS.empty_table())
    assert db.version == v


def test_scan_of_empty_table(db: mere.Database) -> None:
    db.create_table("orders", ORDERS)
    got = db.table("orders").scan(filter="id = 1")
    assert got.num_rows == 0 and got.schema == ORDERS


def test_timestamps_and_unicode_round_trip(db: mere.Database) -> None:
    schema = pa.schema(
        [("ts", pa.timestamp("us", tz="UTC")), ("s", pa.string()), ("d", pa.decimal128(10, 2))]
    )
    db.create_table("t", schema, partition_by=["s"])
    data = pa.table(
        {
            "ts": [dt.datetime(2024, 5, 1, 12, tzinfo=dt.UTC), None],
            "s": ["é/..\\%2F'x", None],
            "d": pa.array([__import__("decimal").Decimal("1.25"), None], pa.decimal128(10, 2)),
        },
        schema=schema,
    )
    db.table("t").append(data)
    got = db.table("t").scan().sort_by([("s", "ascending")])
    assert got.to_pylist() == data.sort_by([("s", "ascending")]).to_pylist()
    assert db.table("t").scan(filter="s = 'é/..\\%2F''x'").num_rows == 1
    assert db.table("t").scan(filter="s IS NULL").num_rows == 1


def test_pandas_dataframe_with_index_is_appended_without_it(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("a", pa.int64())]))
    df = pd.DataFrame({"a": [1, 2]}, index=[10, 20])
    db.table("t").append(df)
    assert db.table("t").scan().column_names == ["a"]


def test_view_and_dictionary_types_are_stored_plainly(db: mere.Database) -> None:
    schema = pa.schema(
        [
            pa.field("a", pa.string_view(), metadata={b"PARQUET:field_id": b"1"}),
            pa.field("b", pa.list_(pa.string_view())),
        ]
    )
    db.create_table("t", schema)
    assert db.table("t").schema == pa.schema([("a", pa.string()), ("b", pa.list_(pa.string()))])
    db.table("t").append(pa.table({"a": pa.array(["x"]).dictionary_encode(), "b": [["y"]]}))
    db.table("t").append(
        pa.table(
            {
                "a": pa.array(["z"], pa.string_view()),
                "b": pa.array([["w"]], pa.list_(pa.string_view())),
            }
        )
    )
    assert sorted(db.table("t").scan().column("a").to_pylist()) == ["x", "z"]
