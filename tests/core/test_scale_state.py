"""Live files as columns: replay in bulk, columnar checkpoints in parts, lazy reads.

Small sizes (seconds): the million-file figures are benchmarks/scale.py's.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
from mere.errors import CorruptLog
from mere.log import checkpoint as checkpoint_module
from mere.log.actions import (
    AddFile,
    Commit,
    CommitInfo,
    DatabaseMeta,
    DropTable,
    Protocol,
    RemoveFile,
    TableMeta,
)
from mere.log.checkpoint import encode_checkpoint
from mere.log.columns import FileLayout, adds_to_columns, columns_to_adds
from mere.log.keys import LOG_PREFIX, checkpoint_key, parse_checkpoint_part_key
from mere.log.log import Log
from mere.snapshot.files import LiveFiles
from mere.snapshot.state import DatabaseState
from mere.storage import MemoryStore

TID = "ab" * 16
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.string()),
        ("f", pa.float32()),
        ("day", pa.date32()),
        ("ts", pa.timestamp("us", "UTC")),
        ("d", pa.decimal128(8, 2)),
        ("s", pa.string()),
    ]
)
META = TableMeta(TID, "t", SCHEMA, ("p",), {}, 1_700_000_000_000)


def add(i: int, *, part: str | None = "x", extra: bool = False) -> AddFile:
    stats: dict[str, Any] = {
        "numRecords": 10,
        "minValues": {
            "id": i * 10,
            "f": float(i) / 4,
            "day": "2024-01-31",
            "ts": "2024-01-31 10:00:00.000000Z",
            "d": "1.50",
            "s": f"s{i:05d}",
        },
        "maxValues": {"id": i * 10 + 9, "f": 9.5, "day": "2024-02-01", "s": "zz"},
        "nullCount": {"id": 0, "f": 1, "day": 0, "ts": 0, "d": 0, "s": 2},
        "nanCount": {"f": 0},
    }
    if extra:
        stats["tightBounds"] = True
        stats["minValues"]["gone"] = 3  # a column the schema does not have
    return AddFile(TID, f"p={part}/part-{i:06d}.parquet", 100 + i, 10, {"p": part}, stats, i)


def info(version: int) -> CommitInfo:
    return CommitInfo(uuid.uuid4().hex, 1_700_000_000_000 + version, version - 1, "snapshot", "X")


def start() -> DatabaseState:
    first = Commit(
        0,
        info(0),
        (Protocol(1), DatabaseMeta("c" * 32, {}, 1_700_000_000_000), META),
    )
    return DatabaseState.initial(first)


# --- objects <-> columns --------------------------------------------------------------------


def test_columns_give_back_the_objects_they_were_made_of() -> None:
    layout = FileLayout.of(META)
    adds = [add(1), add(2, part=None), add(3, extra=True)]
    adds.append(AddFile(TID, "x.parquet", 1, 1, {"p": "y"}, None, 5, data_change=False))
    assert columns_to_adds(layout, TID, adds_to_columns(layout, adds)) == adds


def test_statistics_that_do_not_fit_are_unknown_not_errors() -> None:
    layout = FileLayout.of(META)
    odd = AddFile(
        TID,
        "a.parquet",
        1,
        1,
        {"p": "x"},
        {"numRecords": -3, "minValues": {"id": "one", "day": "never", "f": 1e300}, "nullCount": 5},
        0,
    )
    (back,) = columns_to_adds(layout, TID, adds_to_columns(layout, [odd]))
    assert back.stats is not None
    assert back.stats["minValues"] == {"f": 1e300}  # a float64 statistic
    assert back.stats["nullCount"] == 5  # not an object: kept as it was, unused
    assert "numRecords" not in back.stats


# --- replay in bulk ---------------------------------------------------------------------------


actions = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "readd"]), st.integers(0, 30)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(actions, min_size=1, max_size=6), st.integers(0, 5))
def test_replay_keeps_what_a_dict_of_files_would(commits: list[Any], fold_at: int) -> None:
    """Adds, removes and re-adds over several commits, applied one at a time or all at once."""
    expected: dict[str, AddFile] = {}
    state = start()
    batch: list[Commit] = []
    version = 0
    for number, commit in enumerate(commits):
        version += 1
        acts: list[Any] = []
        for kind, i in commit:
            a = add(i, part="x" if kind != "readd" else "y")
            if kind == "remove":
                acts.append(RemoveFile(TID, a.path, 1_700_000_000_000))
                expected.pop(a.path, None)
            else:
                acts.append(a)
                expected.pop(a.path, None)
                expected[a.path] = a
        batch.append(Commit(version, info(version), tuple(acts)))
        if number % (fold_at + 1) == fold_at:
            state = state.apply_many(batch)
            batch = []
    state = state.apply_many(batch)
    files = state.tables[TID].files
    assert isinstance(files, LiveFiles)
    assert dict(files.items()) == expected
    assert len(files) == len(expected)
    assert state.tables[TID].rows == sum(a.rows for a in expected.values())
    assert all(p in files for p in expected)


def test_a_table_dropped_and_created_again_in_one_batch_starts_empty() -> None:
    state = start().apply(Commit(1, info(1), (add(1), add(2))))
    again = Commit(2, info(2), (DropTable(TID, "t"), META, add(3)))
    state = state.apply(again)
    assert list(state.tables[TID].files) == [add(3).path]


def test_a_new_column_and_a_widened_one_keep_the_statistics() -> None:
    state = start().apply(Commit(1, info(1), (add(1),)))
    wider = SCHEMA.set(0, pa.field("id", pa.int64())).append(pa.field("extra", pa.int32()))
    meta = TableMeta(TID, "t", wider, ("p",), {}, META.created_time)
    state = state.apply(Commit(2, info(2), (meta, add(2))))
    files = state.tables[TID].files
    assert files[add(1).path].stats == add(1).stats
    assert files[add(2).path].stats == add(2).stats


# --- columnar checkpoints ---------------------------------------------------------------------


def many_files(db: mere.Database, count: int, per_commit: int = 500) -> None:
    """``count`` files in table t, written into the log directly (no data files)."""
    version = db.version
    meta = db.latest_state().table_by_name("t")
    assert meta is not None
    table_id = meta.meta.id
    for first in range(0, count, per_commit):
        version += 1
        adds = [
            AddFile(
                table_id,
                f"part-{i:08d}.parquet",
                1000,
                10,
                {},
                {
                    "numRecords": 10,
                    "minValues": {"id": i * 10},
                    "maxValues": {"id": i * 10 + 9},
                    "nullCount": {"id": 0},
                },
                i,
            )
            for i in range(first, min(first + per_commit, count))
        ]
        from mere.log.actions import encode_commit
        from mere.log.keys import commit_key

        db.store.put_if_absent(commit_key(version), encode_commit(info(version), adds))


@pytest.fixture
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> mere.Database:
    monkeypatch.setattr(checkpoint_module, "PART_FILES", 1000)  # several parts
    db = mere.connect(tmp_path / "db", checkpoint_interval=1000)
    db.create_table("t", pa.schema([("id", pa.int64()), ("note", pa.string())]))
    many_files(db, 5000)
    db.table("t").append([{"id": 10**9, "note": "real"}])  # one real data file
    return db


def parts_of(store: Any, version: int) -> list[str]:
    return [m.key for m in store.list(LOG_PREFIX) if parse_checkpoint_part_key(m.key) == version]


def test_a_checkpoint_is_a_manifest_and_parts(big: mere.Database) -> None:
    version = big.checkpoint()
    parts = parts_of(big.store, version)
    assert len(parts) == 6  # 5,001 files, at most 1,000 a part
    manifest = pq.read_table(big.store.open_input(checkpoint_key(version)))
    assert manifest.schema.metadata[b"mere.checkpointFormat"] == b"2"
    assert set(manifest.column("kind").to_pylist()) == {"protocol", "database", "metadata", "part"}
    fresh = mere.connect(big.store, create=False)
    assert fresh.latest_state().tables == big.latest_state().tables
    assert fresh.table("t").scan(filter="id = 1000000000").num_rows == 1


def test_a_reader_reads_only_the_columns_it_needs(
    big: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mere.snapshot.files as files_module

    version = big.checkpoint()
    log = Log(big.store)
    fetched: list[str] = []
    decoded: list[tuple[str, ...] | None] = []
    fetch, decode = log.fetch_part, files_module.decode_part

    def spy_fetch(part: Any) -> pa.Buffer:
        fetched.append(part.key)
        return fetch(part)

    def spy_decode(part: Any, data: Any, columns: Any) -> pa.Table:
        decoded.append(None if columns is None else tuple(columns))
        return decode(part, data, columns)

    monkeypatch.setattr(log, "fetch_part", spy_fetch)
    monkeypatch.setattr(files_module, "decode_part", spy_decode)
    state = DatabaseState.from_checkpoint(log.open_checkpoint(version))
    files = state.tables[state.names["t"]].live
    assert len(files) == 5001  # the manifest counts them
    assert fetched == [] and decoded == []  # opening reads no part
    files.columns(["rows", "min:id", "max:id"])
    assert len(fetched) == 6  # every part once, whole
    assert {c for cols in decoded for c in cols or ()} == {"path", "rows", "min:id", "max:id"}
    decoded.clear()
    files.columns(["rows", "size"])
    assert {c for cols in decoded for c in cols or ()} == {"size"}
    assert len(fetched) == 6


def test_a_long_lived_database_moves_forward_without_the_checkpoint(big: mere.Database) -> None:
    big.checkpoint()
    reader = mere.connect(big.store, create=False)
    assert len(reader.snapshot().table("t").files) == 5001
    reads: list[str] = []
    get = big.store.get

    def counting(key: str) -> bytes:
        reads.append(key)
        return get(key)

    big.store.get = counting  # type: ignore[method-assign]
    try:
        big.table("t").append([{"id": -1, "note": "new"}])
        assert len(reader.snapshot().table("t").files) == 5002
    finally:
        del big.store.get
    assert not any("checkpoint" in key for key in reads)


def test_format_1_checkpoints_written_by_earlier_mere_still_read(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "db", checkpoint_interval=1000)
    db.create_table("t", SCHEMA, partition_by=["p"])
    db.table("t").append(
        [
            {"id": 1, "p": "x", "f": float("nan"), "s": "a"},
            {"id": 2, "p": None, "f": 1.5, "s": "b"},
        ]
    )
    state = db.latest_state()
    raw = encode_checkpoint(state.version, state.timestamp, list(state.live_actions()))
    assert b"mere.checkpointFormat" not in raw
    db.store.put_if_absent(checkpoint_key(state.version), raw)
    db.table("t").append([{"id": 3, "p": "x"}])
    fresh = mere.connect(tmp_path / "db", create=False)
    assert fresh.latest_state().tables == db.latest_state().tables
    assert sorted(fresh.table("t").scan(filter="id >= 2").column("id").to_pylist()) == [2, 3]
    assert fresh.table("t").scan(filter="p IS NULL").num_rows == 1
    assert not fresh.check().findings


def test_format_1_checkpoints_keep_statistics_the_columns_do_not_type(tmp_path: Path) -> None:
    store = MemoryStore()
    log = Log(store)
    state = start().apply(Commit(1, info(1), (add(1, extra=True), add(2))))
    raw = encode_checkpoint(1, state.timestamp, list(state.live_actions()))
    store.put_if_absent(checkpoint_key(1), raw)
    loaded = DatabaseState.from_checkpoint(log.open_checkpoint(1))
    assert loaded.tables[TID].files[add(1).path] == add(1, extra=True)


def test_expiry_deletes_the_parts_of_checkpoints_it_deletes(big: mere.Database) -> None:
    from datetime import timedelta

    first = big.checkpoint()
    big.table("t").append([{"id": -5, "note": "x"}])
    second = big.checkpoint()
    assert parts_of(big.store, first) and parts_of(big.store, second)
    result = big.expire(timedelta(0), force=True)
    assert result.oldest_version == second
    assert parts_of(big.store, first) == []
    assert len(parts_of(big.store, second)) == 6
    assert mere.connect(big.store, create=False).table("t").scan(filter="id = -5").num_rows == 1


def test_a_writer_that_loses_the_checkpoint_race_deletes_its_parts(big: mere.Database) -> None:
    state = big.latest_state()
    assert big.log.write_checkpoint(
        state.version, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
    )
    before = set(parts_of(big.store, state.version))
    assert not big.log.write_checkpoint(
        state.version, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
    )
    assert set(parts_of(big.store, state.version)) == before


@pytest.mark.parametrize("defect", ["missing", "path", "negative", "table", "twice"])
def test_a_damaged_part_is_a_corrupt_log(big: mere.Database, defect: str) -> None:
    version = big.checkpoint()
    key = sorted(parts_of(big.store, version))[0]
    table = pq.read_table(big.store.open_input(key))
    big.store.delete(key)
    if defect != "missing":
        if defect == "path":
            table = table.set_column(0, "path", pa.array(["../x"] * table.num_rows))
        elif defect == "negative":
            table = table.set_column(1, "size", pa.array([-1] * table.num_rows, pa.int64()))
        elif defect == "table":
            table = table.replace_schema_metadata({"mere.tableId": "cd" * 16})
        elif defect == "twice":
            paths = table.column("path").to_pylist()
            table = table.set_column(0, "path", pa.array([paths[0]] * len(paths)))
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        big.store.put_if_absent(key, sink.getvalue())
    fresh = mere.connect(big.store, create=False)
    with pytest.raises(CorruptLog):
        _ = fresh.snapshot().table("t").files  # as objects: every check
    with pytest.raises(CorruptLog):
        big.log.read_checkpoint(version)  # what mere check reads


def test_point_lookup_reads_one_file_of_thousands(big: mere.Database) -> None:
    big.checkpoint()
    fresh = mere.connect(big.store, create=False)
    snapshot = fresh.snapshot().table("t")
    from mere.snapshot.planning import select_files
    from mere.snapshot.scan import plan_scan

    plan = plan_scan(snapshot.meta, None, "id = 1000000000")
    chosen = select_files(plan, fresh.latest_state().table_by_name("t"))  # type: ignore[arg-type]
    assert len(chosen) == 1
    table = fresh.latest_state().table_by_name("t")
    assert table is not None
    for sql, count in [
        ("id BETWEEN 100 AND 129 OR id = 1000000000", 4),
        ("note = 'real'", 5001),  # the files written directly have no statistics for note
        ("id * 2 = 0", 5001),  # not analysed
        ("id + 1 = 1", 1),  # the per-file analysis decides
    ]:
        plan = plan_scan(snapshot.meta, None, sql)
        chosen = select_files(plan, table)
        assert len(chosen) == count, sql
        assert [a.path for a in chosen] == [a.path for a in plan.select(table.files.values())]


def test_the_state_of_random_databases_survives_a_checkpoint(tmp_path: Path) -> None:
    rng = random.Random(3)
    db = mere.connect(tmp_path / "db", checkpoint_interval=7)
    db.create_table("t", SCHEMA, partition_by=["p"])
    rows: list[dict[str, Any]] = []
    for step in range(25):
        choice = rng.random()
        if choice < 0.6:
            batch = [
                {"id": rng.randint(0, 99), "p": rng.choice(["a", "b", None]), "f": rng.random()}
                for _ in range(rng.randint(1, 4))
            ]
            db.table("t").append(batch)
            rows += batch
        elif choice < 0.8:
            db.table("t").delete(f"id < {step}")
            rows = [r for r in rows if r["id"] >= step]
        else:
            db.table("t").compact()
    fresh = mere.connect(tmp_path / "db", create=False)
    assert fresh.latest_state().tables == db.latest_state().tables
    got = sorted(fresh.table("t").scan(columns=["id"]).column("id").to_pylist())
    assert got == sorted(r["id"] for r in rows)
    assert json.dumps(fresh.table("t").describe(), default=str)


def test_files_whose_checkpoint_was_expired_before_they_were_read_are_read_anew(
    big: mere.Database,
) -> None:
    """A long-lived reader keeps a checkpoint's parts unread until it needs them."""
    from datetime import timedelta

    big.create_table("u", pa.schema([("id", pa.int64())]))
    big.table("u").append([{"id": 1}])
    first = big.checkpoint()
    reader = mere.connect(big.store, create=False)
    old = reader.latest_state()  # the parts of `first`, not read yet
    big.table("t").append([{"id": -7, "note": "later"}])
    reader.latest_state()  # moves forward by one commit, still on `first`'s parts
    big.checkpoint()
    big.expire(timedelta(0), force=True)  # deletes `first`, and every version before
    assert parts_of(big.store, first) == []
    latest = reader.latest_state()
    assert reader.table("t").scan(filter="id = -7").num_rows == 1  # read anew
    assert reader.table("u").scan().num_rows == 1  # untouched since `first`: read anew too
    assert latest.table_by_name("t").rows == 5000 * 10 + 2  # type: ignore[union-attr]
    stale = old.table_by_name("t")
    assert stale is not None
    with pytest.raises(mere.VersionNotFound, match="expired"):
        stale.live.columns(["path"])  # that version is gone, as its data may be


def test_a_manifest_that_may_have_landed_keeps_its_parts(
    big: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown outcome of the manifest's put must not delete the parts it may name."""
    from mere.errors import StorageError

    state = big.latest_state()
    put = big.store.put_if_absent

    def flaky(key: str, data: Any) -> None:
        put(key, data)
        if key == checkpoint_key(state.version):
            raise StorageError("the answer was lost")

    monkeypatch.setattr(big.store, "put_if_absent", flaky)
    with pytest.raises(StorageError):
        big.log.write_checkpoint(
            state.version, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
        )
    monkeypatch.undo()
    assert mere.connect(big.store, create=False).latest_state().tables == state.tables
