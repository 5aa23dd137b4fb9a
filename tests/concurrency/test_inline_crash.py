"""Crash safety with inlined data files: writers killed in the middle of a flush.

The database inlines every small write (``inlineLimit``), checkpoints every
4 commits and flushes a table's inlined files once they pass 2,000 bytes (a
one-row file is about 450), so the checkpointing writer moves inlined rows
to data files every few commits: it uploads the files, then commits their
swap (docs/format.md §2.5). Writers append one unique id to tables ``a``
and ``b`` in one transaction and acknowledge ``(id, version)`` durably after
each commit, as test_crash.py's do.

Two ways to crash:

* **SIGKILL** (``test_writers_killed_at_random_moments_and_inside_flushes``):
  rounds of three writer processes. Two are killed 0.05-0.6 s after they
  start; the third is held right after one of its flush's uploads (its store
  signals the parent and waits) and killed there, between the flush's
  data-file uploads and its commit.
* **Simulated crashes at exact points of a flush** (``test_a_crash_inside_a_flush``):
  a writer on a store that raises ``SimulatedCrash`` after the flush's first
  upload, just before the flush's commit, or just after it lands.

Afterwards: every version opens with ``a`` and ``b`` equal and no id twice;
ids never vanish and a flush changes no id; every acknowledged id first
appears at its acknowledged version; checkpoints agree with the log;
``mere check`` is clean; the files a dead flush uploaded are referenced by no
version and a forced vacuum with retention 0 deletes exactly those; the
database still commits and flushes.
"""

from __future__ import annotations

import random
import re
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from crash_helpers import (
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
from mere.cli.main import cli
from mere.log.actions import AddFile
from mere.maintain.inline import flush_inlined, inlined_bytes
from mere.storage import FaultyStore, LocalStore, SimulatedCrash

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals"),
]

ROUNDS = 3
KILL_AFTER = (0.05, 0.6)  # seconds after the writers are ready
CHECKPOINT_INTERVAL = 4
FLUSH_BYTES = 2000
DATA_FILE = re.compile(r"^tables/[0-9a-f]{32}/.*\.parquet$")
COMMIT_FILE = re.compile(r"^_log/\d{20}\.json$")


# --- the writers (module level, so the fork server can import them) -------------------


class FlushTrap(FaultyStore):
    """A local store that stops a writer inside a flush of inlined files.

    With inlining on and one-row commits, the only data files a writer
    uploads are a flush's, so an upload is a flush under way. ``mode``:

    * ``"hold"``: after the ``at``-th upload (1-based) of the first flush,
      set ``signal`` and sleep until killed;
    * ``"crash-after-upload"``: raise SimulatedCrash after the first upload;
    * ``"crash-before-commit"``: raise SimulatedCrash instead of creating the
      commit file of a transaction that uploaded data files (the flush's);
    * ``"crash-after-commit"``: raise it just after that commit file lands.
    """

    def __init__(self, root: str, mode: str, at: int = 1, signal: Any = None) -> None:
        super().__init__(LocalStore(root))
        self.mode = mode
        self.at = at
        self.signal = signal
        self.uploads = 0  # data files uploaded since the last commit file

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        flush_commit = bool(COMMIT_FILE.match(key)) and self.uploads > 0
        if flush_commit and self.mode == "crash-before-commit":
            raise SimulatedCrash(f"before the flush's commit {key}")
        super().put_if_absent(key, data)
        if COMMIT_FILE.match(key):
            self.uploads = 0
            if flush_commit and self.mode == "crash-after-commit":
                raise SimulatedCrash(f"after the flush's commit {key}")
        elif DATA_FILE.match(key):
            self.uploads += 1
            if self.mode == "crash-after-upload":
                raise SimulatedCrash(f"after the flush's upload {key}")
            if self.mode == "hold" and self.uploads == self.at:
                self.signal.set()
                time.sleep(10 * WAIT)  # the parent kills us here


def _commit_one(db: mere.Database, ident: str) -> int:
    """Append ``ident`` to ``a`` and ``b`` atomically."""
    tx = db.transaction()
    tx.table("a").append([{"id": ident}])
    tx.table("b").append([{"id": ident}])
    return tx.commit()


def _writer(db_path: str, prefix: str, ack_path: str, ready: Any, hold: Any, at: int) -> None:
    """Commit ids ``<prefix>n0, <prefix>n1, ...`` until killed; with ``hold``, held in a flush."""
    db = mere.connect(FlushTrap(db_path, "hold" if hold is not None else "none", at, hold))
    commit_until_killed(db, _commit_one, prefix, ack_path, ready)


def _crashing_writer(db_path: str, ack_path: str, crash_path: str, mode: str) -> None:
    """Commit ids until the store crashes in a flush; record the id in flight and die."""
    commit_until_crash(
        mere.connect(FlushTrap(db_path, mode)), _commit_one, "c", ack_path, crash_path, 60
    )


# --- reading the outcome -----------------------------------------------------------------


@dataclass
class Replay:
    """What the log holds: when each id first appeared, the ids at the latest version,
    and every data file object some version references."""

    first_seen: dict[str, int]
    latest_ids: set[str]
    latest: int
    referenced: set[str]
    flushes: int


def check_every_version(db_path: Path, data_files: Any) -> Replay:
    """Open every version and check it is whole; a flush must leave the ids as they were."""
    db = mere.connect(db_path, create=False)
    latest = db.version
    operations = {e["version"]: e["operation"] for e in db.history()}
    first_seen: dict[str, int] = {}
    referenced: set[str] = set()
    before: set[str] = set()
    flushes = 0
    for version in range(1, latest + 1):
        snapshot = db.snapshot(version)
        if "a" not in snapshot.tables():
            continue
        ids_a = data_files.column(snapshot.table("a"), "id")
        ids_b = data_files.column(snapshot.table("b"), "id")
        now = set(ids_a)
        assert len(ids_a) == len(now) and len(ids_b) == len(set(ids_b)), f"duplicates at {version}"
        assert now == set(ids_b), f"a and b differ at version {version}: {now ^ set(ids_b)}"
        assert before <= now, f"ids vanished at version {version}: {before - now}"
        if operations[version] == "FLUSH INLINED":
            flushes += 1
            assert now == before, f"the flush at version {version} changed the ids"
        for ident in now - before:
            first_seen[ident] = version
        for name in ("a", "b"):
            table = snapshot.table(name)
            referenced.update(
                f"tables/{table.id}/{f.path}" for f in table.files if f.inline is None
            )
        before = now
    final = db.snapshot(latest)
    for name in ("a", "b"):  # the file-by-file reading against the library's own scan
        assert sorted(final.table(name).scan().column("id").to_pylist()) == sorted(before)
    return Replay(first_seen, before, latest, referenced, flushes)


def layout(snapshot: mere.Snapshot) -> dict[str, list[tuple[str, bool]]]:
    """Every table's files at a snapshot, and whether each is inlined."""
    files: dict[str, list[AddFile]] = {n: snapshot.table(n).files for n in snapshot.tables()}
    return {n: sorted((f.path, f.inline is not None) for f in fs) for n, fs in files.items()}


def stored_data_files(db_path: Path) -> set[str]:
    root = db_path / "tables"
    return {p.relative_to(db_path).as_posix() for p in root.rglob("*.parquet") if p.is_file()}


def check_clean_and_vacuumed(db_path: Path, replay: Replay) -> set[str]:
    """``mere check`` is clean; a forced vacuum deletes exactly the orphans; returns them."""
    out = CliRunner().invoke(cli, ["check", str(db_path)])
    assert out.exit_code == 0, out.output
    orphans = stored_data_files(db_path) - replay.referenced
    db = mere.connect(db_path, create=False)
    result = db.vacuum(timedelta(0), force=True)
    assert set(result.keys) == orphans
    assert stored_data_files(db_path) == replay.referenced  # a flush never removes an object
    return orphans


def check_still_works(db_path: Path, replay: Replay) -> None:
    """After the vacuum: the rows read, a new commit lands at latest + 1, a flush moves the rest."""
    db = mere.connect(db_path, create=False)
    assert set(db.table("a").scan().column("id").to_pylist()) == replay.latest_ids
    assert _commit_one(db, "aftern1") == replay.latest + 1
    # (When that commit was due to checkpoint, its writer may have flushed everything.)
    left = inlined_bytes(db.latest_state())
    flushed = flush_inlined(db, 0)
    if left:
        assert flushed is not None
    else:
        assert flushed is None and db.history(1)[0]["operation"] == "FLUSH INLINED"
    assert all(f.inline is None for f in db.snapshot().table("a").files)
    for name in ("a", "b"):
        ids = db.table(name).scan().column("id").to_pylist()
        assert sorted(ids) == sorted(replay.latest_ids | {"aftern1"})
    assert CliRunner().invoke(cli, ["check", str(db_path)]).exit_code == 0


def create_inlining_database(db_path: Path) -> None:
    db = create_database(db_path, CHECKPOINT_INTERVAL)
    db.set_properties({"inlineLimit": "65536", "inlineFlushBytes": str(FLUSH_BYTES)})


# --- SIGKILL at random moments and inside flushes ------------------------------------------


def test_writers_killed_at_random_moments_and_inside_flushes(
    db_path: Path, tmp_path: Path, processes: Any, data_files: Any
) -> None:
    create_inlining_database(db_path)
    rng = random.Random(11)
    ack_paths: list[Path] = []
    for round_ in range(ROUNDS):
        writers, readies = [], []
        hold = processes.context.Event()
        for w in range(3):
            ready = processes.context.Event()
            ack_paths.append(tmp_path / f"acks-r{round_}w{w}.txt")
            held = hold if w == 0 else None
            writers.append(
                processes.start(
                    _writer,
                    str(db_path),
                    f"r{round_}w{w}",
                    str(ack_paths[-1]),
                    ready,
                    held,
                    1,  # a flush of this unpartitioned table uploads one file
                    name=f"round {round_} writer {w}",
                )
            )
            readies.append(ready)
        assert all(ready.wait(WAIT) for ready in readies), "a writer never got ready"
        started = time.monotonic()
        for writer in writers[1:]:
            time.sleep(max(0.0, started + rng.uniform(*KILL_AFTER) - time.monotonic()))
            kill(writer)
        assert hold.wait(WAIT), "the held writer never flushed"
        kill(writers[0])  # between its flush's uploads and its commit
        reap_killed(writers)

    acks = read_acks(ack_paths)
    replay = check_every_version(db_path, data_files)
    check_checkpoints_agree_with_the_log(db_path, replay.latest, CHECKPOINT_INTERVAL, layout)
    check_acknowledged_commits_survived(acks, replay.first_seen)
    orphans = check_clean_and_vacuumed(db_path, replay)
    assert len(orphans) >= ROUNDS  # each held writer left its flush's uploads behind
    assert replay.flushes > 0
    check_still_works(db_path, replay)
    print(
        f"\n{ROUNDS} rounds: {replay.latest} versions, {replay.flushes} flushes, "
        f"{len(acks)} acknowledged, {len(orphans)} orphaned flush files vacuumed"
    )


# --- simulated crashes at exact points of a flush -------------------------------------------


@pytest.mark.parametrize(
    ("mode", "orphaned"),
    [
        ("crash-after-upload", True),
        ("crash-before-commit", True),
        ("crash-after-commit", False),
    ],
)
def test_a_crash_inside_a_flush(
    mode: str, orphaned: bool, db_path: Path, tmp_path: Path, processes: Any, data_files: Any
) -> None:
    create_inlining_database(db_path)
    acks, crashed = tmp_path / "acks.txt", tmp_path / "crashed.txt"
    writer = processes.start(
        _crashing_writer, str(db_path), str(acks), str(crashed), mode, name="crashing"
    )
    processes.join([writer])
    assert crashed.exists(), f"{mode} never happened"
    in_flight = crashed.read_text()

    acknowledged = read_acks([acks])
    replay = check_every_version(db_path, data_files)
    check_checkpoints_agree_with_the_log(db_path, replay.latest, CHECKPOINT_INTERVAL, layout)
    check_acknowledged_commits_survived(acknowledged, replay.first_seen)
    # The commit that made the checkpoint due landed before its writer started the flush.
    assert in_flight in replay.latest_ids and in_flight not in acknowledged
    assert replay.flushes == (1 if mode == "crash-after-commit" else 0)
    orphans = check_clean_and_vacuumed(db_path, replay)
    assert bool(orphans) == orphaned
    check_still_works(db_path, replay)
