"""Writers on one machine take turns to commit (LocalStore.turns), and a retry is cheap.

Turns are an exclusive ``flock`` on ``_log/.mere-turns``: a committer takes
one, catches up with the log, puts the next version and gives it back, so
writers of one machine queue instead of losing races to one another. They
are advisory: a turn held too long (a stopped process) is waited for at most
``TURN_PATIENCE_SECONDS``, after which put-if-absent alone decides, as it
does between machines (and for a while the client takes only free turns). A
commit that does lose a race is encoded again only
when a winner's timestamp forces a later one.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.errors import InvalidKey
from mere.log.log import Log, PutOutcome
from mere.storage import LocalStore, MemoryStore
from mere.storage.base import Turns
from mere.storage.local import TURNS_FILE
from mere.txn import committer

KV = pa.schema([pa.field("k", pa.int64())])
WAIT = 60.0


def _in_thread(store: LocalStore, prefix: str) -> Turns:
    """The turns handle another thread of this process would use."""
    handles: list[Turns] = []
    thread = threading.Thread(target=lambda: handles.append(store.turns(prefix)))  # type: ignore[arg-type]
    thread.start()
    thread.join(WAIT)
    return handles[0]


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[LocalStore, Turns]]:
    """A database whose log turn another thread of this process holds."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", KV)
    store = db.log.store
    assert isinstance(store, LocalStore)
    other = _in_thread(store, "_log/")
    assert other.try_take()
    yield store, other
    other.give_back()


def test_threads_queue_for_a_turn(held: tuple[LocalStore, Turns]) -> None:
    store, other = held
    mine = store.turns("_log/")
    assert mine is not None and mine is not other
    assert not mine.try_take()
    other.give_back()
    assert mine.try_take()
    assert not other.try_take()
    mine.give_back()
    assert other.try_take()


def _hold_turn(root: str, ready: Any) -> None:
    turns = LocalStore(root).turns("_log/")
    assert turns is not None and turns.try_take()
    ready.set()
    signal.pause()  # until killed


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes")
def test_a_killed_holder_gives_its_turn_back(tmp_path: Path) -> None:
    root = str(tmp_path / "db")
    mere.connect(root).create_table("t", KV)
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    holder = context.Process(target=_hold_turn, args=(root, ready))
    holder.start()
    try:
        assert ready.wait(WAIT)
        turns = LocalStore(root).turns("_log/")
        assert turns is not None and not turns.try_take()
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # type: ignore[arg-type]
        holder.join(WAIT)
    assert turns.try_take()  # the kernel released the lock with the process


def test_a_commit_waits_out_a_stopped_holder_then_goes_on(
    held: tuple[LocalStore, Turns], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = held  # held by a thread that does nothing more: a stopped writer
    monkeypatch.setattr(committer, "TURN_PATIENCE_SECONDS", 0.2)
    db = mere.connect(store, create=False)
    version = db.table("t").append([{"k": 1}])
    assert version == db.version and db.table("t").scan().num_rows == 1
    # While the holder stays stopped, the next commits try once and do not wait.
    mine = store.turns("_log/")
    assert mine is not None
    tries = [0]
    try_take = mine.try_take

    def counting() -> bool:
        tries[0] += 1
        return try_take()

    monkeypatch.setattr(mine, "try_take", counting)
    db.table("t").append([{"k": 2}])
    assert tries[0] == 1 and db.table("t").scan().num_rows == 2


def _one_behind(target: Any) -> tuple[mere.Database, mere.Transaction, int]:
    """A transaction appending to table ``a``, and the version another client committed
    after it began (an append to table ``b``)."""
    db = mere.connect(target)
    db.create_table("a", KV)
    db.create_table("b", KV)
    tx = db.transaction()
    tx.table("a").append([{"k": 1}])
    theirs = mere.connect(target, create=False).table("b").append([{"k": 2}])
    return db, tx, theirs


def _put_outcomes(monkeypatch: pytest.MonkeyPatch) -> list[PutOutcome]:
    """The outcomes of the commit puts made from now on."""
    outcomes: list[PutOutcome] = []
    put_commit = Log.put_commit

    def counting(self: Log, version: int, data: bytes, commit_id: str) -> PutOutcome:
        outcomes.append(put_commit(self, version, data, commit_id))
        return outcomes[-1]

    monkeypatch.setattr(Log, "put_commit", counting)
    return outcomes


def test_a_commit_catches_up_inside_its_turn_instead_of_losing_a_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcomes = _put_outcomes(monkeypatch)
    db, tx, theirs = _one_behind(str(tmp_path / "db"))
    assert tx.commit() == theirs + 1
    assert PutOutcome.LOST not in outcomes
    assert db.table("a").scan().num_rows == 1 and db.table("b").scan().num_rows == 1


def _commit_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The commit files the store is asked for from now on."""
    reads: list[str] = []
    get = LocalStore.get

    def counting(self: LocalStore, key: str) -> bytes:
        if key.endswith(".json"):
            reads.append(key)
        return get(self, key)

    monkeypatch.setattr(LocalStore, "get", counting)
    return reads


def test_a_writer_in_a_loop_puts_without_reading_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder notes the version it committed in the turns file; the next
    holder whose state is at that version has nothing to read forward."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", KV)
    db.table("t").append([{"k": 0}])
    reads = _commit_reads(monkeypatch)
    for k in range(1, 6):
        db.table("t").append([{"k": k}])
    assert reads == []
    store = db.log.store
    assert isinstance(store, LocalStore)
    noted = (Path(store.root) / "_log" / TURNS_FILE).read_bytes()
    assert int.from_bytes(noted, "little", signed=True) == db.version
    # Another client's commit in its turn: read forward once, then not again.
    theirs = mere.connect(str(tmp_path / "db"), create=False).table("t").append([{"k": 6}])
    reads.clear()  # the other client's own reads
    assert db.table("t").append([{"k": 7}]) == theirs + 1
    assert reads == [f"_log/{v:020d}.json" for v in (theirs, theirs + 1)]
    db.table("t").append([{"k": 8}])
    assert len(reads) == 2
    assert sorted(r["k"] for r in db.table("t").scan().to_pylist()) == list(range(9))


def test_a_commit_made_without_turns_costs_the_next_holder_one_lost_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The note knows nothing of a writer that does not take turns: the holder
    trusting it loses the race to that writer's version, reads it back and
    commits after it."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", KV)
    db.table("t").append([{"k": 0}])
    racer = mere.connect(LocalStore(tmp_path / "db", turns=False), create=False)
    theirs = racer.table("t").append([{"k": 1}])
    outcomes = _put_outcomes(monkeypatch)
    assert db.table("t").append([{"k": 2}]) == theirs + 1
    assert outcomes == [PutOutcome.LOST, PutOutcome.WON]
    assert sorted(r["k"] for r in db.table("t").scan().to_pylist()) == [0, 1, 2]


@pytest.mark.parametrize("content", [b"", b"\x01\x02", b"\xff" * 8])
def test_a_missing_or_foreign_note_means_reading_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes
) -> None:
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", KV)
    store = db.log.store
    assert isinstance(store, LocalStore)
    (Path(store.root) / "_log" / TURNS_FILE).write_bytes(content)
    reads = _commit_reads(monkeypatch)
    version = db.table("t").append([{"k": 1}])
    assert reads == [f"_log/{version:020d}.json"]  # the version it then put
    assert db.table("t").scan().num_rows == 1


def test_a_store_without_turns_races(tmp_path: Path) -> None:
    assert LocalStore(tmp_path, turns=False).turns("_log/") is None
    assert MemoryStore().turns("_log/") is None


def test_the_turns_file_is_no_object(held: tuple[LocalStore, Turns]) -> None:
    store, _ = held
    assert (Path(store.root) / "_log" / TURNS_FILE).is_file()
    assert all(TURNS_FILE not in meta.key for meta in store.list(""))
    assert store.remove_temp_files(older_than=0) == 0
    assert (Path(store.root) / "_log" / TURNS_FILE).is_file()
    for key in (f"_log/{TURNS_FILE}", f"tables/{TURNS_FILE}"):
        with pytest.raises(InvalidKey, match="reserved"):
            store.put_if_absent(key, b"x")


# --- a lost race's retry --------------------------------------------------------------


def _lose_one_race(monkeypatch: pytest.MonkeyPatch, now_ms: int | None) -> tuple[int, int, int]:
    """Commit once after another client took the next version; with the clock at ``now_ms``.

    Returns how often the commit was encoded, its timestamp and the winner's.
    """
    db, tx, theirs = _one_behind(MemoryStore())  # no turns: the race is lost
    encoded = [0]
    prepare = committer.prepare

    def counting(*args: Any) -> committer.Prepared:
        encoded[0] += 1
        return prepare(*args)

    monkeypatch.setattr(committer, "prepare", counting)
    if now_ms is not None:
        monkeypatch.setattr(committer.time, "time", lambda: now_ms / 1000)
    ours = tx.commit()
    assert ours == theirs + 1
    history = {e["version"]: e for e in db.history()}
    stamp = {v: db.log.read_commit(v).info.timestamp for v in (ours, theirs)}
    assert history[ours]["read_version"] == theirs - 1
    return encoded[0], stamp[ours], stamp[theirs]


def test_a_retry_puts_the_same_bytes_when_its_timestamp_still_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    later = 4_102_444_800_000  # 2100-01-01: after the winner's timestamp
    encoded, ours, theirs = _lose_one_race(monkeypatch, later)
    assert encoded == 1 and ours == later > theirs


def test_a_retry_is_encoded_again_when_a_winner_took_a_later_timestamp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    encoded, ours, theirs = _lose_one_race(monkeypatch, 1_000)  # a clock far behind the log
    assert encoded == 2 and ours == theirs + 1


def test_a_filesystem_without_flock_has_no_turns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mere.storage import local

    def unsupported(fd: int, operation: int) -> None:
        raise OSError(37, "No locks available")  # ENOLCK, as some network mounts answer

    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", KV)
    monkeypatch.setattr(local.fcntl, "flock", unsupported)
    store = LocalStore(tmp_path / "db")
    assert store.turns("_log/") is None
    before = db.version
    assert mere.connect(store, create=False).table("t").append([{"k": 1}]) == before + 1


@pytest.mark.parametrize(
    "turns", [pytest.param(True, id="turns"), pytest.param(False, id="racing")]
)
def test_a_commit_whose_directory_sync_fails_is_of_unknown_outcome(
    turns: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The link landed, so the commit is there; only its durability is in doubt. With
    # turns the fsync follows the turn (its failure must not delete the data file
    # under a landed commit); without, it is the put's own (the read-back finds our
    # commit, which must not make it count as durably won).
    from mere.storage import local

    root = tmp_path / "db"
    db = mere.connect(LocalStore(root, turns=turns))
    db.create_table("t", KV)
    before = db.version
    fsync_dir = local._fsync_dir

    def failing(path: str) -> None:
        if path.endswith("_log"):
            raise OSError(5, "Input/output error")
        fsync_dir(path)

    monkeypatch.setattr(local, "_fsync_dir", failing)
    with pytest.raises(mere.CommitOutcomeUnknown, match="may not be durable"):
        db.table("t").append([{"k": 7}])
    monkeypatch.undo()
    fresh = mere.connect(str(root), create=False)
    assert fresh.version == before + 1
    assert fresh.table("t").scan().column("k").to_pylist() == [7]
