"""A missing or damaged data file is a mere error naming the file, the table and the version."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pyarrow as pa
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
