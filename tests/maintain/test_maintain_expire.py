"""Expiry of log entries, time travel after it, checkpoints on demand, and the history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from maintain_helpers import EVENTS, events, ids_of, wait_a_little

import mere
from mere.log.keys import (
    LATEST_HINT,
    LOG_PREFIX,
    checkpoint_key,
    commit_key,
    parse_checkpoint_part_key,
    parse_log_key,
)
from mere.log.log import Log
from mere.maintain import RetentionTooShort, expire, parse_duration
from mere.storage import MemoryStore

HOUR = timedelta(hours=1)


def build(db: mere.Database, versions: int) -> dict[int, float]:
    """Commit appends up to ``versions``; return per version a moment (s) before the next commit.

    The moments come from the commit timestamps in the log, not from the wall clock the
    test reads, so a clock step on the machine cannot put a moment on the wrong side of
    a commit (CI once saw version 9 committed "before" a moment read after version 8).
    """
    db.create_table("events", EVENTS)
    n = 0
    while db.version < versions:
        db.table("events").append(events([n]))
        n += 1
        wait_a_little()
    stamps = [db.log.commit_timestamp(v) for v in range(versions + 1)]
    moments = {v: (stamps[v] + stamps[v + 1]) / 2000 for v in range(versions)}
    moments[versions] = stamps[versions] / 1000 + 0.001
    return moments


def log_versions(db: mere.Database) -> tuple[list[int], list[int]]:
    commits, checkpoints = [], []
    for meta in db.store.list(LOG_PREFIX):
        parsed = parse_log_key(meta.key)
        if parsed:
            (commits if parsed[1] == "commit" else checkpoints).append(parsed[0])
    return commits, checkpoints


def test_expire_keeps_every_retained_version_readable(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=4)
    times = build(db, 12)
    expected = {v: ids_of(db.snapshot(v).table("events")) for v in range(2, 13)}
    assert log_versions(db)[1] == [4, 8, 12]

    # The cutoff falls after version 6's commit and before version 7's.
    result = expire(db, HOUR, now=times[6] + HOUR.total_seconds())

    assert result.oldest_version == 6 and result.latest_version == 12
    assert result.checkpoint_written == 6
    assert (result.commits_deleted, result.checkpoints_deleted) == (6, 1)
    parts = [k for k in result.keys if parse_checkpoint_part_key(k) is not None]
    assert {parse_checkpoint_part_key(k) for k in parts} == {4}  # the manifest's, after it
    assert sorted(set(result.keys) - set(parts)) == sorted(
        [commit_key(v) for v in range(6)] + [checkpoint_key(4)]
    )
    commits, checkpoints = log_versions(db)
    assert commits == list(range(6, 13)) and checkpoints == [6, 8, 12]

    fresh = mere.connect(db_uri, create=False)
    assert fresh.version == 12
    for version in range(6, 13):
        assert ids_of(fresh.snapshot(version).table("events")) == expected[version]
    assert fresh.log.oldest_version() == 6
    for version in (0, 3, 5):
        with pytest.raises(mere.VersionNotFound, match="oldest readable version is 6"):
            mere.connect(db_uri, create=False).snapshot(version)
    # Time travel by timestamp: inside the retained range, and before it.
    moment = datetime.fromtimestamp(times[8], tz=UTC)
    assert fresh.snapshot(timestamp=moment).version == 8
    with pytest.raises(mere.VersionNotFound, match="oldest readable version is 6"):
        fresh.snapshot(timestamp=datetime.fromtimestamp(times[2], tz=UTC))
    # The history starts at the oldest readable version.
    assert [e["version"] for e in fresh.history()] == list(range(12, 5, -1))
    assert [e["version"] for e in fresh.history(3)] == [12, 11, 10]
    # The database takes commits afterwards, and a later client replays them.
    fresh.table("events").append(events([100]))
    later = mere.connect(db_uri, create=False)
    assert ids_of(later.table("events")) == [*expected[12], 100]


def test_expire_everything_but_the_latest(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=100)
    build(db, 5)
    rows = ids_of(db.table("events"))
    result = expire(db, timedelta(0), force=True)
    assert result.oldest_version == 5 and result.checkpoint_written == 5
    assert log_versions(db) == ([5], [5])
    fresh = mere.connect(db_uri, create=False)
    assert fresh.version == 5 and ids_of(fresh.table("events")) == rows
    with pytest.raises(mere.VersionNotFound, match="oldest readable version is 5"):
        fresh.snapshot(4)
    # Expiring again changes nothing.
    again = expire(db, timedelta(0), force=True)
    assert again.commits_deleted == 0 and again.checkpoint_written is None


def test_expiring_the_version_the_hint_names_moves_the_hint(db_uri: str) -> None:
    """Readers would list the log until one rewrote it, and check called it damaged."""
    db = mere.connect(db_uri, checkpoint_interval=100)
    build(db, 9)  # the writer of version 8 wrote the hint
    assert Log(db.store)._read_hint(LATEST_HINT) == 8
    expire(db, timedelta(0), force=True)
    assert Log(db.store)._read_hint(LATEST_HINT) == db.version
    assert db.check().clean


def test_dry_run_deletes_and_writes_nothing(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=100)
    build(db, 4)
    before = log_versions(db)
    result = db.expire(timedelta(0), dry_run=True, force=True)
    assert result.dry_run and result.commits_deleted == 4 and result.checkpoint_written == 4
    assert log_versions(db) == before


def test_expire_refuses_a_retention_below_the_minimum(db_uri: str) -> None:
    db = mere.connect(db_uri)
    build(db, 2)
    with pytest.raises(RetentionTooShort, match="refusing to expire"):
        db.expire(timedelta(minutes=10))
    assert db.expire().commits_deleted == 0  # 30 days: nothing is that old


def test_a_crash_in_the_middle_of_expiry_leaves_a_readable_log(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=3)
    build(db, 10)
    expected = {v: ids_of(db.snapshot(v).table("events")) for v in range(3, 11)}
    # As if expiry to version 7 died after deleting commits 0-4 (checkpoints 3, 6 remain).
    db.checkpoint()
    for version in range(5):
        db.store.delete(commit_key(version))
    fresh = mere.connect(db_uri, create=False)
    assert fresh.log.oldest_version() == 6
    for version in range(6, 11):
        assert ids_of(fresh.snapshot(version).table("events")) == expected[version]
    with pytest.raises(mere.VersionNotFound, match="oldest readable version is 6"):
        fresh.snapshot(4)  # checkpoint 3 is there, commit 4 is not
    # Finishing the expiry later works.
    result = expire(db, timedelta(0), force=True)
    assert result.oldest_version == 10


def test_checkpoint_on_demand(db_uri: str) -> None:
    db = mere.connect(db_uri, checkpoint_interval=1000)
    build(db, 6)
    assert log_versions(db)[1] == []
    assert db.checkpoint() == 6
    assert db.checkpoint() == 6  # create-only: the existing one is kept
    assert log_versions(db)[1] == [6]
    for version in range(6):
        db.store.delete(commit_key(version))
    fresh = mere.connect(db_uri, create=False)
    assert ids_of(fresh.table("events")) == list(range(5))


def test_history_entries(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    with db.transaction() as tx:
        tx.table("events").append(events([1, 2, 3]))
        tx.set_app_transaction("pipeline", 7)
    db.table("events").delete("id = 2")
    newest, append, create, genesis = db.history()
    assert [e["version"] for e in (newest, append, create, genesis)] == [3, 2, 1, 0]
    assert append["operation"] == "APPEND" and append["rows_added"] == 3
    assert append["files_added"] == 1 and append["bytes_added"] > 0
    assert append["app_transactions"] == {"pipeline": 7}
    assert append["blind_append"] is True and append["tables"] == ["events"]
    assert newest["rows_removed"] == 3 and newest["rows_added"] == 2
    assert newest["bytes_removed"] > 0 and newest["isolation"] == "write_serializable"
    assert newest["read_version"] == 2 and newest["blind_append"] is False
    assert set(genesis) >= {
        "version",
        "timestamp",
        "operation",
        "parameters",
        "metrics",
        "isolation",
        "read_version",
        "commit_id",
    }
    with pytest.raises(ValueError):
        db.history(0)


def test_oldest_version_of_a_fresh_and_of_no_database() -> None:
    assert mere.connect(MemoryStore()).log.oldest_version() == 0
    assert Log(MemoryStore()).oldest_version() is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("90s", 90),
        ("15m", 900),
        ("1h30m", 5400),
        ("7d", 604800),
        ("2w", 1209600),
        ("500ms", 0.5),
        ("1.5h", 5400),
        ("1h 30m", 5400),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "soon", "1y", "-1h", "h", "99999999999999w"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_handle_that_read_before_an_expiry_reads_and_writes_after_it(db_uri: str) -> None:
    """Its cached state was replayed forward over expired commits: VersionNotFound for
    every retained version, and for appends, until the process opened the database again."""
    writer = mere.connect(db_uri, checkpoint_interval=100)
    times = build(writer, 7)
    idle = mere.connect(db_uri, create=False)
    assert ids_of(idle.snapshot(2).table("events")) == [0]  # cached: version 2
    expire(writer, 2 * HOUR, now=times[5] + 2 * 3600)  # an ordinary expiry, two hours on
    assert writer.log.oldest_version() == 5
    assert ids_of(idle.snapshot().table("events")) == list(range(6))
    assert ids_of(idle.snapshot(5).table("events")) == list(range(4))
    idle.table("events").append(events([99]))
    assert 99 in ids_of(writer.snapshot().table("events"))


def test_reading_a_tagged_island_by_number_leaves_the_handle_usable(db_uri: str) -> None:
    """A tag keeps its version readable below the oldest commit; reading it cached a state
    later versions could not be replayed from, and check() then called a healthy tag
    UNREADABLE."""
    db = mere.connect(db_uri, checkpoint_interval=100)
    times = build(db, 6)
    db.tag("old", 2)
    db.tag("recent", 6)
    expire(db, timedelta(0), force=True, now=times[5])
    assert db.log.oldest_version() == 5
    fresh = mere.connect(db_uri, create=False)
    assert ids_of(fresh.snapshot(2).table("events")) == [0]
    assert ids_of(fresh.snapshot(6).table("events")) == list(range(5))
    fresh.table("events").append(events([99]))
    checked = mere.connect(db_uri, create=False)
    assert checked.check().clean
    latest = fresh.version
    assert checked.version == latest
    assert mere.connect(db_uri, create=False).restore(version=2).version == latest + 1
    assert ids_of(fresh.snapshot().table("events")) == [0]
