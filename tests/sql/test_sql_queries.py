"""Queries through DuckDB: every table at one version, pushdown, exact rows, time travel."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from decimal import Decimal as D
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sql_helpers import rows

import mere
from mere.snapshot.dataset import table_dataset
from mere.sql import SQLError, UnsupportedSQL
from mere.sql.native import native_view

NAN = float("nan")

ODD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("p", pa.string()),
        pa.field("f", pa.float64()),
        pa.field("ts", pa.timestamp("ns")),
        pa.field("tz", pa.timestamp("us", "UTC")),
        pa.field("d", pa.date32()),
        pa.field("dec", pa.decimal128(12, 3)),
        pa.field("b", pa.bool_()),
        pa.field("s", pa.string()),
        pa.field("u", pa.uint32()),
        pa.field("small", pa.int16()),
    ]
)


def odd_rows(start: int, n: int, seed: int) -> pa.Table:
    rng = random.Random(seed)

    def maybe(v: object) -> object:
        return None if rng.random() < 0.2 else v

    return pa.table(
        {
            "id": list(range(start, start + n)),
            "p": [maybe(rng.choice(["a", "b", "O'x"])) for _ in range(n)],
            "f": [maybe(rng.choice([NAN, -0.0, 1.5, -2.25, float("inf"), 3.0])) for _ in range(n)],
            "ts": pa.array(
                [maybe(1_700_000_000_000_000_000 + rng.randrange(10**9)) for _ in range(n)],
                pa.timestamp("ns"),
            ),
            "tz": pa.array(
                [maybe(1_700_000_000_000_000 + rng.randrange(10**6)) for _ in range(n)],
                pa.timestamp("us", "UTC"),
            ),
            "d": [
                maybe(dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(60))) for _ in range(n)
            ],
            "dec": [
                maybe(decimal.Decimal(rng.randrange(-(10**6), 10**6)) / 1000) for _ in range(n)
            ],
            "b": [maybe(rng.random() < 0.5) for _ in range(n)],
            "s": [maybe(rng.choice(["", "x", "naïve", "日本", "a%b"])) for _ in range(n)],
            "u": [maybe(rng.randrange(2**32)) for _ in range(n)],
            "small": [maybe(rng.randrange(-300, 300)) for _ in range(n)],
        },
        schema=ODD,
    )


@pytest.fixture(params=["flat", "partitioned"])
def odd_db(request: pytest.FixtureRequest, db: mere.Database) -> mere.Database:
    """Table ``odd`` in several files, with NULL, NaN, ns timestamps, a renamed column."""
    db.create_table("odd", ODD, partition_by=["p"] if request.param == "partitioned" else [])
    for seed in range(3):
        db.table("odd").append(odd_rows(seed * 100, 40, seed))
    return db


def test_a_query_sees_every_table_at_one_version(db: mere.Database, orders_schema) -> None:
    db.create_table("orders", orders_schema)
    db.create_table("countries", pa.schema([("country", pa.string()), ("name", pa.string())]))
    db.table("countries").append([{"country": "FR", "name": "France"}])
    db.table("orders").append([{"id": 1, "country": "FR", "amount": 2.5}])
    result = db.sql("SELECT o.id, c.name, o.amount FROM orders o JOIN countries c USING (country)")
    assert result.to_pylist() == [{"id": 1, "name": "France", "amount": 2.5}]


def test_select_star_returns_exactly_the_scan(odd_db: mere.Database) -> None:
    """NULL, NaN, -0.0, infinities, ns timestamps, decimals: DuckDB hands back scan()'s rows."""
    expected = odd_db.table("odd").scan()
    got = odd_db.sql("SELECT * FROM odd")
    assert got.schema.names == expected.schema.names
    assert rows(got) == rows(expected)
    for name in ("ts", "d", "dec", "u", "small", "f"):
        assert got.schema.field(name).type == expected.schema.field(name).type, name
    # DuckDB names UTC after the session's zone (Etc/UTC); the instants are the same
    assert got.schema.field("tz").type.unit == "us" and got.schema.field("tz").type.tz


def test_the_registered_dataset_returns_exactly_the_scan(odd_db: mere.Database) -> None:
    snap = odd_db.snapshot().table("odd")
    dataset = table_dataset(odd_db.store, snap.meta, snap.files)
    assert dataset.schema == snap.schema
    assert rows(dataset.to_table()) == rows(snap.scan())
    assert rows(dataset.to_table()) == rows(dataset.to_table())  # reusable


def test_renamed_added_and_widened_columns_read_like_the_scan(odd_db: mere.Database) -> None:
    with odd_db.transaction() as tx:
        tx.alter_table("odd").rename_column("s", "label").add_column("s", pa.int64())
        tx.alter_table("odd").widen_column("small", pa.int64())
    odd_db.table("odd").append(
        odd_rows(1000, 5, 9)
        .rename_columns([*ODD.names[:-3], "label", "u", "small"])
        .append_column("s", pa.array([1, 2, None, 4, 5], pa.int64()))
    )
    expected = odd_db.table("odd").scan()
    got = odd_db.sql("SELECT * FROM odd")
    assert got.schema.names == expected.schema.names
    assert rows(got) == rows(expected)
    assert rows(odd_db.sql("SELECT label, s FROM odd WHERE s > 1")) == rows(
        odd_db.table("odd").scan(["label", "s"], "s > 1")
    )
    snap = odd_db.snapshot().table("odd")
    assert rows(snap.to_dataset().to_table()) == rows(expected)


@pytest.mark.parametrize(
    ("old", "old_value", "new", "new_value"),
    [
        (pa.decimal128(5, 2), D("1.25"), pa.decimal128(9, 4), D("1.2345")),
        (pa.int8(), -5, pa.int64(), 300),
    ],
)
def test_a_widened_column_reads_right_whatever_the_writers_clocks(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    old: pa.DataType,
    old_value: object,
    new: pa.DataType,
    new_value: object,
) -> None:
    """DuckDB reads a list of files in its first file's types: the newest-first order
    (by the writers' clocks) put a narrow file first when a clock ran ahead, and wider
    values came back rounded (1.2345 as 1.23) or failed as 'corrupt'."""
    import time
    import types

    from mere.data import writer

    db = mere.connect(tmp_path / "db")
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", old)]))
    ahead = types.SimpleNamespace(time=lambda: time.time() + 60)  # a minute ahead
    monkeypatch.setattr(writer, "time", ahead)
    db.table("t").append(pa.table({"id": [1], "v": pa.array([old_value], old)}))
    monkeypatch.undo()
    with db.transaction() as tx:
        tx.alter_table("t").widen_column("v", new)
    db.table("t").append(pa.table({"id": [2], "v": pa.array([new_value], new)}))
    assert native_view(db.store, db.snapshot().table("t").meta, db.snapshot().table("t").files)
    expected = db.table("t").scan().sort_by("id")
    assert db.sql("SELECT * FROM t ORDER BY id") == expected
    assert db.sql("SELECT count(*) AS n FROM t WHERE v = ?", [new_value]).to_pylist() == [{"n": 1}]


FILTERS = [
    "f > 1",
    "f >= 1.5",
    "f < 0",
    "f = 'NaN'::DOUBLE",
    "f IS NULL",
    "NOT (f > 1)",
    "ts > TIMESTAMP_NS '2023-11-14 22:13:20.5'",
    "tz <= TIMESTAMPTZ '2023-11-14 22:13:20.4+00'",
    "d BETWEEN DATE '2024-01-10' AND DATE '2024-01-20'",
    "dec > 100.5",
    "dec IN (1.000, -2.5)",
    "b",
    "NOT b",
    "b IS NULL",
    "s = ''",
    "s LIKE 'a%'",
    "s >= 'n'",
    "p = 'a'",
    "p IS NULL",
    "p IN ('b', 'O''x')",
    "u > 2000000000",
    "small < -100 OR small > 250",
    "id >= 100 AND id < 110",
    "id = 5 OR p = 'b'",
    "coalesce(small, 0) = 0",
]


def test_filters_pushed_into_the_scan_match_duckdb_on_the_same_rows(
    odd_db: mere.Database,
) -> None:
    """DuckDB's filters reach the dataset (and skip files): results equal DuckDB in memory."""
    reference = duckdb.connect()
    reference.register("odd", odd_db.table("odd").scan())
    for where in FILTERS:
        query = f"SELECT id, f, s FROM odd WHERE {where}"
        assert rows(odd_db.sql(query)) == rows(reference.sql(query).to_arrow_table()), where


def test_only_needed_columns_are_read_and_files_are_skipped(tmp_path) -> None:
    """Pushdown reaches the files: a query never touches a file or column it does not need.

    One file is replaced by a Parquet file whose ``blob`` cannot be read as the
    table's type, another is deleted: queries that need neither still work.
    (The float column sends the table through the pyarrow dataset, which opens
    only the files it reads; DuckDB's own reader opens every footer.)
    """
    db = mere.connect(tmp_path / "db")
    schema = pa.schema(
        [("id", pa.int64()), ("day", pa.string()), ("blob", pa.string()), ("w", pa.float64())]
    )
    db.create_table("t", schema, partition_by=["day"])
    for day in range(4):
        ids = list(range(day * 1000, day * 1000 + 1000))
        db.table("t").append(
            pa.table(
                {"id": ids, "day": [f"d{day}"] * 1000, "blob": ["x"] * 1000, "w": [1.0] * 1000}
            )
        )
    assert native_view(db.store, db.snapshot().table("t").meta, []) is None
    snap = db.snapshot().table("t")
    by_day = {
        f.partition_values["day"]: tmp_path / "db" / "tables" / snap.id / f.path for f in snap.files
    }
    pq.write_table(pa.table({"id": list(range(3000, 4000)), "blob": [[1]] * 1000}), by_day["d3"])
    by_day["d0"].unlink()

    assert db.sql("SELECT sum(id) AS s FROM t WHERE day <> 'd0'").column("s")[0].as_py() == sum(
        range(1000, 4000)
    )
    assert db.sql("SELECT count(*) AS n FROM t WHERE id >= 1000").column("n")[0].as_py() == 3000
    assert db.sql("SELECT count(blob) AS n FROM t WHERE day = 'd1'").column("n")[0].as_py() == 1000
    with pytest.raises(SQLError):
        db.sql("SELECT count(blob) FROM t WHERE day <> 'd0'")  # d3's blob is read: it fails
    with pytest.raises(mere.DataFileMissing, match=by_day["d0"].name):
        db.sql("SELECT count(*) FROM t WHERE id < 1000")  # d0 is needed: it is gone


def test_time_travel_per_table_reference(db: mere.Database, orders_schema) -> None:
    db.create_table("orders", orders_schema)
    db.table("orders").append([{"id": 1, "country": "FR", "amount": 1.0}])
    first = db.version
    db.table("orders").append([{"id": 2, "country": "DE", "amount": 2.0}])
    second = db.version
    db.table("orders").delete("id = 1")
    at = db.snapshot(version=second).timestamp

    now_and_then = db.sql(
        f"SELECT (SELECT count(*) FROM orders) AS now, "
        f"(SELECT count(*) FROM orders FOR SYSTEM_VERSION AS OF {first}) AS first, "
        f"(SELECT count(*) FROM orders FOR SYSTEM_VERSION AS OF {second} o WHERE o.id > 0) "
        f"AS second"
    )
    assert now_and_then.to_pylist() == [{"now": 1, "first": 1, "second": 2}]
    joined = db.sql(
        f"SELECT orders.id FROM orders FOR SYSTEM_VERSION AS OF {second} "
        "JOIN orders AS cur ON orders.id = cur.id"
    )
    assert joined.column("id").to_pylist() == [2]
    stamp = at.strftime("%Y-%m-%d %H:%M:%S.%f")
    by_time = db.sql(f"SELECT id FROM orders FOR SYSTEM_TIME AS OF TIMESTAMP '{stamp}' ORDER BY id")
    assert by_time.column("id").to_pylist() == [1, 2]
    whole = db.snapshot(version=first).sql("SELECT id FROM orders")
    assert whole.column("id").to_pylist() == [1]
    # a string inside the query that looks like the clause is data, not syntax
    text = db.sql("SELECT 'x FOR SYSTEM_VERSION AS OF 1' AS s")
    assert text.column("s").to_pylist() == ["x FOR SYSTEM_VERSION AS OF 1"]


def test_time_travel_errors(db: mere.Database, orders_schema) -> None:
    db.create_table("orders", orders_schema)
    with pytest.raises(mere.VersionNotFound):
        db.sql("SELECT * FROM orders FOR SYSTEM_VERSION AS OF 999")
    with pytest.raises(mere.TableNotFound):
        db.sql("SELECT * FROM orders FOR SYSTEM_VERSION AS OF 0")
    with pytest.raises(SQLError, match="version number literal"):
        db.sql("SELECT * FROM orders FOR SYSTEM_VERSION AS OF ?", [1])
    with pytest.raises(mere.VersionNotFound):
        db.sql("SELECT * FROM orders FOR SYSTEM_TIME AS OF TIMESTAMP '1999-01-01 00:00:00'")


def test_parameters_are_bound_by_duckdb(db: mere.Database, orders_schema) -> None:
    db.create_table("orders", orders_schema)
    db.table("orders").append(
        [
            {"id": 1, "country": "FR", "amount": 1.0},
            {"id": 2, "country": "x' OR 1=1 --", "amount": 2.0},
        ]
    )
    assert db.sql("SELECT id FROM orders WHERE country = ?", ["x' OR 1=1 --"]).column(
        "id"
    ).to_pylist() == [2]
    assert db.sql("SELECT id FROM orders WHERE id = $id", {"id": 1}).num_rows == 1
    assert db.sql("SELECT id FROM orders WHERE id = $1 OR id = $2", [1, 2]).num_rows == 2
    with pytest.raises(mere.InvalidArgument, match="placeholder"):
        db.sql("SELECT id FROM orders WHERE id = ?", [1, 2])
    with pytest.raises(mere.InvalidArgument, match="no value"):
        db.sql("SELECT id FROM orders WHERE id = $id", {"other": 1})


def test_a_placeholder_cast_with_colons_is_a_placeholder(db: mere.Database, orders_schema) -> None:
    """sqlglot reads `?::` as one token: the placeholder went uncounted."""
    db.create_table("orders", orders_schema)
    db.table("orders").append([{"id": i, "country": "FR", "amount": 1.0} for i in (1, 2, 3)])
    assert db.sql("SELECT id FROM orders WHERE id = ?::BIGINT", [1]).num_rows == 1
    assert db.sql("SELECT id FROM orders WHERE id = ?::BIGINT OR id = ?", [1, 2]).num_rows == 2
    db.sql("UPDATE orders SET amount = ?::DOUBLE WHERE id = ?::BIGINT", [7.5, 3])
    db.sql("DELETE FROM orders WHERE id = ?::BIGINT", [1])
    assert db.sql("SELECT id, amount FROM orders ORDER BY id").to_pylist() == [
        {"id": 2, "amount": 1.0},
        {"id": 3, "amount": 7.5},
    ]
    with pytest.raises(mere.InvalidArgument, match="placeholder"):
        db.sql("SELECT id FROM orders WHERE id = ?::BIGINT", [1, 2])


def test_errors_are_clear(db: mere.Database, orders_schema) -> None:
    db.create_table("orders", orders_schema)
    with pytest.raises(SQLError, match="nope"):
        db.sql("SELECT * FROM nope")
    with pytest.raises(SQLError, match=r"Parser Error|syntax"):
        db.sql("SELECT FROM WHERE")
    with pytest.raises(SQLError, match=r'syntax error at or near "SELEC".*SELECT') as typo:
        db.sql("SELEC 1")  # a misspelt keyword is a syntax error, not an unsupported statement
    assert not isinstance(typo.value, UnsupportedSQL)
    with pytest.raises(SQLError, match='syntax error at or near "frobnicate"') as word:
        db.sql("frobnicate orders")
    assert "did you mean" not in str(word.value)
    with pytest.raises(UnsupportedSQL, match="PRAGMA"):
        db.sql("PRAGMA version")
    with pytest.raises(UnsupportedSQL, match="COPY"):
        db.sql("COPY orders TO 'x.csv'")
    with pytest.raises(SQLError):
        db.sql("SELECT * FROM read_csv('/etc/hostname')")  # no file system access
    with pytest.raises(UnsupportedSQL, match="read-only"):
        db.snapshot().sql("DELETE FROM orders WHERE id = 1")


def test_a_transaction_reads_its_own_writes_and_records_the_read(
    db: mere.Database, orders_schema
) -> None:
    db.create_table("orders", orders_schema)
    db.create_table("audit", pa.schema([("n", pa.int64())]))
    tx = db.transaction(isolation="serializable")
    tx.table("orders").append([{"id": 7, "country": "FR", "amount": 1.0}])
    seen = tx.sql("SELECT count(*) AS n FROM orders").column("n")[0].as_py()
    assert seen == 1
    tx.table("audit").append([{"n": seen}])
    db.table("orders").append([{"id": 8, "country": "DE", "amount": 2.0}])  # concurrent
    with pytest.raises(mere.ConcurrentAppend):
        tx.commit()


def test_local_tables_without_floats_are_read_by_duckdbs_own_parquet_reader(tmp_path) -> None:
    db = mere.connect(tmp_path / "db")
    db.sql("CREATE TABLE t (id BIGINT, d DATE, s VARCHAR, n DECIMAL(9, 2)) PARTITIONED BY (s)")
    db.sql("INSERT INTO t VALUES (1, DATE '2024-01-01', 'a''b', 1.50), (2, NULL, NULL, NULL)")
    db.sql("ALTER TABLE t RENAME COLUMN n TO amount")
    snap = db.snapshot().table("t")
    view = native_view(db.store, snap.meta, snap.files)
    assert view is not None and "read_parquet" in view and "UNION ALL" in view
    assert rows(db.sql("SELECT * FROM t")) == rows(snap.scan())
    assert db.sql("SELECT id FROM t WHERE s IS NULL").column(0).to_pylist() == [2]
    db.sql("ALTER TABLE t ADD COLUMN extra INT")  # old files lack it: read through pyarrow
    db.sql("INSERT INTO t VALUES (3, NULL, 'c', 2.00, 7)")
    snap = db.snapshot().table("t")
    assert native_view(db.store, snap.meta, snap.files) is None
    assert rows(db.sql("SELECT * FROM t")) == rows(snap.scan())


def test_a_widened_column_reads_through_duckdbs_reader(tmp_path) -> None:
    db = mere.connect(tmp_path / "db")
    db.sql("CREATE TABLE t (k INTEGER, v DECIMAL(5, 1)); INSERT INTO t VALUES (1, 1.5)")
    db.sql(
        "ALTER TABLE t ALTER COLUMN k TYPE BIGINT; ALTER TABLE t ALTER COLUMN v TYPE DECIMAL(12, 1)"
    )
    db.sql("INSERT INTO t VALUES (1099511627776, 12345678901.5); INSERT INTO t VALUES (2, NULL)")
    snap = db.snapshot().table("t")
    assert native_view(db.store, snap.meta, snap.files) is not None
    assert rows(db.sql("SELECT * FROM t")) == rows(snap.scan())
    assert db.sql("SELECT sum(k) AS s FROM t").column(0).to_pylist() == [1099511627779]


@pytest.mark.parametrize("partition_by", [[], ["p"], ["b"]])
def test_duckdbs_reader_returns_exactly_the_scan(tmp_path, partition_by: list[str]) -> None:
    """The same odd values as above without the float column: the native path on a local store."""
    schema = pa.schema([f for f in ODD if f.name != "f"])
    db = mere.connect(tmp_path / "db")
    db.create_table("odd", schema, partition_by=partition_by)
    for seed in range(3):
        db.table("odd").append(odd_rows(seed * 100, 40, seed).drop_columns(["f"]))
    snap = db.snapshot().table("odd")
    assert native_view(db.store, snap.meta, snap.files) is not None
    expected = snap.scan()
    got = db.sql("SELECT * FROM odd")
    assert got.schema.names == expected.schema.names
    assert rows(got) == rows(expected)
    for name in ("ts", "d", "dec", "u", "small", "b", "s"):
        assert got.schema.field(name).type == expected.schema.field(name).type, name
    reference = duckdb.connect()
    reference.register("odd", expected)
    for where in [w for w in FILTERS if not w.startswith(("f ", "NOT (f", "f =", "f I"))]:
        query = f"SELECT id, s FROM odd WHERE {where}"
        assert rows(db.sql(query)) == rows(reference.sql(query).to_arrow_table()), where


def test_a_table_of_many_partitions_is_read_as_a_dataset(tmp_path) -> None:
    """Each partition value is a branch DuckDB binds per query: past a few, pyarrow reads it."""
    db = mere.connect(tmp_path / "db")
    db.sql("CREATE TABLE t (k INTEGER, p INTEGER) PARTITIONED BY (p)")
    db.sql("INSERT INTO t SELECT range, range % 40 FROM range(200)")
    snap = db.snapshot().table("t")
    assert native_view(db.store, snap.meta, snap.files) is None
    assert db.sql("SELECT count(*) AS n FROM t WHERE p = 3").to_pylist() == [{"n": 5}]


@pytest.mark.parametrize("name", ["pg_tables", "duckdb_tables", "sqlite_master", "tables"])
def test_a_table_named_like_a_duckdb_catalog_view_is_the_table(tmp_path: Path, name: str) -> None:
    """DuckDB's parser leaves its catalog views' names out of a query's tables: such a
    table went unregistered and the query read DuckDB's view, with no error."""
    db = mere.connect(tmp_path / "db")
    db.sql(f"CREATE TABLE {name} (a BIGINT); INSERT INTO {name} VALUES (7)")
    assert db.sql(f"SELECT * FROM {name}").to_pylist() == [{"a": 7}]
    assert db.sql(f"SELECT count(*) AS n FROM {name.upper()}").to_pylist() == [{"n": 1}]
    db.sql(f"CREATE TABLE dst AS SELECT a + 1 AS b FROM {name}")
    assert db.table("dst").scan().to_pylist() == [{"b": 8}]


def test_a_query_s_own_cte_may_take_the_name_of_the_table_it_reads(db: mere.Database) -> None:
    """As in DuckDB: ``WITH t AS (... FROM t)`` reads the table t (it was a duplicate
    CTE name next to the one mere put in front)."""
    db.sql("CREATE TABLE t (id BIGINT); INSERT INTO t VALUES (1), (2), (3)")
    got = db.sql("WITH t AS (SELECT * FROM t WHERE id > 1) SELECT count(*) AS n FROM t")
    assert got.to_pylist() == [{"n": 2}]
    again = db.sql(
        "WITH RECURSIVE x AS (SELECT 1 AS k), t (id) AS (SELECT id * 10 FROM t) "
        "SELECT sum(id) AS s FROM t, x"
    )
    assert again.to_pylist() == [{"s": 60}]
    assert db.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 3}]  # no view left
