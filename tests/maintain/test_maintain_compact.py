"""Compaction: bin-packing, ordering, conflicts, and appends from other processes meanwhile."""

from __future__ import annotations

import importlib
import queue
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from maintain_helpers import EVENTS, events, ids_of

import mere
from mere.errors import ConcurrentDeleteDelete, InvalidExpression, SchemaMismatch
from mere.maintain.compact import zorder_indices

# The module (``mere.maintain.compact`` is also the name of the function).
compact_module = importlib.import_module("mere.maintain.compact")


def small_files(db: mere.Database, batches: int, per_batch: int = 2) -> list[int]:
    """Create ``events`` (partitioned by part) and append ``batches`` tiny batches."""
    db.create_table("events", EVENTS, partition_by=["part"])
    ids: list[int] = []
    for b in range(batches):
        batch = list(range(b * per_batch, (b + 1) * per_batch))
        db.table("events").append(events(batch))
        ids += batch
    return ids


def test_compaction_packs_each_partition_and_keeps_every_row(db_uri: str) -> None:
    db = mere.connect(db_uri)
    ids = small_files(db, 12)
    before = db.table("events").describe()
    assert before["files"] == 24

    result = db.table("events").compact()

    assert (result.files_removed, result.files_added, result.partitions) == (24, 2, 2)
    assert result.rows == 24 and result.version == result.read_version + 1
    assert result.bytes_removed == before["size_bytes"]
    after = db.table("events").describe()
    assert after["files"] == 2 and after["rows"] == 24
    assert ids_of(db.table("events")) == ids
    table = db.snapshot().table("events")
    assert sorted({f.partition_values["part"] for f in table.files}) == ["a", "b"]
    assert all(not f.data_change for f in table.files)
    entry = db.history(1)[0]
    assert entry["operation"] == "COMPACT" and entry["isolation"] == "snapshot"
    assert entry["files_removed"] == 24 and entry["files_added"] == 2
    assert entry["parameters"]["targetFileSize"] == db.target_file_size
    # Nothing left to do: no commit.
    again = db.table("events").compact()
    assert again.version == again.read_version == result.version
    assert again.files_removed == 0


def test_target_file_size_makes_several_bins(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    for b in range(10):
        db.table("events").append(events(range(b * 100, b * 100 + 100)))
    sizes = [f.size for f in db.snapshot().table("events").files]
    target = sum(sizes) // 3
    result = db.table("events").compact(target_file_size=target)
    assert result.files_removed >= 8
    assert 2 <= result.files_added <= 4
    assert all(f.size <= target * 1.5 for f in db.snapshot().table("events").files)
    assert ids_of(db.table("events")) == list(range(1000))


def test_files_at_or_above_the_target_are_left_alone(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events(range(5000)))
    big = db.snapshot().table("events").files[0]
    db.table("events").append(events(range(5000, 5002)))
    db.table("events").append(events(range(5002, 5004)))
    result = db.table("events").compact(target_file_size=big.size)
    assert (result.files_removed, result.files_added) == (2, 1)
    assert big.path in {f.path for f in db.snapshot().table("events").files}


def test_where_limits_compaction_to_partitions(db_uri: str) -> None:
    db = mere.connect(db_uri)
    small_files(db, 5)
    result = db.table("events").compact(where="part = 'a'")
    assert result.partitions_compacted == [{"part": "a"}]
    files = db.snapshot().table("events").files
    assert sum(f.partition_values["part"] == "a" for f in files) == 1
    assert sum(f.partition_values["part"] == "b" for f in files) == 5
    with pytest.raises(InvalidExpression, match="partition columns"):
        db.table("events").compact(where="amount > 1")


def test_sort_by_orders_the_rows_of_each_partition(db_uri: str, tmp_path: Path) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    for b in range(4):
        db.table("events").append(events([30 - b * 7 - i for i in range(7)]))
    db.table("events").compact(sort_by=["id"])
    (only,) = db.snapshot().table("events").files
    rows = db.table("events").scan(["id"]).column("id").to_pylist()
    assert rows == sorted(rows) and len(rows) == 28
    assert only.stats is not None and only.stats["minValues"]["id"] == min(rows)
    with pytest.raises(SchemaMismatch, match="unknown column"):
        db.table("events").compact(sort_by=["nope"])
    with pytest.raises(ValueError, match="not both"):
        db.table("events").compact(sort_by=["id"], zorder_by=["id"])


def test_zorder_interleaves_the_bits_of_the_ranks() -> None:
    grid = pa.table({"x": [x for x in range(4) for _ in range(4)], "y": list(range(4)) * 4})
    shuffled = grid.take(pa.array([13, 2, 7, 0, 9, 15, 4, 11, 1, 6, 14, 3, 8, 12, 5, 10]))
    order = shuffled.take(zorder_indices(shuffled, ["x", "y"]))
    pairs = list(zip(order["x"].to_pylist(), order["y"].to_pylist(), strict=True))
    # The Morton (Z) curve over a 4x4 grid, x the more significant coordinate.
    assert pairs[:8] == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (0, 3), (1, 2), (1, 3)]
    assert pairs[8:] == [(2, 0), (2, 1), (3, 0), (3, 1), (2, 2), (2, 3), (3, 2), (3, 3)]


def test_zorder_clusters_rows_on_every_column(db_uri: str) -> None:
    db = mere.connect(db_uri)
    schema = pa.schema([("x", pa.int64()), ("y", pa.string()), ("z", pa.float64())])
    db.create_table("points", schema)
    for b in range(8):
        rows = [(i * 37 + b) % 64 for i in range(64)]
        db.table("points").append(
            pa.table(
                {
                    "x": rows,
                    "y": [f"k{(r * 5) % 64:02d}" for r in rows],
                    "z": [None if r % 9 == 0 else float(r) for r in rows],
                },
                schema=schema,
            )
        )
    before = db.table("points").scan()
    target = sum(f.size for f in db.snapshot().table("points").files)
    result = db.table("points").compact(target_file_size=target // 4, zorder_by=["x", "y"])
    assert result.files_removed == 8
    after = db.table("points").scan()
    key = ["x", "y", "z"]
    assert after.sort_by([(k, "ascending") for k in key]).equals(
        before.sort_by([(k, "ascending") for k in key])
    )


def test_a_concurrent_append_survives_compaction(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mere.connect(db_uri)
    ids = small_files(db, 4)
    other = mere.connect(db_uri)
    rewrite = compact_module.rewrite

    def append_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not appended:
            other.table("events").append(events([1000, 1001]))
            appended.append(True)
        return rewrite(*args, **kwargs)

    appended: list[bool] = []
    monkeypatch.setattr(compact_module, "rewrite", append_meanwhile)
    result = db.table("events").compact()
    assert result.version == result.read_version + 2  # rebased over the append
    assert ids_of(db.table("events")) == [*ids, 1000, 1001]
    assert db.table("events").describe()["files"] == 2 + 2


def test_a_concurrent_delete_of_the_same_file_makes_compaction_conflict(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mere.connect(db_uri)
    ids = small_files(db, 4)
    other = mere.connect(db_uri)
    rewrite = compact_module.rewrite
    written: list[str] = []

    def delete_meanwhile(*args: Any, **kwargs: Any) -> Any:
        if not written:
            other.table("events").delete("id = 0")
        new = rewrite(*args, **kwargs)
        written.extend(f.path for f in new)
        return new

    monkeypatch.setattr(compact_module, "rewrite", delete_meanwhile)
    version = db.version
    with pytest.raises(ConcurrentDeleteDelete):
        db.table("events").compact()
    assert db.version == version + 1  # only the delete committed
    assert ids_of(db.table("events")) == [i for i in ids if i != 0]
    table_id = db.snapshot().table("events").id
    # The compaction's own files were deleted.
    assert written and not any(db.store.exists(f"tables/{table_id}/{p}") for p in written)


def test_compaction_reads_files_of_an_older_schema(db_uri: str, tmp_path: Path) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1, 2]))
    wider = pa.table({"id": [3], "part": ["a"], "amount": [1.0], "note": ["new"]})
    db.table("events").append(wider, schema_mode="merge")
    db.table("events").compact()
    rows = sorted(db.table("events").scan().to_pylist(), key=lambda r: r["id"])
    assert [r["note"] for r in rows] == [None, None, "new"]
    (only,) = db.snapshot().table("events").files
    if not db_uri.startswith("memory://"):
        stored = pq.read_schema(
            Path(db_uri) / "tables" / db.snapshot().table("events").id / only.path
        )
        assert "note" in stored.names


# --- appends from other processes while compaction runs -------------------------------------

APPENDERS = 3
MAX_BATCHES = 60  # per appender: the test ends even if something goes wrong
PAUSE = 0.005  # between two appends of one appender: a steady flow, not a hot loop


def _appender(db_path: str, writer: int, progress: Any, stop: Any) -> None:
    """Append batches of unique ids until told to stop; report each committed batch.

    Exits non-zero (the traceback goes to stderr) if any append fails.
    """
    db = mere.connect(db_path)
    for n in range(MAX_BATCHES):
        if stop.is_set() and n >= 4:
            break
        batch = [1_000_000 * (writer + 1) + n * 10 + k for k in range(3)]
        db.table("events").append(events(batch))
        progress.put((writer, batch))
        time.sleep(PAUSE)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
def test_compaction_while_three_processes_append(db_path: Path, processes: Any) -> None:
    db = mere.connect(db_path)
    initial = small_files(db, 20)
    progress = processes.context.Queue()
    stop = processes.context.Event()
    children = [
        processes.start(_appender, str(db_path), w, progress, stop) for w in range(APPENDERS)
    ]
    appended: dict[int, list[int]] = {w: [] for w in range(APPENDERS)}

    def wait_for_batches(count: int) -> None:
        """Collect reports until every writer committed ``count`` more batches (or stopped)."""
        goal = {w: len(ids) // 3 + count for w, ids in appended.items()}
        deadline = time.monotonic() + 60
        while any(len(appended[w]) // 3 < goal[w] and children[w].is_alive() for w in appended):
            assert time.monotonic() < deadline, "the appenders made no progress"
            failed = [c.exitcode for c in children if c.exitcode not in (None, 0)]
            assert not failed, f"an appender failed: exit codes {failed}"
            try:
                writer, batch = progress.get(timeout=1)
            except queue.Empty:
                continue
            appended[writer].extend(batch)

    wait_for_batches(2)  # every appender is running
    result = db.table("events").compact()
    wait_for_batches(2)  # and keeps committing afterwards
    stop.set()
    processes.join(children)
    while True:
        try:
            writer, batch = progress.get(timeout=0.5)
        except queue.Empty:
            break
        appended[writer].extend(batch)
    assert [p.exitcode for p in children] == [0] * APPENDERS, "an append failed"

    fresh = mere.connect(db_path, create=False)
    got = ids_of(fresh.table("events"))
    expected = sorted(initial + [i for ids in appended.values() for i in ids])
    assert got == expected, "a row was lost or duplicated"

    # Every file of the snapshot compaction read was packed into one file per partition.
    read = fresh.snapshot(result.read_version).table("events")
    assert result.files_removed == len(read.files) >= 40
    assert result.files_added == 2
    # Afterwards: those 2 files plus the files of every append committed after that snapshot.
    later = [
        e
        for e in fresh.history()
        if e["version"] > result.read_version and e["operation"] == "APPEND"
    ]
    assert later, "the appends did not overlap the compaction"
    assert fresh.table("events").describe()["files"] == 2 + sum(e["files_added"] for e in later)
    compaction = fresh.snapshot(result.version).table("events")
    assert {f.path for f in read.files}.isdisjoint({f.path for f in compaction.files})
