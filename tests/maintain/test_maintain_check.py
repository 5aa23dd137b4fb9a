"""``db.check()``: every defect of a damaged database is found, reported once, and repaired
forward when that is safe; a healthy database (however it got there) is clean.

Runs on the memory and the local store (the ``db`` fixture).
"""

from __future__ import annotations

import base64
import importlib
import json
import uuid
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere.log import encode_commit
from mere.log.actions import FORMAT_VERSION, Action, AddFile, CommitInfo, Protocol
from mere.log.checkpoint import encode_checkpoint
from mere.log.keys import CHECKPOINT_HINT, LATEST_HINT, checkpoint_key, commit_key
from mere.maintain.check import CheckResult, Finding, check
from mere.storage import MemoryStore, ObjectStore

X = pa.schema([("x", pa.int64())])
LATEST = 7  # version 1 creates t, versions 2..7 append x = 0..5


@pytest.fixture
def store(db: mere.Database) -> ObjectStore:
    """A database: version 1 creates table t, versions 2..7 append x = 0..5 (one file each)."""
    db.create_table("t", X)
    for i in range(LATEST - 1):
        db.table("t").append([{"x": i}])
    assert db.version == LATEST
    return db.store


def fresh(store: ObjectStore) -> mere.Database:
    return mere.connect(store, create=False)


def kinds(result: CheckResult) -> list[str]:
    return [f.kind for f in result.findings]


def only(result: CheckResult, kind: str) -> Finding:
    found = [f for f in result.findings if f.kind == kind]
    assert len(found) == 1, result.findings
    return found[0]


def xs(store: ObjectStore, version: int | None = None) -> list[int]:
    table = fresh(store).snapshot(version=version).table("t")
    return sorted(table.scan().column("x").to_pylist())


def replace_object(store: ObjectStore, key: str, data: bytes) -> None:
    store.delete(key)
    store.put_if_absent(key, data)


def live_file_keys(store: ObjectStore) -> list[str]:
    table = fresh(store).latest_state().table_by_name("t")
    assert table is not None
    return sorted(table.meta.prefix + path for path in table.files)


def put_commit(store: ObjectStore, version: int, timestamp: int, actions: list[Action]) -> None:
    info = CommitInfo(uuid.uuid4().hex, timestamp, version - 1, "serializable", "APPEND")
    store.put_if_absent(commit_key(version), encode_commit(info, actions))


def set_hint(store: ObjectStore, key: str, payload: bytes) -> None:
    store.put(key, payload)


def pin_latest_hint(store: ObjectStore, version: int = LATEST) -> None:
    """Point the latest-version hint at ``version``.

    Writers need not refresh it at every commit; a hint left below a gap is
    a finding of its own (discovery would stop at the gap).
    """
    set_hint(store, LATEST_HINT, json.dumps({"version": version}).encode())


# --- healthy databases are clean ------------------------------------------------------------


def test_a_busy_healthy_database_is_clean(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=3)
    db.create_table("t", X, partition_by=[])
    with db.transaction() as tx:
        tx.create_table("u", pa.schema([("k", pa.int64()), ("p", pa.string())]), partition_by=["p"])
        tx.set_app_transaction("job", 1)
    for i in range(5):
        db.table("t").append([{"x": i}, {"x": i + 100}])
        db.table("u").append([{"k": i, "p": "a" if i % 2 else "b"}])
    db.table("t").delete("x = 2")
    db.table("t").update("x = 3", {"x": "x * 10"})
    db.table("t").compact()  # removes and adds with dataChange false
    with db.transaction() as tx:
        tx.alter_table("u").add_column("extra", pa.string())
    db.set_properties({"vacuumMinRetention": "2h"})
    db.drop_table("u")
    db.create_table("u", X)
    db.checkpoint()
    result = fresh(db.store).check()
    assert result.clean, [f.line() for f in result.findings]
    assert result.findings == []
    assert result.latest_version == db.version and result.oldest_version == 0
    assert result.commits_checked == db.version + 1
    assert result.checkpoints_checked >= 4
    assert result.files_checked == len(live_file_keys(db.store))
    assert result.repair_version is None
    assert fresh(db.store).check(repair=True).clean
    assert fresh(db.store).version == db.version  # a clean repair commits nothing


def test_an_expired_database_is_clean(store: ObjectStore) -> None:
    db = fresh(store)
    expired = db.expire(timedelta(0), force=True)
    assert expired.commits_deleted > 0
    result = fresh(store).check()
    assert result.clean, [f.line() for f in result.findings]
    assert result.oldest_version == expired.oldest_version


def test_a_database_without_hints_is_clean(store: ObjectStore) -> None:
    fresh(store).checkpoint()
    store.delete(LATEST_HINT)
    store.delete(CHECKPOINT_HINT)
    assert fresh(store).check().clean


def test_reading_commits_concurrently_finds_the_same(db: mere.Database) -> None:
    if not isinstance(db.store, MemoryStore):
        pytest.skip("one concurrent backend is enough")

    class Concurrent(MemoryStore):
        concurrent_reads = True

    name = f"check-{uuid.uuid4().hex}"
    store = Concurrent(name)
    db2 = mere.connect(store)
    db2.create_table("t", X)
    for i in range(150):  # several batches
        db2.table("t").append([{"x": i}])
    assert fresh(store).check().clean
    store.delete(commit_key(70))
    result = fresh(store).check()
    assert kinds(result) == ["GAP"]  # the automatic checkpoint at 100 bridges it
    assert result.commits_checked == 151 and result.checkpoints_checked == 1  # 0..151 but 70
    MemoryStore.forget(name)


# --- the log -----------------------------------------------------------------------------------


def test_a_gap_is_found(store: ObjectStore) -> None:
    store.delete(commit_key(3))
    result = fresh(store).check()
    gap = only(result, "GAP")
    assert gap.key == commit_key(3) and gap.version == 3
    assert "missing but later versions exist" in gap.message and "a gap in the log" in gap.message
    assert not gap.repairable
    assert only(result, "UNREADABLE").version == LATEST  # nothing rebuilds the latest version
    assert not result.clean


def test_a_wide_gap_is_one_finding(store: ObjectStore) -> None:
    for version in (3, 4, 5):
        store.delete(commit_key(version))
    gap = only(fresh(store).check(), "GAP")
    assert "versions 3..5 are missing" in gap.message and "the next is 6" in gap.message


def test_a_gap_bridged_by_a_checkpoint_leaves_the_latest_readable(store: ObjectStore) -> None:
    db = fresh(store)
    state = db.state_at(5)
    store.put_if_absent(
        checkpoint_key(5), encode_checkpoint(5, state.timestamp, list(state.live_actions()))
    )
    store.delete(commit_key(3))
    pin_latest_hint(store)
    result = fresh(store).check()
    assert kinds(result) == ["GAP"]  # files of the latest version were checked
    assert result.files_checked == LATEST - 1


def test_a_truncated_commit_is_found(store: ObjectStore) -> None:
    data = store.get(commit_key(3))
    replace_object(store, commit_key(3), data[:-5])
    result = fresh(store).check()
    corrupt = only(result, "CORRUPT_COMMIT")
    assert corrupt.key == commit_key(3) and "truncated" in corrupt.message
    assert kinds(result) == ["CORRUPT_COMMIT", "UNREADABLE"]


def test_an_empty_commit_is_found_as_empty(store: ObjectStore) -> None:
    replace_object(store, commit_key(4), b"")
    corrupt = only(fresh(store).check(), "CORRUPT_COMMIT")
    assert (
        corrupt.version == 4 and "empty" in corrupt.message and "truncated" not in corrupt.message
    )


@pytest.mark.parametrize(
    "garbage", [b"not json\n", b"\xff\xfe\n", b'{"commitInfo": 1}\n', b'{"add": {}}\n']
)
def test_a_garbled_commit_is_found(store: ObjectStore, garbage: bytes) -> None:
    replace_object(store, commit_key(LATEST), garbage)
    result = fresh(store).check()
    assert only(result, "CORRUPT_COMMIT").key == commit_key(LATEST)


def test_a_commit_that_cannot_be_applied_is_found(store: ObjectStore) -> None:
    ts = fresh(store).log.commit_timestamp(LATEST) + 1
    stranger = AddFile("f" * 32, "part-x.parquet", 10, 1, {}, None, ts)
    put_commit(store, LATEST + 1, ts, [stranger])
    result = fresh(store).check()
    invalid = only(result, "INVALID_COMMIT")
    assert invalid.key == commit_key(LATEST + 1) and "unknown table id" in invalid.message
    assert invalid.version == LATEST + 1


def test_timestamps_going_backwards_are_found(store: ObjectStore) -> None:
    ts = fresh(store).log.commit_timestamp(LATEST) - 1000
    put_commit(store, LATEST + 1, ts, [])
    result = fresh(store).check()
    assert only(result, "TIMESTAMP_ORDER").version == LATEST + 1
    assert kinds(result) == ["TIMESTAMP_ORDER"]


def test_a_newer_format_is_refused_not_called_corrupt(store: ObjectStore) -> None:
    ts = fresh(store).log.commit_timestamp(LATEST) + 1
    put_commit(store, LATEST + 1, ts, [Protocol(FORMAT_VERSION + 1)])
    with pytest.raises(mere.FormatVersionError):
        fresh(store).check()


def test_lost_oldest_commits_without_a_checkpoint_are_no_base(store: ObjectStore) -> None:
    store.delete(commit_key(0))
    store.delete(commit_key(1))
    result = fresh(store).check()
    assert only(result, "NO_BASE").version == 1
    assert "GAP" not in kinds(result)


# --- checkpoints -------------------------------------------------------------------------------


def wrong_checkpoint(store: ObjectStore, at: int, state_of: int) -> None:
    """Write the state of version ``state_of`` as the checkpoint of version ``at``."""
    db = fresh(store)
    wrong = db.state_at(state_of)
    store.put_if_absent(
        checkpoint_key(at),
        encode_checkpoint(at, db.state_at(at).timestamp, list(wrong.live_actions())),
    )


def test_a_checkpoint_that_disagrees_with_the_log_is_found_and_the_latest_repaired(
    store: ObjectStore,
) -> None:
    wrong_checkpoint(store, 5, 2)  # x = [0] where the log says [0..3]
    assert xs(store) == [0, 4, 5]  # readers trust it
    result = fresh(store).check()
    mismatch = only(result, "CHECKPOINT_MISMATCH")
    assert mismatch.key == checkpoint_key(5)
    assert "disagrees with the log" in mismatch.message
    assert "table 't': 3 of the log's live files missing" in mismatch.message
    assert "repair writes a checkpoint" in (mismatch.repair or "")
    # The live files of both views are checked: all exist.
    assert kinds(result) == ["CHECKPOINT_MISMATCH"]

    repaired = fresh(store).check(repair=True)
    mismatch = only(repaired, "CHECKPOINT_MISMATCH")
    assert not mismatch.repaired and "older versions still read" in (mismatch.repair or "")
    assert store.exists(checkpoint_key(LATEST))
    assert xs(store) == [0, 1, 2, 3, 4, 5]  # the latest version reads the log's state again
    assert xs(store, 5) == [0]  # history is not rewritten: version 5 still reads the checkpoint
    again = fresh(store).check()
    assert kinds(again) == ["CHECKPOINT_MISMATCH"]  # it stays: it cannot be overwritten
    assert "repair" not in (only(again, "CHECKPOINT_MISMATCH").repair or "")


def test_a_disagreeing_checkpoint_at_the_latest_version_is_not_overwritten(
    store: ObjectStore,
) -> None:
    wrong_checkpoint(store, LATEST, 2)
    before = store.get(checkpoint_key(LATEST))
    result = fresh(store).check(repair=True)
    mismatch = only(result, "CHECKPOINT_MISMATCH")
    assert not mismatch.repaired and "repair cannot replace it" in (mismatch.repair or "")
    assert store.get(checkpoint_key(LATEST)) == before


def test_a_checkpoint_with_another_timestamp_disagrees(store: ObjectStore) -> None:
    db = fresh(store)
    state = db.state_at(4)
    store.put_if_absent(
        checkpoint_key(4), encode_checkpoint(4, state.timestamp + 5, list(state.live_actions()))
    )
    assert "timestamp" in only(fresh(store).check(), "CHECKPOINT_MISMATCH").message


def test_an_unreadable_checkpoint_is_found_and_the_latest_repaired(store: ObjectStore) -> None:
    store.put_if_absent(checkpoint_key(5), b"garbage")
    with pytest.raises(mere.CorruptLog):
        xs(store)
    result = fresh(store).check()
    corrupt = only(result, "CORRUPT_CHECKPOINT")
    assert corrupt.key == checkpoint_key(5) and "unreadable Parquet" in corrupt.message
    fresh(store).check(repair=True)
    assert xs(store) == [0, 1, 2, 3, 4, 5]


def test_a_damaged_checkpoint_part_is_found_and_the_latest_repaired(store: ObjectStore) -> None:
    """A part is fetched when its files are first needed: check reads every one."""
    state = fresh(store).state_at(5)
    db = fresh(store)
    db.log.write_checkpoint(
        5, state.timestamp, state.checkpoint_actions(), state.checkpoint_files()
    )
    [part] = [m.key for m in store.list("_log/") if m.key.count(".") == 4]
    replace_object(store, part, store.get(part)[:60])
    with pytest.raises(mere.CorruptLog, match="unreadable Parquet"):
        xs(store)
    corrupt = only(fresh(store).check(), "CORRUPT_CHECKPOINT")
    assert corrupt.key == part and corrupt.version == 5
    assert "unreadable Parquet" in corrupt.message
    fresh(store).check(repair=True)
    assert xs(store) == [0, 1, 2, 3, 4, 5]


def test_a_checkpoint_claiming_another_version_is_found(store: ObjectStore) -> None:
    state = fresh(store).state_at(5)
    store.put_if_absent(
        checkpoint_key(5), encode_checkpoint(4, state.timestamp, list(state.live_actions()))
    )
    assert "claims version 4" in only(fresh(store).check(), "CORRUPT_CHECKPOINT").message


def test_a_checkpoint_beyond_the_log_is_found(store: ObjectStore) -> None:
    state = fresh(store).state_at(LATEST)
    store.put_if_absent(
        checkpoint_key(40), encode_checkpoint(40, state.timestamp, list(state.live_actions()))
    )
    result = fresh(store).check()
    assert only(result, "STRAY_CHECKPOINT").version == 40
    assert kinds(result) == ["STRAY_CHECKPOINT"]


# --- data files --------------------------------------------------------------------------------


def test_a_missing_data_file_is_found_and_repaired_by_a_forward_commit(store: ObjectStore) -> None:
    victim = live_file_keys(store)[2]
    store.delete(victim)
    with pytest.raises(mere.MereError):
        xs(store)
    result = fresh(store).check()
    missing = only(result, "MISSING_FILE")
    assert missing.key == victim and missing.table == "t" and missing.repairable
    assert not missing.repaired and kinds(result) == ["MISSING_FILE"]
    assert fresh(store).version == LATEST  # checking wrote nothing

    repaired = fresh(store).check(repair=True)
    missing = only(repaired, "MISSING_FILE")
    assert missing.repaired and repaired.repair_version == LATEST + 1
    assert not repaired.clean  # it was found: someone should know rows were lost
    db = fresh(store)
    assert db.version == LATEST + 1
    entry = db.history(limit=1)[0]
    assert entry["operation"] == "REPAIR"
    assert entry["parameters"] == {"tables": ["t"], "missingFiles": 1}
    assert entry["files_removed"] == 1 and entry["rows_removed"] == 1
    assert len(xs(store)) == LATEST - 2  # the table reads again, without the lost row
    assert fresh(store).check().clean
    assert all(store.exists(commit_key(v)) for v in range(LATEST + 1))  # history untouched


def test_a_missing_file_a_tag_keeps_is_found_and_left_alone(store: ObjectStore) -> None:
    """A tag promises its version stays readable: a file only it keeps is checked too."""
    db = fresh(store)
    db.tag("keep")
    victim = live_file_keys(store)[0]
    db.table("t").delete("x >= 0")
    db.table("t").append([{"x": 9}])
    store.delete(victim)
    with pytest.raises(mere.DataFileMissing):
        fresh(store).snapshot(version="keep").table("t").scan()
    before = fresh(store).version
    result = fresh(store).check(repair=True)
    missing = only(result, "MISSING_FILE")
    assert missing.key == victim and missing.version == LATEST and not missing.repairable
    assert "kept by tag 'keep' at version 7" in missing.message
    assert not missing.repaired and kinds(result) == ["MISSING_FILE"]
    assert fresh(store).version == before  # nothing to repair by a commit
    assert result.files_checked == 1 + 6  # the latest version's file, the tag's six


def test_missing_files_of_several_tables_are_one_repair_commit(store: ObjectStore) -> None:
    db = fresh(store)
    db.create_table("u", X)
    db.table("u").append([{"x": 1}])
    db.table("u").append([{"x": 2}])
    state = fresh(store).latest_state()
    for name in ("t", "u"):
        table = state.table_by_name(name)
        assert table is not None
        store.delete(table.meta.prefix + next(iter(table.files)))
    result = fresh(store).check(repair=True)
    assert [f.table for f in result.findings] == ["t", "u"]
    assert all(f.repaired for f in result.findings)
    assert fresh(store).history(limit=1)[0]["parameters"]["tables"] == ["t", "u"]
    assert fresh(store).check().clean


def test_a_data_file_of_the_wrong_size_is_found_not_repaired(store: ObjectStore) -> None:
    victim = live_file_keys(store)[0]
    replace_object(store, victim, store.get(victim) + b"tail")
    result = fresh(store).check(repair=True)
    wrong = only(result, "WRONG_SIZE")
    assert wrong.key == victim and not wrong.repaired and not wrong.repairable
    assert "the log records" in wrong.message
    assert result.repair_version is None and fresh(store).version == LATEST


# --- hints -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b'{"version": 99}', "beyond the latest version"),
        (b"garbage", "not a valid hint"),
        (b'{"version": -1}', "not a valid hint"),
    ],
)
def test_a_bad_latest_hint_is_found_and_rewritten(
    store: ObjectStore, payload: bytes, says: str
) -> None:
    db = fresh(store)  # connected first: discovery may rewrite a hint it finds bad
    set_hint(store, LATEST_HINT, payload)
    bad = only(db.check(), "BAD_HINT")
    assert bad.key == LATEST_HINT and says in bad.message and bad.repairable
    repaired = only(db.check(repair=True), "BAD_HINT")
    assert repaired.repaired
    assert json.loads(store.get(LATEST_HINT)) == {"version": LATEST}
    assert fresh(store).check().clean


def test_a_latest_hint_below_a_gap_is_found(store: ObjectStore) -> None:
    store.delete(commit_key(5))
    set_hint(store, LATEST_HINT, b'{"version": 2}')
    if store.turns("_log/") is None:  # else the turns' note finds the gap (format §3)
        assert fresh(store).version == 4  # discovery stops at the gap: a writer would fill it
    result = fresh(store).check(repair=True)
    bad = only(result, "BAD_HINT")
    assert "below the gap at version 5" in bad.message and bad.repaired
    with pytest.raises(mere.CorruptLog, match="a gap in the log"):
        _ = fresh(store).version  # the gap is now met, not filled


@pytest.mark.parametrize(
    ("payload", "says", "rewritten"),
    [
        (b'{"version": 3}', "has no checkpoint", {"version": 6}),
        (b'{"version": 60}', "beyond the latest version", {"version": 6}),
        (b"[]", "not a valid hint", {"version": 6}),
    ],
)
def test_a_bad_checkpoint_hint_is_found_and_rewritten(
    store: ObjectStore, payload: bytes, says: str, rewritten: dict[str, int]
) -> None:
    state = fresh(store).state_at(6)
    store.put_if_absent(
        checkpoint_key(6), encode_checkpoint(6, state.timestamp, list(state.live_actions()))
    )
    set_hint(store, CHECKPOINT_HINT, payload)
    bad = only(fresh(store).check(), "BAD_HINT")
    assert bad.key == CHECKPOINT_HINT and says in bad.message
    assert only(fresh(store).check(repair=True), "BAD_HINT").repaired
    assert json.loads(store.get(CHECKPOINT_HINT)) == rewritten
    assert fresh(store).check().clean


def test_a_checkpoint_hint_with_no_checkpoint_to_name_is_deleted(store: ObjectStore) -> None:
    set_hint(store, CHECKPOINT_HINT, b'{"version": 3}')
    bad = only(fresh(store).check(repair=True), "BAD_HINT")
    assert bad.repaired and bad.repair == "deleted it"
    assert not store.exists(CHECKPOINT_HINT)
    assert fresh(store).check().clean


# --- the result ----------------------------------------------------------------------------------


def test_the_result_as_json_and_lines(store: ObjectStore) -> None:
    db = fresh(store)
    store.delete(commit_key(3))
    set_hint(store, LATEST_HINT, b"garbage")
    result = check(db)
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {
        "uri",
        "clean",
        "oldest_version",
        "latest_version",
        "commits_checked",
        "checkpoints_checked",
        "files_checked",
        "repair_version",
        "findings",
    }
    assert data["clean"] is False and data["latest_version"] == LATEST
    assert [f["kind"] for f in data["findings"]] == ["GAP", "UNREADABLE", "BAD_HINT"]
    assert set(data["findings"][0]) == {
        "kind",
        "key",
        "message",
        "version",
        "table",
        "repairable",
        "repaired",
        "repair",
    }
    for finding in result.findings:
        line = finding.line()
        assert "\n" not in line and line.startswith(f"{finding.kind} {finding.key}: ")


def test_no_database_is_an_error() -> None:
    store = MemoryStore(f"empty-{uuid.uuid4().hex}")
    db = mere.connect(store)
    for key in [m.key for m in store.list("_log/")]:
        store.delete(key)
    with pytest.raises(mere.DatabaseNotFound):
        check(db)


def test_long_work_shows_progress(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    from collections.abc import Iterator

    check_module = importlib.import_module("mere.maintain.check")  # the name is the function

    shown: dict[str, list[int]] = {}

    @contextlib.contextmanager
    def record(description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        steps = shown.setdefault(description, [total or 0])
        yield steps.append

    monkeypatch.setattr(check_module, "progress", record)
    fresh(store).check()
    assert shown["checking the log"][0] == LATEST + 1
    assert sum(shown["checking the log"][1:]) == LATEST + 1
    assert shown["checking data files"][0] == LATEST - 1
    assert sum(shown["checking data files"][1:]) == LATEST - 1


def test_a_damaged_inlined_file_is_found(store: ObjectStore) -> None:
    """Its bytes are in a commit: same length, one byte changed, so only decoding tells."""
    db = fresh(store)
    db.set_properties({"inlineLimit": "65536"})
    version = db.table("t").append([{"x": 42}])
    lines = [json.loads(line) for line in store.get(commit_key(version)).splitlines()]
    [add] = [line["add"] for line in lines if "add" in line]
    raw = bytearray(base64.b64decode(add["inline"]))
    raw[len(raw) // 2] ^= 0xFF
    add["inline"] = base64.b64encode(bytes(raw)).decode()
    replace_object(
        store, commit_key(version), "".join(json.dumps(x) + "\n" for x in lines).encode()
    )
    with pytest.raises(
        mere.CorruptDataFile, match=r"inlined data file .* \(its bytes are in the log\)"
    ):
        xs(store)
    bad = only(fresh(store).check(repair=True), "CORRUPT_INLINED")
    assert bad.table == "t" and bad.key.endswith(add["path"]) and not bad.repaired
    assert "does not decode" in bad.message and "backup" in (bad.repair or "")


def test_files_of_an_exports_source_are_checked_where_they_are(tmp_path: Path) -> None:
    """A minimal export's target names its source's files (format §11.6)."""
    source = mere.connect(tmp_path / "src")
    source.create_table("t", X)
    source.table("t").append([{"x": 1}])
    source.export(tmp_path / "out", mode="minimal", name="e")
    target = mere.connect(tmp_path / "out", create=False)
    assert target.check().clean and target.check().files_checked == 1
    source.drop_export("e")
    source.table("t").delete("x = 1")
    source.vacuum(timedelta(0), force=True)
    result = target.check(repair=True)
    missing = only(result, "MISSING_FILE")
    assert missing.key.startswith("file://") and missing.table == "t"
    assert not missing.repairable and not missing.repaired


@pytest.mark.parametrize(
    ("before", "after", "value"),
    [
        (pa.decimal128(10, 2), pa.decimal128(20, 4), Decimal("1.50")),
        (pa.int32(), pa.int64(), 7),
        (pa.float32(), pa.float64(), 0.5),
    ],
)
def test_a_checkpoint_after_a_widened_column_agrees_with_the_log(
    db: mere.Database, before: pa.DataType, after: pa.DataType, value: object
) -> None:
    """The checkpoint holds statistics in the widened type ('1.5000'), the commit
    as written ('1.50'): the same values."""
    db.create_table("w", pa.schema([("id", pa.int64()), ("c", before)]))
    db.table("w").append(pa.table({"id": [1], "c": pa.array([value], before)}))
    with db.transaction() as tx:
        tx.alter_table("w").widen_column("c", after)
    db.checkpoint()
    assert db.check().clean
