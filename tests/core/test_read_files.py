"""Reading many data files: in order, several at a time, with a bounded read-ahead."""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere
from mere.data import reader
from mere.storage import FaultyStore, MemoryStore

SCHEMA = pa.schema([pa.field("k", pa.int64())])


@pytest.fixture
def table_files() -> tuple[mere.Database, FaultyStore]:
    store = FaultyStore(MemoryStore())
    db = mere.connect(store)
    db.create_table("t", SCHEMA)
    for k in range(20):
        db.table("t").append([{"k": k}])
    return db, store


def test_files_come_back_in_order_with_their_rows(
    table_files: tuple[mere.Database, FaultyStore],
) -> None:
    db, _ = table_files
    snapshot = db.snapshot().table("t")
    files = sorted(snapshot.files, key=lambda f: f.path)
    meta = db.snapshot()._state.table_by_name("t").meta  # type: ignore[union-attr]
    got = list(reader.iter_read_files(db.store, meta, files, ["k"]))
    assert [add.path for add, _ in got] == [f.path for f in files]
    by_path = {add.path: rows.column("k").to_pylist() for add, rows in got}
    assert sorted(v for values in by_path.values() for v in values) == list(range(20))
    assert [t.column("k").to_pylist() for t in reader.read_files(db.store, meta, files, ["k"])] == [
        by_path[f.path] for f in files
    ]


@pytest.mark.parametrize(("threads", "ahead", "expected"), [(8, 1 << 30, 3), (3, 1 << 30, 7)])
def test_windows_are_bounded_by_count_and_bytes(
    table_files: tuple[mere.Database, FaultyStore],
    monkeypatch: pytest.MonkeyPatch,
    threads: int,
    ahead: int,
    expected: int,
) -> None:
    db, _ = table_files
    meta = db.snapshot()._state.table_by_name("t").meta  # type: ignore[union-attr]
    files = list(db.snapshot().table("t").files)
    windows: list[int] = []
    real = reader.read_files
    monkeypatch.setattr(reader, "READ_THREADS", threads)
    monkeypatch.setattr(reader, "READ_AHEAD_BYTES", ahead)
    monkeypatch.setattr(
        reader, "read_files", lambda *a, **k: windows.append(len(a[2])) or real(*a, **k)
    )
    assert len(list(reader.iter_read_files(db.store, meta, files, ["k"]))) == 20
    assert len(windows) == expected and sum(windows) == 20 and max(windows) <= threads


def test_a_file_larger_than_the_read_ahead_is_read_alone(
    table_files: tuple[mere.Database, FaultyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = table_files
    meta = db.snapshot()._state.table_by_name("t").meta  # type: ignore[union-attr]
    files = list(db.snapshot().table("t").files)
    windows: list[int] = []
    real = reader.read_files
    monkeypatch.setattr(reader, "READ_AHEAD_BYTES", 1)
    monkeypatch.setattr(
        reader, "read_files", lambda *a, **k: windows.append(len(a[2])) or real(*a, **k)
    )
    assert len(list(reader.iter_read_files(db.store, meta, files, ["k"]))) == 20
    assert windows == [1] * 20


def test_inlined_and_stored_files_mixed_come_back_in_order() -> None:
    """Stored files go to reader threads while inlined ones decode on the calling
    thread: each file's rows still land in its own place."""
    db = mere.connect(MemoryStore(), inline_limit=2048)
    db.create_table("t", SCHEMA)
    expected = []
    for i in range(12):
        n = 1 if i % 3 else 3_000  # one row: inlined; 3,000 rows: past the limit, stored
        rows = list(range(i * 10_000, i * 10_000 + n))
        db.table("t").append(pa.table({"k": rows}, schema=SCHEMA))
        expected.append(rows)
    files = db.snapshot().table("t").files
    assert {f.inline is None for f in files} == {True, False}
    meta = db.snapshot()._state.table_by_name("t").meta  # type: ignore[union-attr]
    got = [t.column("k").to_pylist() for t in reader.read_files(db.store, meta, files, ["k"])]
    assert sorted(got) == sorted(expected)
    one_by_one = [reader.read_file(db.store, meta, f, ["k"]) for f in files]
    assert got == [t.column("k").to_pylist() for t in one_by_one]
    every_row = sorted(k for rows in expected for k in rows)
    assert sorted(db.table("t").scan().column("k").to_pylist()) == every_row


def test_decoded_inlined_files_stay_within_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "INLINED_CACHE_BYTES", 4096)
    db = mere.connect(MemoryStore(), inline_limit=65536)
    db.create_table("t", SCHEMA)
    for k in range(40):
        db.table("t").append([{"k": k}])
    for _ in range(2):  # the second scan finds most files evicted, and decodes them again
        assert sorted(db.table("t").scan().column("k").to_pylist()) == list(range(40))
        assert db.sql("SELECT sum(k) AS s FROM t").column("s").to_pylist() == [sum(range(40))]
        assert 0 < reader._inlined_bytes <= 4096
