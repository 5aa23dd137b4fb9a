"""export_delta of tables with inlined data files (docs/format.md §2.5), read back by deltalake.

An inlined file's bytes are in mere's log; Delta Lake has no such thing, so the
export writes them as ordinary Parquet files of the Delta table (rewritten in
Delta's types where the table needs it, as stored files are).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from maintain_helpers import read_delta
from test_maintain_export import WIDE, as_strings, delta_rows, wide_rows

import mere


def mixed(db: mere.Database, name: str, partition_by: list[str]) -> None:
    """A table of two stored files (the database does not inline yet)."""
    db.create_table(name, WIDE, partition_by=partition_by)
    db.table(name).append(wide_rows(list(range(0, 8))))
    db.table(name).append(wide_rows(list(range(8, 16))))


def test_export_delta_of_stored_and_inlined_files_equals_the_scan(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    tables: dict[str, list[str]] = {"flat": [], "parts": ["name"]}
    for name, partition_by in tables.items():
        mixed(db, name, partition_by)
    db.set_properties({"inlineLimit": "65536"})
    for name in tables:
        for start in (16, 20, 24):
            db.table(name).append(wide_rows(list(range(start, start + 4))))
        db.table(name).delete("id IN (2, 17)")  # a stored and an inlined file rewritten
        db.table(name).update("id = 21", {"score": "-1.5"})
    old = db.version
    db.table("flat").append(wide_rows([40, 41]))
    for name in tables:
        files = db.snapshot().table(name).files
        assert any(f.inline is not None for f in files), name
        assert any(f.inline is None for f in files), name

    results = {name: db.table(name).export_delta(tmp_path / name) for name in tables}
    results["flat_old"] = db.table("flat").export_delta(tmp_path / "flat_old", version=old)
    got = read_delta(*(tmp_path / name for name in results))
    for name in tables:
        theirs = got[str(tmp_path / name)]
        assert delta_rows(theirs) == as_strings(db.table(name).scan()), name
        assert theirs["files"] == db.table(name).describe()["files"] == results[name].files
        # WIDE's uint32 column is long in Delta: every file, inlined ones too, is rewritten
        assert results[name].files_rewritten == results[name].files
    assert delta_rows(got[str(tmp_path / "flat_old")]) == as_strings(
        db.snapshot(old).table("flat").scan()
    )
    assert got[str(tmp_path / "parts")]["partition_columns"] == ["name"]


def test_inlined_files_in_delta_types_are_copied_as_they_are(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "src")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string())])
    db.create_table("t", schema, partition_by=["s"])
    db.table("t").append(pa.table({"id": [1, 2], "s": ["a", "b"]}, schema=schema))
    db.set_properties({"inlineLimit": "65536"})
    db.table("t").append(pa.table({"id": [3, 4], "s": ["a", None]}, schema=schema))
    assert sum(f.inline is not None for f in db.snapshot().table("t").files) == 2
    result = db.table("t").export_delta(tmp_path / "delta")
    assert result.files == 4 and result.files_rewritten == 0 and result.rows == 4
    theirs = read_delta(tmp_path / "delta")[str(tmp_path / "delta")]
    assert delta_rows(theirs) == as_strings(db.table("t").scan())
    assert sorted(p.name for p in (tmp_path / "delta").rglob("*.parquet")) == sorted(
        Path(f.path).name for f in db.snapshot().table("t").files
    )


def test_an_inlined_arrow_stream_becomes_a_parquet_file_without_float_bounds(
    tmp_path: Path,
) -> None:
    """Parquet's float min/max leave NaN out, and Delta's readers skip by them: the
    file an Arrow stream becomes has footer bounds for every column but floats."""
    db = mere.connect(tmp_path / "src", inline_limit=65536)
    db.create_table("t", pa.schema([("id", pa.int64()), ("x", pa.float64())]))
    db.table("t").append([{"id": 1, "x": 1.0}, {"id": 2, "x": float("nan")}])
    (add,) = db.snapshot().table("t").files
    assert add.inline is not None and add.inline[:4] == b"\xff" * 4
    db.table("t").export_delta(tmp_path / "delta")
    (data_file,) = (tmp_path / "delta").glob("*.parquet")
    group = pq.ParquetFile(data_file).metadata.row_group(0)
    bounds = {group.column(i).path_in_schema: group.column(i).statistics for i in range(2)}
    assert bounds["id"] is not None and bounds["id"].has_min_max
    assert bounds["x"] is None or not bounds["x"].has_min_max
    theirs = read_delta(tmp_path / "delta")[str(tmp_path / "delta")]
    assert theirs["files"] == 1
    assert delta_rows(theirs) == as_strings(db.table("t").scan())
