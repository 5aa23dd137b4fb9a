"""Hand-offs of a table at one version: a reusable dataset, pandas, polars, counts."""

from __future__ import annotations

import sys

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sql_helpers import rows

import mere


@pytest.fixture
def orders(db: mere.Database, orders_schema: pa.Schema) -> mere.Database:
    db.create_table("orders", orders_schema, partition_by=["country"])
    db.table("orders").append(
        [{"id": i, "country": ["FR", "DE", None][i % 3], "amount": i * 1.5} for i in range(30)]
    )
    db.table("orders").append([{"id": 100, "country": "FR", "amount": float("nan")}])
    return db


def test_to_dataset_is_reusable_and_takes_filters(orders: mere.Database) -> None:
    snap = orders.snapshot().table("orders")
    dataset = snap.to_dataset()
    assert rows(dataset.to_table()) == rows(snap.scan())
    assert rows(dataset.to_table()) == rows(snap.scan())  # scanned twice
    fr = dataset.to_table(filter=pc.field("country") == "FR", columns=["id"])
    assert sorted(fr.column("id").to_pylist()) == sorted(
        snap.scan(["id"], "country = 'FR'").column("id").to_pylist()
    )
    con = duckdb.connect()
    con.register("orders", dataset)
    assert con.sql("SELECT count(*) FROM orders WHERE country IS NULL").fetchall() == [(10,)]
    assert con.sql("SELECT count(*) FROM orders").fetchall() == [(31,)]  # and again


def test_to_pandas(orders: mere.Database) -> None:
    frame = orders.snapshot().table("orders").to_pandas(["id", "amount"], "id < 3")
    assert sorted(frame["id"].tolist()) == [0, 1, 2]


def test_to_polars_names_the_extra_when_missing(
    orders: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    snap = orders.snapshot().table("orders")
    monkeypatch.setitem(sys.modules, "polars", None)
    with pytest.raises(mere.MissingDependency, match=r"mere\[polars\]"):
        snap.to_polars()


def test_to_polars(orders: mere.Database) -> None:
    pytest.importorskip("polars")
    assert orders.snapshot().table("orders").to_polars().height == 31


def test_count_from_the_log_where_it_can(orders: mere.Database) -> None:
    snap = orders.snapshot().table("orders")
    assert snap.count() == 31
    assert snap.count("country = 'FR'") == 11
    assert snap.count("country IS NULL") == 10
    assert snap.count("amount > 10") == snap.scan(filter="amount > 10").num_rows
    assert snap.count("id >= 1000") == 0


def test_count_reads_only_files_the_statistics_cannot_settle(tmp_path) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("t", pa.schema([("id", pa.int64()), ("p", pa.string())]), partition_by=["p"])
    db.table("t").append(pa.table({"id": list(range(10)), "p": ["a"] * 10}))
    db.table("t").append(pa.table({"id": list(range(10, 20)), "p": ["b"] * 10}))
    snap = db.snapshot().table("t")
    for f in snap.files:  # no file can be read any more
        (tmp_path / "db" / "tables" / snap.id / f.path).unlink()
    assert snap.count() == 20
    assert snap.count("p = 'a'") == 10  # the partition value settles it
    assert snap.count("id >= 10") == 10  # statistics settle both files
    with pytest.raises(mere.MereError):
        snap.count("id % 2 = 0")  # needs the rows
