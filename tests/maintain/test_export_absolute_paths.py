"""Every reader resolves the absolute data paths of an export's target (docs/format.md §11.6).

A minimal or partial export's target names its source's files by absolute
URI. mere's scans read them through ``mere.data.external``; so must SQL (the
DuckDB view over local files and the pyarrow dataset of remote ones) and
restore, which checks that the files it adds back still exist. The Spark
reads are in tests/spark/test_spark_exports.py.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import mere

ZERO = timedelta(0)
#: ``v`` is a float: SQL reads the table through a pyarrow dataset, not DuckDB's reader.
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("v", pa.float64())])


def fill(db: mere.Database) -> None:
    """Two tables, the same rows: ``ints`` read by DuckDB's reader, ``floats`` by a dataset."""
    db.create_table(
        "ints", pa.schema([("id", pa.int64()), ("part", pa.string())]), partition_by=["part"]
    )
    db.create_table("floats", SCHEMA, partition_by=["part"])
    for b in range(3):
        ids = range(b * 10, b * 10 + 10)
        db.table("ints").append([{"id": i, "part": "ab"[i % 2]} for i in ids])
        db.table("floats").append([{"id": i, "part": "ab"[i % 2], "v": i / 2} for i in ids])


def churn_and_clean(db: mere.Database) -> None:
    """The exported files stop being live in the source, and everything unprotected goes."""
    for name in ("ints", "floats"):
        db.table(name).append([{"id": 100, "part": "a"}])
        db.table(name).delete("id < 15")
        db.table(name).compact()
    db.expire(ZERO, force=True)
    db.vacuum(ZERO, force=True)


QUERY = "SELECT part, count(*) AS n, sum(id) AS s FROM {} WHERE id >= 3 GROUP BY part ORDER BY part"


def answers(db: mere.Database | mere.Snapshot) -> dict[str, list[dict[str, object]]]:
    return {name: db.sql(QUERY.format(name)).to_pylist() for name in ("ints", "floats")}


@pytest.mark.parametrize("mode", ["minimal", "partial"])
def test_sql_reads_an_export_whose_files_are_its_sources(tmp_path: Path, mode: str) -> None:
    db = mere.connect(tmp_path / "src")
    fill(db)
    since = {"since": 3} if mode == "partial" else {}  # version 3: the first batch of each
    expected = answers(db)
    db.export(tmp_path / "out", mode=mode, name="e", **since)  # type: ignore[arg-type]
    churn_and_clean(db)

    target = mere.connect(tmp_path / "out", create=False)
    assert answers(target) == expected
    assert answers(target.snapshot(0)) == expected


def test_sql_reads_a_minimal_export_of_a_source_in_another_store(tmp_path: Path) -> None:
    db = mere.connect(f"memory://src-{uuid.uuid4().hex}")
    fill(db)
    expected = answers(db)
    db.export(tmp_path / "out", mode="minimal", name="e")
    churn_and_clean(db)
    assert answers(mere.connect(tmp_path / "out", create=False)) == expected

    db.drop_export("e")
    db.vacuum(ZERO, force=True)
    with pytest.raises(mere.DataFileMissing, match=r"memory://src-.*/tables/"):
        mere.connect(tmp_path / "out", create=False).sql("SELECT sum(v) FROM floats")


def test_restore_of_a_minimal_exports_version_adds_its_sources_files_back(
    tmp_path: Path,
) -> None:
    db = mere.connect(tmp_path / "src")
    fill(db)
    expected = answers(db)
    db.export(tmp_path / "out", mode="minimal", name="e")
    target = mere.connect(tmp_path / "out", create=False)
    target.table("ints").delete("id < 25")  # external files stop being live in the target
    target.table("floats").append([{"id": 200, "part": "b", "v": 1.0}])
    churn_and_clean(db)

    restored = target.restore(0)
    assert restored.files_added > 0
    assert answers(target) == expected

    target.table("ints").delete("id < 25")
    version = target.version
    db.drop_export("e")
    db.vacuum(ZERO, force=True)
    with pytest.raises(mere.DataFileMissing, match=f"data file {db.uri}/tables/"):
        target.restore(0)
    assert target.version == version  # nothing was committed


def test_sql_time_travel_by_export_or_tag_name(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    fill(db)
    expected = answers(db)
    db.tag("q3-close")
    churn_and_clean(db)
    by_name = (
        "SELECT part, count(*) AS n, sum(id) AS s FROM {} FOR SYSTEM_VERSION AS OF 'q3-close' "
    )
    by_name += "WHERE id >= 3 GROUP BY part ORDER BY part"
    assert {t: db.sql(by_name.format(t)).to_pylist() for t in ("ints", "floats")} == expected
    with pytest.raises(mere.VersionNotFound, match="no export or tag named 'q4'"):
        db.sql("SELECT * FROM ints FOR SYSTEM_VERSION AS OF 'q4'")


def test_export_delta_of_a_minimal_exports_table_copies_its_sources_files(tmp_path: Path) -> None:
    deltalake = pytest.importorskip("deltalake")
    db = mere.connect(tmp_path / "src")
    fill(db)
    expected = sorted(db.table("ints").scan(["id"]).column("id").to_pylist())
    db.export(tmp_path / "out", mode="minimal", name="e")
    target = mere.connect(tmp_path / "out", create=False)
    result = target.table("ints").export_delta(tmp_path / "delta")
    assert result.files == 6
    delta = deltalake.DeltaTable(str(tmp_path / "delta")).to_pyarrow_table()
    assert sorted(delta.column("id").to_pylist()) == expected
