"""A missing or damaged data file is a mere error naming the file, the table and the version."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere

SCHEMA = pa.schema([("k", pa.int64()), ("p", pa.string())])


def _table(tmp_path: Path) -> mere.Database:
    db = mere.connect(tmp_path / "db")
    db.create_table("t", SCHEMA, partition_by=["p"])
    db.table("t").append(pa.table({"k": list(range(100)), "p": ["a"] * 50 + ["b"] * 50}))
    return db


def _file_of(db: mere.Database, partition: str) -> tuple[str, Path]:
    table = db.snapshot().table("t")
    add = next(a for a in table.files if a.partition_values["p"] == partition)
    key = f"tables/{table.id}/{add.path}"
    return key, Path(db.uri.removeprefix("file://"), key)


READS = {
    "scan": lambda db: db.table("t").scan(),
    "scan filter": lambda db: db.table("t").scan(filter="k > 3"),
    "scan_batches": lambda db: db.table("t").scan_batches().read_all(),
    "transaction scan": lambda db: db.begin().table("t").scan(columns=["k"]),
    "delete": lambda db: db.table("t").delete("k = 1"),
    "update": lambda db: db.table("t").update("k = 1", {"k": 5}),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_a_truncated_data_file_is_a_corrupt_data_file_error(tmp_path, read):
    db = _table(tmp_path)
    key, path = _file_of(db, "a")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    version = db.version
    with pytest.raises(mere.CorruptDataFile) as info:
        READS[read](db)
    error = info.value
    assert (error.path, error.table) == (key, "t")
    assert key in str(error) and "'t'" in str(error) and "Parquet" in str(error)
    assert error.version == version
    assert db.version == version  # nothing changed


SNAPSHOT_READS = {
    "scan": lambda t: t.scan(),
    "scan filter": lambda t: t.scan(filter="k < 10"),
    "scan_batches": lambda t: t.scan_batches().read_all(),
}


@pytest.mark.parametrize("read", sorted(SNAPSHOT_READS))
def test_reading_a_version_whose_files_vacuum_deleted_is_data_file_missing(tmp_path, read):
    db = _table(tmp_path)
    old = db.version
    key, _ = _file_of(db, "a")
    db.table("t").overwrite(pa.table({"k": [7], "p": ["c"]}))
    db.vacuum(timedelta(0), force=True)

    with pytest.raises(mere.DataFileMissing) as info:
        SNAPSHOT_READS[read](db.snapshot(version=old).table("t"))
    error = info.value
    assert (error.path, error.table, error.version) == (key, "t", old)
    assert f"version {old}" in str(error) and key in str(error) and "vacuum" in str(error)
    assert db.table("t").scan()["k"].to_pylist() == [7]  # the latest version reads


def test_dml_on_a_table_missing_a_file_names_it_and_changes_nothing(tmp_path):
    db = _table(tmp_path)
    key, path = _file_of(db, "b")
    path.unlink()
    version = db.version
    with pytest.raises(mere.DataFileMissing, match=f"version {version}") as info:
        db.table("t").delete("k > 60")
    assert info.value.path == key
    assert db.version == version


def _parquet_of_size(rows: pa.Table, size: int) -> bytes:
    """``rows`` as a Parquet file of exactly ``size`` bytes (padded in its footer's metadata)."""
    for pad in range(size):
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, rows.schema, store_schema=False) as writer:
            writer.write_table(rows)
            writer.add_key_value_metadata({"pad": "x" * pad})
        data = sink.getvalue().to_pybytes()
        if len(data) == size:
            return data
        if len(data) > size:
            break
    raise AssertionError(f"no padding makes these rows a file of {size} bytes")


KEYED = pa.schema([pa.field("k", pa.int64(), nullable=False), ("v", pa.float64())])

#: Valid Parquet files that are not the file the log describes (50 rows of k, v were).
FOREIGN = {
    "more rows": pa.table({"k": pa.array([1] * 60, pa.int64()), "v": [0.5] * 60}),
    "other columns": pa.table({"a": pa.array([7] * 50, pa.int32())}),
    "other types": pa.table({"k": ["one"] * 50, "v": ["x"] * 50}),
}

FOREIGN_READS = {
    **READS,
    "append": lambda db: db.table("t").append([{"k": 1, "v": 1.0}]),
    "compact": lambda db: db.table("t").compact(),
}


@pytest.mark.parametrize("foreign", sorted(FOREIGN))
@pytest.mark.parametrize("read", sorted(set(FOREIGN_READS) - {"update"}))
def test_a_data_file_overwritten_by_another_parquet_file_of_its_size_is_damaged(
    tmp_path, foreign, read
):
    """Read as the table's rows, it gave another file's rows, nulls in a NOT NULL key
    column (a duplicate key then committed), or pyarrow's raw cast error."""
    db = mere.connect(tmp_path / "db")
    db.create_table("t", KEYED, primary_key=["k"])
    spread = [i * 0.7310585786 for i in range(50)]  # values that do not compress to nothing
    db.table("t").append(pa.table({"k": list(range(50)), "v": spread}, schema=KEYED))
    db.table("t").append(pa.table({"k": [100], "v": [1.0]}, schema=KEYED))
    table = db.snapshot().table("t")
    add = next(a for a in table.files if a.rows == 50)
    key = f"tables/{table.id}/{add.path}"
    path = Path(db.uri.removeprefix("file://"), key)
    path.write_bytes(_parquet_of_size(FOREIGN[foreign], add.size))
    version = db.version
    fresh = mere.connect(tmp_path / "db", create=False)
    with pytest.raises(mere.CorruptDataFile) as info:
        FOREIGN_READS[read](fresh)
    assert info.value.path == key and key in str(info.value)
    assert fresh.version == version  # nothing changed


def test_a_data_file_of_another_size_is_damaged(tmp_path):
    db = _table(tmp_path)
    _, path = _file_of(db, "a")
    stored = path.stat().st_size
    path.write_bytes(_parquet_of_size(pa.table({"k": [1, 2]}), 400))
    with pytest.raises(mere.CorruptDataFile, match=f"it is 400 bytes; the log records {stored:,}"):
        db.table("t").scan()
