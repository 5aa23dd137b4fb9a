"""Inlined data files (docs/format.md §2.5): small writes carry their bytes in the log."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.data import reader
from mere.errors import CorruptLog, FormatVersionError, InvalidArgument
from mere.log import actions, checkpoint
from mere.log.keys import commit_key
from mere.maintain import inline as inline_module
from mere.maintain.inline import flush_inlined, inlined_bytes

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("s", pa.string())])


def objects(db: mere.Database) -> list[str]:
    """The data file objects of the database (key filter sidecars left out)."""
    return sorted(m.key for m in db.store.list("tables/") if m.key.endswith(".parquet"))


def rows(db: mere.Database, name: str = "t", **kw: object) -> list[tuple[object, ...]]:
    table = db.table(name).scan(**kw)  # type: ignore[arg-type]
    return sorted(tuple(r.values()) for r in table.to_pylist())


def commit_lines(db: mere.Database, version: int) -> list[dict[str, object]]:
    return [json.loads(line) for line in db.store.get(commit_key(version)).decode().splitlines()]


@pytest.fixture
def inlining(db: mere.Database) -> mere.Database:
    db.create_table("t", SCHEMA)
    db.set_properties({"inlineLimit": "65536"})
    return db


def test_turning_inlining_on_moves_the_database_to_format_4_in_the_same_commit(
    db: mere.Database,
) -> None:
    db.create_table("t", SCHEMA)
    db.table("t").append([{"id": 1, "s": "a"}])
    assert db.latest_state().protocol.format_version == 1
    version = db.set_properties({"inlineLimit": "65536"})
    lines = commit_lines(db, version)
    assert lines[1] == {"protocol": {"formatVersion": 4}}
    assert db.latest_state().protocol.format_version == 4
    db.set_properties({"inlineLimit": "1000"})  # already at 4: no second protocol action
    assert not any("protocol" in line for line in commit_lines(db, db.version))


def test_a_small_append_is_one_commit_and_no_data_object(inlining: mere.Database) -> None:
    db = inlining
    before = objects(db)
    db.table("t").append([{"id": 1, "s": "a"}, {"id": 2, "s": None}])
    assert objects(db) == before
    (add,) = [line["add"] for line in commit_lines(db, db.version) if "add" in line]
    assert isinstance(add, dict)
    data = base64.b64decode(add["inline"])
    assert len(data) == add["size"] and data[:4] == b"\xff\xff\xff\xff"  # an Arrow stream
    assert rows(db) == [(1, "a"), (2, None)]
    fresh = mere.connect(db.store, create=False)
    assert rows(fresh) == [(1, "a"), (2, None)]
    assert rows(fresh, filter="id = 2") == [(2, None)]


def test_a_file_above_the_limit_is_an_object(db: mere.Database) -> None:
    db.create_table("t", SCHEMA)
    db.set_properties({"inlineLimit": "2000"})
    big = pa.table({"id": range(5000), "s": [f"value {i}" for i in range(5000)]}, schema=SCHEMA)
    db.table("t").append(big)
    db.table("t").append([{"id": -1, "s": "small"}])
    assert len(objects(db)) == 1
    assert db.table("t").scan().num_rows == 5001


def test_dml_time_travel_checkpoint_and_sql_over_inlined_files(inlining: mere.Database) -> None:
    db = inlining
    t = db.table("t")
    t.append([{"id": i, "s": str(i)} for i in range(5)])
    first = db.version
    t.append([{"id": 5, "s": "5"}])
    t.delete("id = 1")
    t.update("id = 2", {"s": "'two'"})
    source = pa.table({"id": [3, 9], "s": ["three", "nine"]}, schema=SCHEMA)
    t.merge(
        source, on="t.id = s.id"
    ).when_matched_update_all().when_not_matched_insert_all().execute()
    expected = [(0, "0"), (2, "two"), (3, "three"), (4, "4"), (5, "5"), (9, "nine")]
    assert rows(db) == expected
    assert objects(db) == []
    db.checkpoint()
    fresh = mere.connect(db.store, create=False)
    assert rows(fresh) == expected
    assert sorted(fresh.snapshot(version=first).table("t").scan().column("id").to_pylist()) == [
        0,
        1,
        2,
        3,
        4,
    ]
    counted = fresh.sql("SELECT count(*) AS n, sum(id) AS total FROM t").to_pylist()
    assert counted == [{"n": 6, "total": 23}]


def test_a_failed_statement_drops_its_inlined_rows(inlining: mere.Database) -> None:
    db = inlining
    with db.transaction() as tx:
        tx.table("t").append([{"id": 1, "s": "kept"}])
        with pytest.raises(mere.SchemaMismatch):
            tx.table("t").append(pa.table({"nope": [1]}))
    assert rows(db) == [(1, "kept")]


def test_restore_and_export_carry_inlined_files(inlining: mere.Database, tmp_path: Path) -> None:
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    old = db.version
    db.table("t").delete("TRUE")
    db.restore(old)
    assert rows(db) == [(1, "a")]
    result = db.export(tmp_path / "copy")
    copy = mere.connect(tmp_path / "copy", create=False)
    assert rows(copy) == [(1, "a")]
    assert copy.latest_state().protocol.format_version == 4
    assert result.files == 1
    assert not os.path.exists(tmp_path / "copy" / "tables")  # nothing to copy: all inlined


def test_vacuum_and_check_leave_inlined_files_alone(inlining: mere.Database) -> None:
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    db.vacuum(retention=timedelta(0), force=True)
    assert db.check().findings == []
    assert rows(db) == [(1, "a")]


def test_flush_moves_inlined_rows_into_one_data_file_per_partition(db: mere.Database) -> None:
    db.create_table("p", SCHEMA, partition_by=["s"])
    db.set_properties({"inlineLimit": "65536"})
    for i in range(6):
        db.table("p").append([{"id": i, "s": "ab"[i % 2]}])
    db.table("p").delete("id = 2")
    state = db.latest_state()
    (table_id,) = inlined_bytes(state)
    version = flush_inlined(db, bound=0)
    assert version == db.version
    assert flush_inlined(db, bound=0) is None  # nothing left to move
    assert inlined_bytes(db.latest_state()) == {}
    moved = list(db.latest_state().tables[table_id].files.values())
    assert sorted(a.partition_values["s"] for a in moved) == ["a", "b"]
    assert all(a.inline is None and not a.data_change for a in moved)
    assert len(objects(db)) == 2
    assert rows(db, "p") == [(0, "a"), (1, "b"), (3, "b"), (4, "a"), (5, "b")]
    assert db.table("p").scan(filter="s = 'b'").column("id").to_pylist() == [1, 3, 5]  # in order
    assert db.history(1)[0]["operation"] == "FLUSH INLINED"


def test_a_checkpointing_writer_flushes_past_the_bound(db: mere.Database) -> None:
    db.create_table("t", SCHEMA)
    db.set_properties(
        {"inlineLimit": "65536", "inlineFlushBytes": "1500", "checkpointInterval": "4"}
    )
    for i in range(9):
        db.table("t").append([{"id": i, "s": str(i)}])
    operations = [h["operation"] for h in db.history()]
    assert "FLUSH INLINED" in operations
    assert objects(db)
    assert rows(db) == [(i, str(i)) for i in range(9)]
    assert max(inlined_bytes(db.latest_state()).values(), default=0) <= 1500 + 3 * 1000


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", str(2 * 1024 * 1024)])
def test_invalid_inline_properties_are_refused(db: mere.Database, value: str) -> None:
    before = db.version
    with pytest.raises(InvalidArgument, match="inlineLimit"):
        db.set_properties({"inlineLimit": value})
    with pytest.raises(InvalidArgument, match="inlineFlushBytes"):
        db.set_properties({"inlineFlushBytes": "x" + value})
    assert db.version == before


def test_a_reader_of_format_2_refuses_an_inlining_database(
    inlining: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    monkeypatch.setattr(actions, "FORMAT_VERSION", 2)
    with pytest.raises(FormatVersionError, match="format version 4"):
        mere.connect(db.store, create=False).table("t").scan()


@pytest.mark.parametrize("checkpointed", [False, True])
def test_a_reader_of_format_3_refuses_a_database_inlining_arrow_streams(
    inlining: mere.Database, monkeypatch: pytest.MonkeyPatch, checkpointed: bool
) -> None:
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    if checkpointed:
        db.checkpoint()
    monkeypatch.setattr(actions, "FORMAT_VERSION", 3)
    monkeypatch.setattr(checkpoint, "FORMAT_VERSION", 3)
    with pytest.raises(FormatVersionError, match="format version 4"):
        mere.connect(db.store, create=False).table("t").scan()


def _write_commit(db: mere.Database, lines: list[dict[str, object]]) -> None:
    version = db.version + 1
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    db.store.put_if_absent(commit_key(version), body)


def _inlined_add(db: mere.Database, data: bytes, **overrides: object) -> dict[str, object]:
    table_id = db.latest_state().table_by_name("t").meta.id  # type: ignore[union-attr]
    add: dict[str, object] = {
        "tableId": table_id,
        "path": "part-0123456789abcdef0123456789abcdef.parquet",
        "size": len(data),
        "rows": 1,
        "modificationTime": 1,
        "inline": base64.b64encode(data).decode(),
    }
    add.update(overrides)
    return {"add": add}


def _info(db: mere.Database) -> dict[str, object]:
    return {
        "commitInfo": {
            "commitId": "x",
            "timestamp": 2**41,
            "isolation": "snapshot",
            "operation": "WRITE",
            "readVersion": db.version,
        }
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"inline": "not base64!"}, "not base64"),
        ({"size": 3}, "differ|holds 4 bytes"),
        ({"path": "file:///elsewhere/x.parquet"}, "absolute"),
        ({"inline": base64.b64encode(b"junk").decode()}, "neither a Parquet file nor an Arrow"),
    ],
)
def test_a_malformed_inlined_add_is_a_corrupt_log(
    inlining: mere.Database, overrides: dict[str, object], message: str
) -> None:
    db = inlining
    _write_commit(db, [_info(db), _inlined_add(db, b"PAR1", **overrides)])
    with pytest.raises(CorruptLog, match=message):
        mere.connect(db.store, create=False).snapshot()


def test_an_inlined_add_below_format_3_is_a_corrupt_log(db: mere.Database) -> None:
    db.create_table("t", SCHEMA)
    _write_commit(db, [_info(db), _inlined_add(db, b"PAR1")])
    with pytest.raises(CorruptLog, match="needs format version 3"):
        mere.connect(db.store, create=False).snapshot()


def test_an_arrow_stream_inlined_below_format_4_is_a_corrupt_log(db: mere.Database) -> None:
    db.create_table("t", SCHEMA)
    _write_commit(db, [_info(db), {"protocol": {"formatVersion": 3}}])
    _write_commit(db, [_info(db), _inlined_add(db, b"\xff\xff\xff\xff\x00\x00\x00\x00")])
    with pytest.raises(CorruptLog, match="needs format version 4"):
        mere.connect(db.store, create=False).snapshot()


def test_a_database_at_format_3_inlines_parquet_until_its_limit_is_set_again(
    db: mere.Database,
) -> None:
    """A database that turned inlining on under format 3 keeps inlining Parquet
    (its readers may be older); setting the limit again moves it to format 4,
    and both kinds of inlined file read, checkpoint, flush and compact alike."""
    db.create_table("t", SCHEMA)
    _write_commit(db, [_info(db), {"protocol": {"formatVersion": 3}}])
    state = db.latest_state()
    assert state.database is not None
    database = {"id": state.database.id, "createdTime": state.database.created_time}
    _write_commit(
        db, [_info(db), {"database": {**database, "properties": {"inlineLimit": "65536"}}}]
    )
    db = mere.connect(db.store, create=False)
    db.table("t").append([{"id": 1, "s": "a"}])
    assert inlined_kinds(db) == [b"PAR1"]
    db.set_properties({"checkpointInterval": "50"})  # another property: still format 3
    with db.transaction() as tx:  # setting it in a block rolled back does not count
        with pytest.raises(RuntimeError), tx.savepoint():
            tx.set_database_properties({"inlineLimit": "65536"})
            raise RuntimeError("undo the block")
        tx.set_database_properties({"checkpointInterval": "40"})
    assert db.latest_state().protocol.format_version == 3
    db.set_properties({"inlineLimit": "65536"})  # set again, to the same value
    assert db.latest_state().protocol.format_version == 4
    db.table("t").append([{"id": 2, "s": "b"}, {"id": 3, "s": None}])
    assert inlined_kinds(db) == [b"PAR1", b"\xff\xff\xff\xff"]
    db.checkpoint()
    fresh = mere.connect(db.store, create=False)
    assert rows(fresh) == [(1, "a"), (2, "b"), (3, None)]
    assert rows(fresh, filter="s >= 'b'") == [(2, "b")]
    assert fresh.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 3}]
    assert flush_inlined(fresh, bound=0) is not None
    assert rows(fresh) == [(1, "a"), (2, "b"), (3, None)] and inlined_kinds(fresh) == []
    assert len(objects(fresh)) == 1


def inlined_kinds(db: mere.Database) -> list[bytes]:
    """The first four bytes of each inlined file of table t, oldest first."""
    files = db.latest_state().table_by_name("t").files.values()  # type: ignore[union-attr]
    ordered = sorted(files, key=lambda a: a.modification_time)
    return [a.inline[:4] for a in ordered if a.inline is not None]


def test_a_damaged_arrow_stream_reads_as_a_corrupt_data_file(inlining: mere.Database) -> None:
    """Bytes that start as an Arrow stream but do not decode name the file, however
    pyarrow fails on them: it raises more than ArrowInvalid for a damaged stream
    (text that is not UTF-8, an unknown dictionary, an unsupported type)."""
    db = inlining
    db.table("t").append([{"id": 1, "s": "ab"}])
    (good,) = list(db.latest_state().table_by_name("t").files.values())  # type: ignore[union-attr]
    assert good.inline is not None
    meta = db.latest_state().table_by_name("t").meta  # type: ignore[union-attr]
    damaged: dict[type, bytes] = {}  # one single-byte change per kind of failure
    for i in range(8, len(good.inline)):
        for bit in (0x01, 0x10, 0x80):
            data = bytearray(good.inline)
            data[i] ^= bit
            try:
                pa.ipc.open_stream(bytes(data)).read_all().validate(full=True)
            except Exception as exc:
                damaged.setdefault(type(exc), bytes(data))
    assert len(set(damaged) - {pa.ArrowInvalid, OSError}) >= 2, damaged
    for data in damaged.values():
        with pytest.raises(mere.CorruptDataFile, match=good.path):
            reader.decoded_inline(meta, replace(good, inline=data, size=len(data)))
    _write_commit(db, [_info(db), _inlined_add(db, next(iter(damaged.values())))])
    with pytest.raises(mere.CorruptDataFile, match="part-0123456789abcdef"):
        mere.connect(db.store, create=False).table("t").scan()


def test_compaction_turns_inlined_files_into_a_stored_one(inlining: mere.Database) -> None:
    db = inlining
    for i in range(4):
        db.table("t").append([{"id": i, "s": str(i)}])
    result = db.table("t").compact()
    assert (result.files_removed, result.files_added) == (4, 1)
    (add,) = db.latest_state().table_by_name("t").files.values()  # type: ignore[union-attr]
    assert add.inline is None and len(objects(db)) == 1
    assert rows(db) == [(i, str(i)) for i in range(4)]


def test_primary_keys_hold_across_inlined_files(db: mere.Database) -> None:
    db.create_table("k", SCHEMA, primary_key=["id"])
    db.set_properties({"inlineLimit": "65536"})
    k = db.table("k")
    k.append([{"id": 1, "s": "a"}])
    k.append([{"id": 2, "s": "b"}])
    with pytest.raises(mere.DuplicateKey, match="1"):
        k.append([{"id": 1, "s": "again"}])
    k.append([{"id": 2, "s": "B"}, {"id": 3, "s": "c"}], on_duplicate="update")
    assert rows(db, "k") == [(1, "a"), (2, "B"), (3, "c")]
    assert objects(db) == []


def test_describe_counts_inlined_files(inlining: mere.Database) -> None:
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    info = db.table("t").describe()
    assert info["inlined_files"] == 1 and info["inlined_bytes"] == info["size_bytes"] > 0
    db.set_properties({"inlineLimit": "0"})
    db.table("t").append([{"id": 2, "s": "b"}])
    db.checkpoint()  # a fresh connection reads the files as columns, not objects
    again = mere.connect(db.store, create=False).table("t").describe()
    assert (again["files"], again["inlined_files"]) == (2, 1)
    assert again["inlined_bytes"] == info["inlined_bytes"] < again["size_bytes"]


def test_a_database_created_with_inline_limit_starts_at_format_4(db_uri: str) -> None:
    db = mere.connect(db_uri, inline_limit=65536)
    assert db.latest_state().protocol.format_version == 4
    assert db.properties["inlineLimit"] == "65536"
    db.create_table("t", SCHEMA)
    db.table("t").append([{"id": 1, "s": "a"}])
    assert objects(db) == [] and rows(db) == [(1, "a")]


@pytest.mark.parametrize("limit", [-1, 2 * 1024 * 1024])
def test_an_invalid_inline_limit_creates_nothing(tmp_path: Path, limit: int) -> None:
    with pytest.raises(InvalidArgument, match="inlineLimit"):
        mere.connect(tmp_path / "db", inline_limit=limit)
    assert not (tmp_path / "db").exists()


def test_a_flush_keeps_rows_appended_while_it_runs_after_its_own(
    inlining: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its new file lands after those rows' files: it moves them after it (same bytes)."""
    db = inlining
    for i in range(3):
        db.table("t").append([{"id": i, "s": str(i)}])
    rewrite = inline_module.rewrite

    def append_meanwhile(*args: object, **kwargs: object) -> object:
        db.table("t").append([{"id": 3, "s": "3"}])
        return rewrite(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inline_module, "rewrite", append_meanwhile)
    assert flush_inlined(db, bound=0) == db.version
    assert db.table("t").scan().column("id").to_pylist() == [0, 1, 2, 3]
    files = list(db.latest_state().table_by_name("t").files.values())  # type: ignore[union-attr]
    assert [a.inline is None for a in files] == [True, False]  # the late row stays inlined
    assert len(objects(db)) == 1


def test_a_flush_gives_up_when_a_stored_file_lands_meanwhile(
    inlining: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = inlining
    for i in range(3):
        db.table("t").append([{"id": i, "s": str(i)}])
    rewrite = inline_module.rewrite
    big = pa.table({"id": range(10, 5010), "s": ["x" * 40] * 5000}, schema=SCHEMA)

    def append_meanwhile(*args: object, **kwargs: object) -> object:
        db.set_properties({"inlineLimit": "100"})
        db.table("t").append(big)
        return rewrite(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(inline_module, "rewrite", append_meanwhile)
    stored = objects(db)
    with pytest.raises(mere.ConflictError, match="appended"):
        flush_inlined(db, bound=0)
    assert len(objects(db)) == len(stored) + 1  # the big file; the flush's own is deleted
    assert db.table("t").scan().num_rows == 5003


def test_a_flush_of_unknown_outcome_keeps_the_files_it_wrote(
    inlining: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its commit may have landed: deleting the files could break the table."""
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])

    def unknown(*args: object) -> int:
        raise mere.CommitOutcomeUnknown("lost answer", version=db.version + 1, commit_id="x")

    monkeypatch.setattr(inline_module, "_commit", unknown)
    with pytest.raises(mere.CommitOutcomeUnknown):
        flush_inlined(db, bound=0)
    assert len(objects(db)) == 1


@pytest.mark.parametrize(("format_version", "needs"), [(3, 4), (2, 3)])
def test_a_checkpoint_holding_inlined_bytes_its_format_lacks_is_a_corrupt_log(
    inlining: mere.Database, format_version: int, needs: int
) -> None:
    """A checkpoint's files are held to its format version as commits are (§2.2)."""
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    state = db.latest_state()
    assert any(f.inline is not None for f in db.snapshot().table("t").files)
    older = [
        replace(a, format_version=format_version) if isinstance(a, actions.Protocol) else a
        for a in state.live_actions()
    ]
    db.log.write_checkpoint(state.version, state.timestamp, older)
    with pytest.raises(CorruptLog, match=f"needs? format version {needs}"):
        mere.connect(db.store, create=False).snapshot().table("t").scan()


def test_a_format_1_checkpoint_refuses_inlined_files(inlining: mere.Database) -> None:
    """Format 1 has no column for inlined bytes: writing one would lose them."""
    db = inlining
    db.table("t").append([{"id": 1, "s": "a"}])
    state = db.latest_state()
    with pytest.raises(ValueError, match="cannot hold the inlined data file"):
        checkpoint.encode_checkpoint(state.version, state.timestamp, state.live_actions())
