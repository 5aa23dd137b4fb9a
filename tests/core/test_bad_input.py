"""Bad input gets a clear error and changes nothing."""

from __future__ import annotations

import datetime as dt
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.log.keys import commit_key

INFO = (
    b'{"commitInfo": {"commitId": "x", "timestamp": 1, "readVersion": 1, "isolation": "snapshot", '
)
ORDERS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64())])


@pytest.fixture
def orders(db: mere.Database) -> mere.Database:
    db.create_table("orders", ORDERS)
    db.table("orders").append([{"id": 1, "amount": 1.0}])
    return db


def unchanged(db: mere.Database, version: int) -> None:
    assert db.version == version
    assert db.table("orders").scan().num_rows == 1


@pytest.mark.parametrize(
    "data",
    [
        pa.table({"id": [2], "amount": [1.0], "extra": [1]}),
        pa.table({"id": [2]}),
        pa.table({"id": ["two"], "amount": [1.0]}),
        pa.table({"id": [2], "amount": ["1.0"]}),
        pa.table({"id": pa.array([2**40], pa.int64()), "amount": [dt.date(2024, 1, 1)]}),
        [{"id": 2, "amount": 1.0, "nope": 1}],
        [{"id": "x"}],
        "not data",
    ],
)
def test_schema_mismatch(orders: mere.Database, data: object) -> None:
    v = orders.version
    with pytest.raises(mere.SchemaMismatch):
        orders.table("orders").append(data)
    unchanged(orders, v)


def test_overflowing_cast_is_a_mismatch(db: mere.Database) -> None:
    db.create_table("small", pa.schema([("x", pa.int8())]))
    with pytest.raises(mere.SchemaMismatch):
        db.table("small").append(pa.table({"x": pa.array([1000], pa.int64())}))


@pytest.mark.parametrize(
    "data",
    [
        [{"f": 1e300}],
        [{"f": -1e300}],
        pa.table({"f": [1.0, 1e300]}),
        pa.table({"f": pa.array([1e39], pa.float64())}),
    ],
)
def test_a_double_beyond_real_is_a_mismatch(db: mere.Database, data: object) -> None:
    """As SQL does: a DOUBLE rounds into a REAL column, but one beyond its range fails
    (it was stored as infinity)."""
    db.create_table("r", pa.schema([("f", pa.float32())]))
    with pytest.raises(mere.SchemaMismatch, match="beyond the range of float"):
        db.table("r").append(data)  # type: ignore[arg-type]
    assert db.table("r").scan().num_rows == 0
    db.table("r").append([{"f": 0.1}, {"f": float("inf")}])  # rounds; infinity is a value
    assert db.table("r").scan().column("f").to_pylist() == [pytest.approx(0.1), float("inf")]


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("i", 1.9),
        ("ts", dt.datetime(2024, 1, 1, 0, 0, 0, 700000)),
        ("d", dt.datetime(2024, 1, 1, 13, 0)),
    ],
)
def test_rows_are_held_to_the_lossless_rule_arrow_data_meets(
    db: mere.Database, column: str, value: object
) -> None:
    """pyarrow dropped the fraction of 1.9 into an integer column, a time into a date,
    milliseconds into seconds; Arrow tables with the same values were refused."""
    schema = pa.schema([("i", pa.int64()), ("ts", pa.timestamp("s")), ("d", pa.date32())])
    db.create_table("l", schema, primary_key=["i"])
    db.table("l").append([{"i": 1}])
    data = [{"i": value}] if column == "i" else [{"i": 1, column: value}]
    with pytest.raises(mere.SchemaMismatch, match="without loss"):
        db.table("l").append(data)
    with pytest.raises(mere.SchemaMismatch, match="without loss"):
        db.table("l").append(data, on_duplicate="update")
    assert db.table("l").scan().to_pylist() == [{"i": 1, "ts": None, "d": None}]
    whole = {"i": 2.0, "ts": dt.datetime(2024, 1, 1, 5), "d": dt.datetime(2024, 1, 1)}
    db.table("l").append([whole])  # nothing dropped: taken
    assert db.table("l").scan(filter="i = 2").num_rows == 1


def test_null_in_not_null_column(orders: mere.Database) -> None:
    v = orders.version
    with pytest.raises(mere.ConstraintViolation):
        orders.table("orders").append([{"id": None, "amount": 1.0}])
    unchanged(orders, v)


def test_unknown_table(orders: mere.Database) -> None:
    with pytest.raises(mere.TableNotFound, match="nope"):
        orders.table("nope")
    with pytest.raises(mere.TableNotFound):
        orders.drop_table("nope")
    with orders.transaction() as tx, pytest.raises(mere.TableNotFound):
        tx.table("nope")


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "a/b",
        "",
        "x" * 129,
        "1abc",
        "a b",
        "a\x00b",
        "\uff4frders",
        "%2F",
        ".",
        None,
        "__mere_x",
        "__MERE_target",
    ],
)
def test_invalid_table_names(orders: mere.Database, name: object) -> None:
    v = orders.version
    with pytest.raises(mere.InvalidName):
        orders.create_table(name, ORDERS)  # type: ignore[arg-type]
    unchanged(orders, v)


def test_duplicate_table_name_ignoring_case(orders: mere.Database) -> None:
    with pytest.raises(mere.TableExists):
        orders.create_table("ORDERS", ORDERS)


@pytest.mark.parametrize(
    "schema,partition_by",
    [
        (pa.schema([("a", pa.int64()), ("A", pa.int64())]), []),
        (pa.schema([("a", pa.int64())]), ["b"]),
        (pa.schema([("a", pa.int64()), ("f", pa.float64())]), ["f"]),
        (pa.schema([("a", pa.int64())]), ["a"]),
        (pa.schema([("a", pa.int64()), ("../p", pa.string())]), ["../p"]),
        (pa.schema([]), []),
    ],
)
def test_invalid_schemas(db: mere.Database, schema: pa.Schema, partition_by: list[str]) -> None:
    with pytest.raises((mere.SchemaMismatch, mere.InvalidName)):
        db.create_table("t", schema, partition_by=partition_by)
    assert db.tables() == [] and db.version == 0


def test_unknown_columns_and_bad_filters(orders: mere.Database) -> None:
    with pytest.raises(mere.SchemaMismatch):
        orders.table("orders").scan(columns=["nope"])
    with pytest.raises(mere.InvalidExpression):
        orders.table("orders").scan(filter="nope > 1")
    with pytest.raises(mere.InvalidExpression):
        orders.table("orders").scan(filter="amount >")
    with pytest.raises(mere.InvalidExpression):
        orders.table("orders").scan(filter="amount + 1")


@pytest.mark.parametrize(
    "content",
    [
        b'{"commitInfo": {"commitId": "x", "timestamp": 1, "readVersion": 1, "isolat',  # truncated
        b"\x00\xff garbage\n",
        b'{"add": {}}\n',
        INFO
        + b'"operation": "APPEND"}}\n{"add": {"tableId": "nothex", "path": "../../etc/passwd"}}\n',
        INFO + b'"operation": "APPEND"}}\n{"mystery": {}}\n',
    ],
)
def test_corrupt_commit_names_the_file(orders: mere.Database, content: bytes) -> None:
    v = orders.version + 1
    orders.store.put_if_absent(commit_key(v), content)
    with pytest.raises(mere.CorruptLog, match=commit_key(v)):
        mere.connect(orders.store).snapshot()
    # Earlier versions still open.
    assert mere.connect(orders.store).snapshot(v - 1).table("orders").scan().num_rows == 1


def test_newer_format_version_is_refused(orders: mere.Database) -> None:
    v = orders.version + 1
    orders.store.put_if_absent(
        commit_key(v),
        (INFO + b'"operation": "UPGRADE"}}\n{"protocol": {"formatVersion": 99}}\n'),
    )
    with pytest.raises(mere.FormatVersionError, match="99"):
        mere.connect(orders.store).snapshot()
    with pytest.raises(mere.FormatVersionError):
        mere.connect(orders.store).table("orders").append([{"id": 2}])
    assert mere.connect(orders.store).snapshot(v - 1).table("orders").scan().num_rows == 1


def test_connect_without_create(tmp_path: object) -> None:
    with pytest.raises(mere.DatabaseNotFound):
        mere.connect(f"{tmp_path}/nothing", create=False)


def test_unknown_scheme() -> None:
    with pytest.raises(mere.StorageError, match="unknown storage scheme"):
        mere.connect("ftp://host/db")


@pytest.mark.parametrize("uri", ["file://", "file://localhost", "  "])
def test_a_uri_naming_no_path_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, uri: str
) -> None:
    """``file://`` created a database in the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(mere.InvalidArgument, match="URI must"):
        mere.connect(uri)
    assert list(tmp_path.iterdir()) == []


BEYOND_9999 = pa.array([2_932_897 + 10, 0], pa.int32()).cast(pa.date32())  # 10000-01-11, 1970


def test_dates_beyond_year_9999_are_stored_without_statistics(db: mere.Database) -> None:
    """Python's dates end at 9999: such values are kept, their min/max left out (§7)."""
    db.create_table("far", pa.schema([("id", pa.int64()), ("day", pa.date32())]))
    db.table("far").append(pa.table({"id": [1, 2], "day": BEYOND_9999}))
    assert db.table("far").scan().column("day").equals(pa.chunked_array([BEYOND_9999]))
    (add,) = db.snapshot().table("far").files
    assert "day" not in add.stats["minValues"] and "day" not in add.stats["maxValues"]
    assert add.stats["minValues"]["id"] == 1


def test_a_partition_value_whose_text_does_not_read_back_is_refused(db: mere.Database) -> None:
    """A value whose canonical text the reader cannot parse would make the table unreadable."""
    db.create_table(
        "far", pa.schema([("id", pa.int64()), ("day", pa.date32())]), partition_by=["day"]
    )
    version = db.version
    with pytest.raises(mere.SchemaMismatch, match="10000-01-11"):
        db.table("far").append(pa.table({"id": [1, 2], "day": BEYOND_9999}))
    assert db.version == version
    assert db.table("far").scan().num_rows == 0


def test_a_time_of_day_is_not_dropped_into_a_date_column(db: mere.Database) -> None:
    """Timestamp to date is lossless only at midnight; Arrow's "safe" cast drops the rest."""
    db.create_table("days", pa.schema([("day", pa.date32())]))
    midnight = pa.array([dt.datetime(2024, 1, 31)], pa.timestamp("us"))
    db.table("days").append(pa.table({"day": midnight}))
    version = db.version
    noon = pa.array([dt.datetime(2024, 1, 31, 12)], pa.timestamp("us"))
    with pytest.raises(mere.SchemaMismatch, match="without loss"):
        db.table("days").append(pa.table({"day": noon}))
    assert db.version == version
    assert db.table("days").scan().column("day").to_pylist() == [dt.date(2024, 1, 31)]


def test_a_zoned_midnight_goes_into_a_date_column_as_its_local_date(db: mere.Database) -> None:
    """Arrow casts a zoned timestamp to its local date; local midnight loses nothing."""
    db.create_table("days", pa.schema([("day", pa.date32())]))
    zone = "America/New_York"
    midnight = pa.array([dt.datetime(2024, 1, 1, 5)], pa.timestamp("us", tz="UTC")).cast(
        pa.timestamp("us", tz=zone)
    )  # 2024-01-01 00:00 in New York
    db.table("days").append(pa.table({"day": midnight}))
    assert db.table("days").scan().column("day").to_pylist() == [dt.date(2024, 1, 1)]
    noon = pa.array([dt.datetime(2024, 1, 1, 17)], pa.timestamp("us", tz="UTC")).cast(
        pa.timestamp("us", tz=zone)
    )
    with pytest.raises(mere.SchemaMismatch, match="without loss"):
        db.table("days").append(pa.table({"day": noon}))


@pytest.mark.parametrize(
    "properties",
    [
        {"mere.primaryKey": "zz"},
        {"mere.primaryKey": '["zz"]'},
        {"mere.primaryKey": "[]"},
        {"mere.check.c": "a >"},
        {"mere.check.": "a > 0"},
        {"mere.somethingElse": "x"},
    ],
)
def test_reserved_table_properties_are_checked_at_creation(
    db: mere.Database, properties: dict[str, str]
) -> None:
    """They committed a table every later append (and `mere tables`) failed on."""
    v = db.version
    with pytest.raises((mere.InvalidName, mere.InvalidExpression)):
        db.create_table("bad", pa.schema([("a", pa.int64())]), properties=properties)
    assert db.version == v
    good = {"mere.primaryKey": '["a"]', "mere.check.pos": "a > 0"}
    db.create_table("good", pa.schema([("a", pa.int64())]), properties=good)
    with pytest.raises(mere.ConstraintViolation):
        db.table("good").append([{"a": -1}])
    db.table("good").append([{"a": 1}])
    with pytest.raises(mere.DuplicateKey):
        db.table("good").append([{"a": 1}])


def test_values_the_log_cannot_hold_are_refused_where_given(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("a", pa.int64())]))
    v = db.version
    with db.transaction() as tx, pytest.raises(mere.InvalidArgument, match="2\\*\\*63"):
        tx.set_app_transaction("app", 2**63)
    with pytest.raises(mere.SchemaMismatch, match="null type"):
        db.create_table("n", pa.schema([("a", pa.null())]), primary_key=["a"])
    assert db.version == v


def test_arguments_of_the_wrong_kind_are_named(tmp_path: Path) -> None:
    """They raised TypeError/AttributeError from deep inside, or were taken and failed
    at the first write."""
    for options in (
        {"checkpoint_interval": "10"},
        {"target_file_size": "big"},
        {"target_file_size": 0},
        {"max_commit_attempts": 0},
    ):
        name = next(iter(options))
        with pytest.raises(mere.InvalidArgument, match=name):
            mere.connect(tmp_path / "db", **options)  # type: ignore[arg-type]
    db = mere.connect(tmp_path / "db")
    schema = pa.schema([("a", pa.int64())])
    v = db.version
    with pytest.raises(mere.InvalidArgument, match="dict"):
        db.set_properties(None)  # type: ignore[arg-type]
    with pytest.raises(mere.SchemaMismatch, match="partition_by"):
        db.create_table("t", schema, partition_by=None)  # type: ignore[arg-type]
    with pytest.raises(mere.InvalidName, match="dict"):
        db.create_table("t", schema, properties=[1])  # type: ignore[arg-type]
    with pytest.raises(mere.InvalidArgument, match="min_retention"):
        db.vacuum(timedelta(0), min_retention="1h")  # type: ignore[arg-type]
    with pytest.raises(mere.InvalidArgument, match="min_retention"):
        db.expire(timedelta(0), min_retention=timedelta(-1))
    db.create_table("t", schema)
    with db.transaction() as tx, pytest.raises(mere.InvalidName, match="dict"):
        tx.alter_table("t").set_properties(None)  # type: ignore[arg-type]
    assert db.version == v + 1


@pytest.mark.parametrize("attempts", [0, -1, "3", True])
def test_a_transaction_given_no_commit_attempts_is_refused(
    db: mere.Database, attempts: object
) -> None:
    """`db.transaction(max_commit_attempts=0)` silently used the database's default."""
    with pytest.raises(mere.InvalidArgument, match="max_commit_attempts"):
        db.transaction(max_commit_attempts=attempts)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", ["abc", "0", "-5", "1e9", ""])
def test_a_target_file_size_property_compaction_cannot_use_is_refused_where_set(
    db: mere.Database, size: str
) -> None:
    """It was taken, and failed (or was silently ignored) at the first compaction."""
    schema = pa.schema([("a", pa.int64())])
    db.create_table("t", schema)
    v = db.version
    with pytest.raises(mere.InvalidArgument, match="targetFileSize"):
        db.create_table("u", schema, properties={"targetFileSize": size})
    with pytest.raises(mere.InvalidArgument, match="targetFileSize"):
        with db.transaction() as tx:
            tx.alter_table("t").set_properties({"targetFileSize": size})
    assert db.version == v
    with db.transaction() as tx:
        tx.alter_table("t").set_properties({"targetFileSize": "1048576"})
    assert db.table("t").describe()["properties"]["targetFileSize"] == "1048576"


@pytest.mark.parametrize("size", ["abc", "0", "-5", " 12"])
def test_compaction_names_a_target_file_size_an_older_mere_took(
    db: mere.Database, size: str
) -> None:
    """Compaction parsed it apart from the setter: "abc" failed with another message, "0"
    and "-5" were silently the default, " 12" was taken."""
    from dataclasses import replace

    db.create_table("t", pa.schema([("a", pa.int64())]))
    db.table("t").append([{"a": 1}])
    db.table("t").append([{"a": 2}])
    with db.transaction() as tx, tx.statement() as stage:  # as an older mere wrote it
        meta = tx.table("t").meta
        stage.set_metadata(meta.id, replace(meta, properties={"targetFileSize": size}))
    v = db.version
    with pytest.raises(mere.InvalidArgument, match="targetFileSize"):
        db.table("t").compact()
    assert db.version == v
