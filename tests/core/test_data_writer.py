"""The data-file writer: a large write encoded in parallel slices, and string
statistics taken from the Parquet footer, each checked against the files' own rows."""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import mere
from mere.data import writer
from mere.data.values import stat_to_json
from mere.storage import FaultyStore, MemoryStore

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("ls", pa.large_string()),
        pa.field("f", pa.float64()),
    ]
)


def rows(n: int, start: int = 0) -> pa.Table:
    words = ["zebra", "é", "Ápple", "", None, "ü" * 3, "a" * 300, "b" * 5000]
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "s": [words[i % 6] for i in range(start, start + n)],  # short strings, nulls
            "ls": [None if i % 7 else words[(i // 7) % 8] for i in range(start, start + n)],
            "f": [math.nan if i % 11 == 0 else i / 3 for i in range(start, start + n)],
        },
        schema=SCHEMA,
    )


def expected_stats(data: pa.Table) -> dict[str, Any]:
    """What format.md §7 says a file holding ``data`` records, from its rows."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for name in data.column_names:
        col = data.column(name)
        if col.null_count == len(col):
            continue
        mm = pc.min_max(col)
        lo, hi = stat_to_json(mm["min"]), stat_to_json(mm["max"])
        if lo is not None and hi is not None:
            mins[name], maxs[name] = lo, hi
    return {
        "numRecords": data.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": {n: data.column(n).null_count for n in data.column_names},
        "nanCount": {"f": pc.sum(pc.is_nan(data.column("f"))).as_py() or 0},
    }


def file_rows(db: mere.Database, table: str) -> list[tuple[dict[str, Any], pa.Table]]:
    snap = db.snapshot().table(table)
    store = db.store
    out = []
    for f in snap.files:
        data = pq.read_table(pa.BufferReader(store.get(f"tables/{snap.id}/{f.path}")))
        out.append((f.stats, data))
    return out


@pytest.mark.parametrize("n", [1, 700, 5000])
def test_statistics_match_the_rows_of_each_file(n: int, tmp_path: Any) -> None:
    db = mere.connect(str(tmp_path / "db"), target_file_size=16 * 1024)
    db.create_table("t", SCHEMA)
    db.table("t").append(rows(n))
    files = file_rows(db, "t")
    assert sum(d.num_rows for _, d in files) == n
    for stats, data in files:
        assert stats == expected_stats(data)


def test_a_large_write_is_encoded_in_ordered_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer, "SLICE_MIN_BYTES", 1)
    monkeypatch.setattr(writer, "WRITE_THREADS", 3)
    name = "writer-slices"
    try:
        db = mere.connect(f"memory://{name}", target_file_size=1024 * 1024)
        db.create_table("t", SCHEMA)
        db.table("t").append(rows(10))  # a small file opened first: finished before the slices
        with db.transaction() as tx:
            tx.table("t").append(rows(30_000, start=10))
        db.table("t").append(rows(5, start=30_010))
        files = file_rows(db, "t")
        assert len(files) == 5  # the first append, three slices, the last append
        scanned, written = db.table("t").scan(), rows(30_015)
        assert scanned.select(["id", "s", "ls"]).equals(written.select(["id", "s", "ls"]))
        assert pc.fill_null(scanned["f"], -1.0).to_pylist() == pytest.approx(
            written["f"].to_pylist(), nan_ok=True
        )
        for stats, data in files:
            assert stats == expected_stats(data)
    finally:
        MemoryStore.forget(name)


def test_mostly_distinct_columns_are_written_without_a_dictionary(tmp_path: Any) -> None:
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", SCHEMA)
    db.table("t").append(rows(5000))
    ((_, _),) = file_rows(db, "t")
    snap = db.snapshot().table("t")
    path = tmp_path / "db" / "tables" / snap.id / snap.files[0].path
    group = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {
        group.column(i).path_in_schema: group.column(i).has_dictionary_page
        for i in range(group.num_columns)
    }
    assert dictionary == {"id": False, "s": True, "ls": True, "f": False}


def test_a_large_write_uploads_wave_by_wave(monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoded files wait for their upload in bounded memory, not the whole write's."""
    monkeypatch.setattr(writer, "SLICE_MIN_BYTES", 1)
    monkeypatch.setattr(writer, "WRITE_THREADS", 2)
    monkeypatch.setattr(writer, "WAVE_FILES", 1)
    store = FaultyStore(MemoryStore())
    puts_at_finish: list[int] = []
    finish = writer._finish_file

    def recording(f: Any) -> Any:
        puts_at_finish.append(store.calls["put_if_absent"])
        return finish(f)

    monkeypatch.setattr(writer, "_finish_file", recording)
    db = mere.connect(store, target_file_size=64 * 1024)
    db.create_table("t", SCHEMA)
    before = store.calls["put_if_absent"]
    db.table("t").append(rows(40_000))
    assert len(puts_at_finish) >= 4
    assert puts_at_finish[-1] > before  # files of earlier waves were uploaded already
    scanned = db.table("t").scan()
    assert scanned.select(["id", "s", "ls"]).equals(rows(40_000).select(["id", "s", "ls"]))
    for stats, data in file_rows(db, "t"):
        assert stats == expected_stats(data)
