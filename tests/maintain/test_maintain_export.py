"""Export to a new mere database, and to Delta Lake (read back with the deltalake package)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from maintain_helpers import EVENTS, events, ids_of, read_delta

import mere
from mere.maintain import DeltaExportError, ExportTargetExists
from mere.maintain.delta import DELTA_LOG_0
from mere.storage import MemoryStore


def source(path: Path) -> mere.Database:
    db = mere.connect(path)
    db.create_table("events", EVENTS, partition_by=["part"], properties={"owner": "ops"})
    db.create_table("other", EVENTS)
    with db.transaction() as tx:
        tx.table("events").append(events(range(10)))
        tx.table("other").append(events([100, 101]))
        tx.set_app_transaction("loader", 3)
    db.table("events").delete("id = 4")
    return db


# --- mere to mere ---------------------------------------------------------------------


def test_full_export_is_an_independent_copy_at_version_0(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    expected = {n: ids_of(db.table(n)) for n in db.tables()}
    result = db.export(tmp_path / "copy")
    assert result.source_version == db.version and result.mode == "full"
    assert result.tables == ["events", "other"]
    assert result.files == sum(db.table(n).describe()["files"] for n in db.tables())
    assert result.rows == 11

    shutil.rmtree(tmp_path / "src")  # the copy does not need the source
    copy = mere.connect(tmp_path / "copy", create=False)
    assert copy.version == 0
    assert {n: ids_of(copy.table(n)) for n in copy.tables()} == expected
    assert copy.table("events").partition_by == ["part"]
    assert copy.table("events").describe()["properties"] == {"owner": "ops"}
    assert copy.snapshot().app_version("loader") == 3
    (entry,) = copy.history()
    assert entry["operation"] == "EXPORT" and entry["parameters"]["sourceVersion"] == 4
    assert entry["rows_added"] == 11
    # The copy is a database like any other.
    copy.table("events").append(events([50]))
    assert ids_of(mere.connect(tmp_path / "copy", create=False).table("events")) == [
        *expected["events"],
        50,
    ]


def test_export_of_some_tables_at_an_older_version(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    name = f"export-{tmp_path.name}"
    result = db.export(f"memory://{name}", version=3, tables=["events"])
    copy = mere.connect(result.target, create=False)
    assert copy.tables() == ["events"]
    assert ids_of(copy.table("events")) == list(range(10))
    assert copy.snapshot().app_version("loader") is None  # markers only with every table
    MemoryStore.forget(name)
    with pytest.raises(mere.TableNotFound):
        db.export(tmp_path / "x", tables=["missing"])


def test_export_refuses_an_existing_database_and_an_unnamed_minimal_mode(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    db.export(tmp_path / "copy")
    with pytest.raises(ExportTargetExists):
        db.export(tmp_path / "copy")
    with pytest.raises(ValueError, match="onto itself"):
        db.export(tmp_path / "src")
    with pytest.raises(ValueError, match="minimal export needs a name"):
        db.export(tmp_path / "minimal", mode="minimal")  # see test_maintain_named_exports.py
    assert not (tmp_path / "minimal").exists()


def test_a_retried_export_accepts_its_own_copied_files(tmp_path: Path) -> None:
    db = source(tmp_path / "src")
    db.export(tmp_path / "first")
    # As if an earlier attempt died after copying the files but before commit 0.
    shutil.copytree(tmp_path / "first" / "tables", tmp_path / "retry" / "tables")
    db.export(tmp_path / "retry")
    assert ids_of(mere.connect(tmp_path / "retry", create=False).table("other")) == [100, 101]


# --- mere to Delta Lake ------------------------------------------------------------------

WIDE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("small", pa.int16()),
        pa.field("flag", pa.bool_()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("count", pa.uint32()),
    ]
)


def wide_rows(ids: list[int]) -> pa.Table:
    def maybe(i: int, value: Any) -> Any:
        return None if i % 4 == 3 else value

    return pa.table(
        {
            "id": ids,
            "name": [maybe(i, f"n{i % 3} é/%:") for i in ids],
            "score": [maybe(i, i / 7) for i in ids],
            "small": [maybe(i, i % 100) for i in ids],
            "flag": [maybe(i, i % 2 == 0) for i in ids],
            "day": [maybe(i, dt.date(2024, 1, 1) + dt.timedelta(days=i % 5)) for i in ids],
            "at": [
                maybe(i, dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC) + dt.timedelta(microseconds=i))
                for i in ids
            ],
            "price": [maybe(i, Decimal(i) / 4) for i in ids],
            "tags": [maybe(i, [f"t{i}", None]) for i in ids],
            "count": [maybe(i, i * 1000) for i in ids],
        },
        schema=WIDE,
    )


def as_strings(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with every value as ``str`` (as the deltalake reader reports them), sorted by id."""
    rows = [
        {k: (None if v is None else str(v)) for k, v in row.items()} for row in table.to_pylist()
    ]
    return sorted(rows, key=lambda r: int(r["id"]))


def delta_rows(got: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(got["rows"], key=lambda r: int(r["id"]))


def test_delta_export_is_read_by_deltalake(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    db.create_table("flat", WIDE)
    db.create_table("parts", WIDE, partition_by=["name", "day"])
    db.create_table("empty", WIDE)
    for start in (0, 8, 16):
        db.table("flat").append(wide_rows(list(range(start, start + 8))))
        db.table("parts").append(wide_rows(list(range(start, start + 8))))
    db.table("parts").delete("id = 5")
    db.table("flat").compact()
    # Schema evolution: a column added later, missing in the older files.
    db.table("flat").append(
        wide_rows([40]).append_column("extra", pa.array(["x"])), schema_mode="merge"
    )
    old = db.version - 1

    results = {
        "flat": db.table("flat").export_delta(tmp_path / "flat"),
        "parts": db.table("parts").export_delta(tmp_path / "parts"),
        "empty": db.table("empty").export_delta(tmp_path / "empty"),
        "flat_old": db.table("flat").export_delta(tmp_path / "flat_old", version=old),
    }
    got = read_delta(*(tmp_path / name for name in results))

    # uint32 becomes long and the file is rewritten; so is every file lacking the new column.
    assert results["flat"].files_rewritten == results["flat"].files
    for name, table in (("flat", "flat"), ("parts", "parts"), ("empty", "empty")):
        mine = db.table(table).scan()
        theirs = got[str(tmp_path / name)]
        assert theirs["version"] == 0
        assert delta_rows(theirs) == as_strings(mine), name
        assert theirs["files"] == db.table(table).describe()["files"]
    assert got[str(tmp_path / "parts")]["partition_columns"] == ["name", "day"]
    assert delta_rows(got[str(tmp_path / "flat_old")]) == as_strings(
        db.snapshot(old).table("flat").scan()
    )
    schema = dict(got[str(tmp_path / "flat")]["schema"])
    assert schema["count"] == "int64" and schema["extra"] == "string"


def test_delta_log_content(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("at", pa.timestamp("us", tz="UTC")),
            pa.field("k", pa.string()),
        ]
    )
    db.create_table("t", schema, partition_by=["k"])
    moment = dt.datetime(2024, 5, 1, 10, 0, 0, 1500, tzinfo=dt.UTC)
    db.table("t").append(pa.table({"id": [1, 2], "at": [moment, None], "k": ["x y", None]}))
    result = db.table("t").export_delta(tmp_path / "delta")
    lines = [
        json.loads(line) for line in (tmp_path / "delta" / DELTA_LOG_0).read_text().splitlines()
    ]
    assert [next(iter(line)) for line in lines] == [
        "commitInfo",
        "protocol",
        "metaData",
        "add",
        "add",
    ]
    assert lines[1]["protocol"] == {"minReaderVersion": 1, "minWriterVersion": 2}
    meta = lines[2]["metaData"]
    assert meta["partitionColumns"] == ["k"] and meta["format"]["provider"] == "parquet"
    fields = json.loads(meta["schemaString"])["fields"]
    assert [(f["name"], f["type"], f["nullable"]) for f in fields] == [
        ("id", "long", False),
        ("at", "timestamp", True),
        ("k", "string", True),
    ]
    adds = sorted((line["add"] for line in lines[3:]), key=lambda a: a["path"])
    assert [a["partitionValues"] for a in adds] == [{"k": None}, {"k": "x y"}]
    assert adds[1]["path"].startswith("k=x%20y/")  # a URI: the space is encoded
    stats = json.loads(adds[1]["stats"])
    # Millisecond statistics: the minimum rounded down, the maximum up.
    assert stats["minValues"]["at"] == "2024-05-01T10:00:00.001Z"
    assert stats["maxValues"]["at"] == "2024-05-01T10:00:00.002Z"
    assert stats["numRecords"] == 1 and stats["nullCount"] == {"id": 0, "at": 0}
    assert result.files == 2 and result.rows == 2
    with pytest.raises(DeltaExportError, match="already holds a Delta table"):
        db.table("t").export_delta(tmp_path / "delta")


def test_delta_export_of_timestamps_without_zone_and_unsupported_types(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    naive = pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns"))])
    db.create_table("naive", naive)
    db.table("naive").append(
        pa.table({"id": [1, 2], "at": [dt.datetime(2024, 1, 2, 3, 4, 5), None]}, schema=naive)
    )
    db.table("naive").export_delta(tmp_path / "naive")
    log = (tmp_path / "naive" / DELTA_LOG_0).read_text().splitlines()
    assert json.loads(log[1])["protocol"]["readerFeatures"] == ["timestampNtz"]
    got = read_delta(tmp_path / "naive")[str(tmp_path / "naive")]
    assert delta_rows(got) == [
        {"id": "1", "at": "2024-01-02 03:04:05"},
        {"id": "2", "at": None},
    ]
    db.create_table("odd", pa.schema([("d", pa.duration("s"))]))
    with pytest.raises(DeltaExportError, match="no Delta Lake type"):
        db.table("odd").export_delta(tmp_path / "odd")
    assert not (tmp_path / "odd").exists()  # it was left behind, empty


def test_delta_export_refuses_an_empty_string_partition_value(tmp_path: Path) -> None:
    """Delta reads an empty partition value as NULL: exporting '' would change the data."""
    db = mere.connect(tmp_path / "db")
    db.create_table("p", pa.schema([("k", pa.int64()), ("s", pa.string())]), partition_by=["s"])
    db.table("p").append([{"k": 1, "s": ""}, {"k": 2, "s": "x"}])
    with pytest.raises(DeltaExportError, match="empty-string partition value"):
        db.table("p").export_delta(tmp_path / "delta")
    assert not (tmp_path / "delta").exists()


def test_delta_export_of_the_extreme_timestamps_leaves_out_what_delta_cannot_bound(
    tmp_path: Path,
) -> None:
    """A bound rounded to Delta's milliseconds past year 9999 (or before year 1) is
    left out of the statistics, which stay sound; the rows are exported whole."""
    zoned = pa.timestamp("us", tz="UTC")
    extremes = [
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    ]
    db = mere.connect(tmp_path / "src")
    db.create_table("t", pa.schema([("id", pa.int64()), ("ts", zoned)]))
    db.table("t").append(pa.table({"id": [1, 2], "ts": pa.array(extremes, zoned)}))
    db.table("t").export_delta(tmp_path / "delta")
    [info] = read_delta(tmp_path / "delta").values()
    assert sorted(row["ts"] for row in info["rows"]) == sorted(str(t) for t in extremes)


@pytest.mark.parametrize("where", ["", "/_log", "/tables/x"])
def test_a_delta_export_into_its_own_database_is_refused(tmp_path: Path, where: str) -> None:
    """It wrote _delta_log/ and Parquet copies inside the mere database."""
    db = mere.connect(tmp_path / "db")
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    with pytest.raises(mere.InvalidArgument, match=r"itself|inside"):
        db.table("events").export_delta(str(tmp_path / "db") + where)
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == ["_log", "tables"]
    assert not (tmp_path / "db" / "_log" / "_delta_log").exists()


def _damaged_source(tmp_path: Path, inlined: bool) -> mere.Database:
    """A database whose one data file changed after it was written: a stored file's bytes
    overwritten, or an inlined file's base64 in the log garbled (it still decodes as base64)."""
    db = mere.connect(str(tmp_path / "src"), inline_limit=65536 if inlined else None)
    db.create_table("a", pa.schema([("k", pa.int64())]))
    db.table("a").append(pa.table({"k": list(range(10))}))
    if not inlined:
        (data,) = (tmp_path / "src" / "tables").rglob("*.parquet")
        data.write_bytes(b"garbage\n")
        return db
    commit = tmp_path / "src" / "_log" / f"{db.version:020d}.json"
    actions = [json.loads(line) for line in commit.read_text().splitlines()]
    for action in actions:
        if "add" in action:
            text = action["add"]["inline"]  # a byte of the schema message, not of the magic
            action["add"]["inline"] = text[:40] + ("B" if text[40] == "A" else "A") + text[41:]
    commit.write_text("".join(json.dumps(a) + "\n" for a in actions))
    return mere.connect(str(tmp_path / "src"), create=False)


@pytest.mark.parametrize("inlined", [False, True], ids=["stored", "inlined"])
@pytest.mark.parametrize("name", [None, "backup"])
def test_an_export_refuses_a_data_file_that_changed_after_it_was_written(
    tmp_path: Path, inlined: bool, name: str | None
) -> None:
    """It copied the file, reported success, and published a target database that could
    not be read."""
    db = _damaged_source(tmp_path, inlined)
    assert not db.check().clean
    version = db.version
    with pytest.raises(mere.CorruptDataFile):
        db.export(str(tmp_path / "dst"), name=name)
    with pytest.raises(mere.DatabaseNotFound):
        mere.connect(str(tmp_path / "dst"), create=False)
    assert db.version == version if name is None else db.exports() == []


@pytest.mark.parametrize("inlined", [False, True], ids=["stored", "inlined"])
def test_a_delta_export_names_a_data_file_that_changed(tmp_path: Path, inlined: bool) -> None:
    """It failed with pyarrow's bare "Parquet magic bytes not found in footer"."""
    db = _damaged_source(tmp_path, inlined)
    with pytest.raises(mere.CorruptDataFile, match="tables/") as info:
        db.table("a").export_delta(tmp_path / "delta")
    assert info.value.table == "a"
    assert not (tmp_path / "delta" / DELTA_LOG_0).exists()
