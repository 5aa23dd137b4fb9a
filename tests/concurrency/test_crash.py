"""Crash safety: writers killed at random moments, and crashes at precise points of a commit.

Each writer loops over multi-table transactions: it appends one unique id to
table ``a`` *and* to table ``b``, and every third transaction also creates a
table named after the id and appends the id to it, all in ONE transaction.
After each successful commit it acknowledges ``(id, version)`` durably
(append, flush, fsync). Checkpoints are due every 5 commits, so crashes also
hit checkpoint writing.

Two ways to crash:

* **SIGKILL** (``test_writers_killed_at_random_moments...``): rounds of three
  writer processes, each killed with SIGKILL 0.05-0.6 s after it started
  committing -- before, during or after any step of a commit.
* **Simulated crashes at exact points** (``test_a_crash_at_...``): a writer on
  a :class:`~mere.storage.FaultyStore` dies (``SimulatedCrash``, then
  ``os._exit``) just before or just after its commit file lands, before the
  latest-version hint, around the checkpoint and its hint, or after writing a
  data file but before committing.

Afterwards, the invariants users are promised (DESIGN.md, "What users can
count on") must hold:

* every acknowledged commit is there: its id first appears at the version the
  writer was told, and stays in every later version;
* every version 0..latest opens, and in each one ``a`` and ``b`` hold exactly
  the same ids, with no duplicate, and the tables created alongside exist
  exactly when their id does, holding just that id: nothing partial is ever
  visible;
* each version reads the same whether rebuilt from the newest checkpoint at or
  below it or replayed commit by commit: checkpoints written by writers that
  died are sound;
* the database still takes commits: a new transaction commits at latest + 1.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crash_helpers import (
    IDS,
    WAIT,
    check_acknowledged_commits_survived,
    check_checkpoints_agree_with_the_log,
    commit_until_crash,
    commit_until_killed,
    create_database,
    kill,
    read_acks,
    reap_killed,
)

import mere
from mere.log.log import HINT_INTERVAL
from mere.storage import Fault, FaultyStore, LocalStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals"),
]

ROUNDS = 8
WRITERS = 3
KILL_AFTER = (0.05, 0.6)  # seconds after the writers are ready
CHECKPOINT_INTERVAL = 5

COMMIT_FILE = r"^_log/\d{20}\.json$"
CHECKPOINT_FILE = r"^_log/\d{20}\.checkpoint\.parquet$"
DATA_FILE = r"^tables/"


def own_table(ident: str) -> str | None:
    """The table created along with ``ident``, for every third id of a writer; else None."""
    return f"t_{ident}" if int(ident.rsplit("n", 1)[1]) % 3 == 0 else None


# --- the writers (module level, so the fork server can import them) -------------------


def _commit_one(db: mere.Database, ident: str) -> int:
    """Append ``ident`` to ``a`` and ``b`` (and maybe to a new table of its own), atomically."""
    tx = db.transaction()
    rows = [{"id": ident}]
    tx.table("a").append(rows)
    tx.table("b").append(rows)
    table = own_table(ident)
    if table is not None:
        tx.create_table(table, IDS)
        tx.table(table).append(rows)
    return tx.commit()


def _killable_writer(db_path: str, prefix: str, ack_path: str, ready: Any) -> None:
    """Commit ids ``<prefix>n0, <prefix>n1, ...`` until killed, acknowledging each."""
    commit_until_killed(mere.connect(db_path), _commit_one, prefix, ack_path, ready)


def _crashing_writer(
    db_path: str, prefix: str, ack_path: str, crash_path: str, fault: dict[str, Any]
) -> None:
    """Like the killable writer, on a store that crashes at the injected fault.

    On the crash it records the id in flight, then exits at once (no cleanup,
    as a process that died); it gives up after 20 commits if the fault never fired.
    """
    db = mere.connect(FaultyStore(LocalStore(db_path), [Fault(**fault)]))
    commit_until_crash(db, _commit_one, prefix, ack_path, crash_path, 20)


# --- reading the outcome -----------------------------------------------------------------


@dataclass
class Replay:
    """What the log holds: when each id first appeared, and the latest version."""

    first_seen: dict[str, int]
    latest: int


def table_files(snapshot: mere.Snapshot) -> dict[str, list[str]]:
    """Every table's data file paths at a snapshot."""
    return {name: sorted(f.path for f in snapshot.table(name).files) for name in snapshot.tables()}


def check_every_version(db_path: Path, data_files: Any) -> Replay:
    """Open every version, oldest first, and check that each one is whole.

    Fails naming the first version where ``a`` and ``b`` disagree, an id is
    duplicated or vanishes, or a table created with an id is missing, early,
    or holds anything but its id.
    """
    latest = mere.connect(db_path, create=False).version
    db = mere.connect(db_path, create=False)  # nothing cached: each version replays one commit
    first_seen: dict[str, int] = {}
    before: set[str] = set()
    assert db.snapshot(0).tables() == [], "version 0 only creates the database"
    for version in range(1, latest + 1):
        snapshot = db.snapshot(version)
        ids_a = data_files.column(snapshot.table("a"), "id")
        ids_b = data_files.column(snapshot.table("b"), "id")
        assert len(ids_a) == len(set(ids_a)), f"duplicate ids in a at version {version}"
        assert len(ids_b) == len(set(ids_b)), f"duplicate ids in b at version {version}"
        now = set(ids_a)
        assert now == set(ids_b), f"a and b differ at version {version}: {now ^ set(ids_b)}"
        assert before <= now, f"ids vanished at version {version}: {before - now}"
        owned = {own_table(i): i for i in now if own_table(i) is not None}
        assert set(snapshot.tables()) - {"a", "b"} == set(owned), f"tables at {version}"
        for ident in now - before:
            first_seen[ident] = version
            if own_table(ident) is not None:
                table = snapshot.table(own_table(ident))
                assert data_files.column(table, "id") == [ident], (version, ident)
        before = now
    # The file-by-file reading above against the library's own scan, at the latest version.
    final = db.snapshot(latest)
    for table in final.tables():
        ids = final.table(table).scan().column("id").to_pylist()
        assert sorted(ids) == sorted(before if table in ("a", "b") else [table[2:]]), table
    return Replay(first_seen, latest)


def check_still_takes_commits(db_path: Path, latest: int) -> None:
    """A new client commits at latest + 1, and sees its own commit."""
    db = mere.connect(db_path, create=False)
    assert db.version == latest
    assert _commit_one(db, "aftern1") == latest + 1
    assert "aftern1" in db.snapshot().table("b").scan().column("id").to_pylist()


def what_the_crash_left(db_path: Path) -> set[str]:
    """The traces of an interrupted commit in the store (docs/format.md §1, §8).

    * "stale latest hint": ``_log/_latest`` is behind the latest version that
      refreshes it (a multiple of ``HINT_INTERVAL``, docs/format.md §3);
    * "missing checkpoint": no checkpoint at the latest version, which is due one;
    * "stale checkpoint hint": the latest checkpoint is not named by its hint;
    * "orphan data files": data files that no version references;
    * "temp files": a create-only write interrupted half way (never listed).
    """
    latest = mere.connect(db_path, create=False).version
    db = mere.connect(db_path, create=False)  # nothing cached: each version replays one commit
    log = db_path / "_log"

    def hint(name: str) -> int:
        path = log / name
        return json.loads(path.read_text())["version"] if path.exists() else -1

    referenced = set()
    for version in range(1, latest + 1):
        snapshot = db.snapshot(version)
        for name in snapshot.tables():
            table = snapshot.table(name)
            referenced.update(f"tables/{table.id}/{f.path}" for f in table.files)
    on_disk = [p.relative_to(db_path).as_posix() for p in db_path.rglob("*") if p.is_file()]
    checkpoints = sorted(int(p.name[:20]) for p in log.glob("*.checkpoint.parquet"))
    left = set()
    if hint("_latest") < latest - latest % HINT_INTERVAL:
        left.add("stale latest hint")
    if latest % CHECKPOINT_INTERVAL == 0 and latest not in checkpoints:
        left.add("missing checkpoint")
    if checkpoints and hint("_last_checkpoint") < checkpoints[-1]:
        left.add("stale checkpoint hint")
    if any(
        k.startswith("tables/") and "/.mere-tmp-" not in k and k not in referenced for k in on_disk
    ):
        left.add("orphan data files")
    if any("/.mere-tmp-" in k for k in on_disk):
        left.add("temp files")
    return left


# --- SIGKILL at random moments ------------------------------------------------------------


def test_writers_killed_at_random_moments_leave_every_version_whole(
    db_path: Path, tmp_path: Path, processes: Any, data_files: Any
) -> None:
    create_database(db_path, CHECKPOINT_INTERVAL)
    rng = random.Random(7)
    ack_paths = []
    for round_ in range(ROUNDS):
        writers = []
        readies = []
        for w in range(WRITERS):
            ready = processes.context.Event()
            ack_paths.append(tmp_path / f"acks-r{round_}w{w}.txt")
            writers.append(
                processes.start(
                    _killable_writer,
                    str(db_path),
                    f"r{round_}w{w}",
                    str(ack_paths[-1]),
                    ready,
                    name=f"round {round_} writer {w}",
                )
            )
            readies.append(ready)
        assert all(ready.wait(WAIT) for ready in readies), "a writer never got ready"
        started = time.monotonic()
        kill_times = [rng.uniform(*KILL_AFTER) for _ in writers]
        for when, writer in sorted(zip(kill_times, writers, strict=True), key=lambda p: p[0]):
            time.sleep(max(0.0, started + when - time.monotonic()))
            kill(writer)
        reap_killed(writers)

    left = what_the_crash_left(db_path)
    acks = read_acks(ack_paths)
    replay = check_every_version(db_path, data_files)
    check_checkpoints_agree_with_the_log(db_path, replay.latest, CHECKPOINT_INTERVAL, table_files)
    check_acknowledged_commits_survived(acks, replay.first_seen)
    check_still_takes_commits(db_path, replay.latest)
    unacknowledged = set(replay.first_seen) - set(acks)
    print(
        f"\n{ROUNDS} rounds x {WRITERS} writers killed: {replay.latest} versions, "
        f"{len(acks)} acknowledged commits, {len(unacknowledged)} landed unacknowledged; "
        f"left behind: {sorted(left)}"
    )
    assert acks, "the writers should have committed something before dying"


# --- simulated crashes at exact points --------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "lands", "left"),
    [
        pytest.param(
            {"op": "put_if_absent", "kind": "crash_before", "match": COMMIT_FILE, "after": 2},
            False,
            {"orphan data files"},
            id="just-before-the-commit-lands",
        ),
        pytest.param(
            # The writer's 7th commit is version 8, one that refreshes the hint.
            {"op": "put_if_absent", "kind": "crash_after", "match": COMMIT_FILE, "after": 6},
            True,
            {"stale latest hint"},
            id="just-after-the-commit-lands",
        ),
        pytest.param(
            {"op": "put", "kind": "crash_before", "match": r"^_log/_latest$", "after": 0},
            True,
            {"stale latest hint"},
            id="before-the-latest-hint",
        ),
        pytest.param(
            {"op": "put_if_absent", "kind": "crash_before", "match": CHECKPOINT_FILE},
            True,
            {"missing checkpoint"},
            id="before-the-checkpoint",
        ),
        pytest.param(
            {"op": "put_if_absent", "kind": "crash_after", "match": CHECKPOINT_FILE},
            True,
            {"stale checkpoint hint"},
            id="after-the-checkpoint-before-its-hint",
        ),
        pytest.param(
            {"op": "put_if_absent", "kind": "crash_after", "match": DATA_FILE, "after": 5},
            False,
            {"orphan data files"},
            id="after-a-data-file-before-the-commit",
        ),
    ],
)
def test_a_crash_at_an_exact_point_of_a_commit_leaves_every_version_whole(
    fault: dict[str, Any],
    lands: bool,
    left: set[str],
    db_path: Path,
    tmp_path: Path,
    processes: Any,
    data_files: Any,
) -> None:
    create_database(db_path, CHECKPOINT_INTERVAL)
    acks, crashed = tmp_path / "acks.txt", tmp_path / "crashed.txt"
    writer = processes.start(
        _crashing_writer, str(db_path), "c", str(acks), str(crashed), fault, name="crashing"
    )
    processes.join([writer])
    assert crashed.exists(), f"the fault {fault} never fired"
    in_flight = crashed.read_text()
    assert what_the_crash_left(db_path) == left  # the crash hit the point it was aimed at

    acknowledged = read_acks([acks])
    replay = check_every_version(db_path, data_files)
    check_checkpoints_agree_with_the_log(db_path, replay.latest, CHECKPOINT_INTERVAL, table_files)
    check_acknowledged_commits_survived(acknowledged, replay.first_seen)
    last_acknowledged = max(acknowledged.values())
    if lands:
        assert replay.first_seen.get(in_flight) == replay.latest == last_acknowledged + 1
    else:
        assert in_flight not in replay.first_seen
        assert replay.latest == last_acknowledged
    check_still_takes_commits(db_path, replay.latest)
