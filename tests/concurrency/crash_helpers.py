"""What the crash tests share (test_crash.py, test_inline_crash.py): writers that
acknowledge each commit durably, killing them, and the checks run on what they left.

A writer commits ids ``<prefix>n0, <prefix>n1, ...``, each in one transaction
of its test's choosing (a ``commit`` function), and after each commit appends
``"<id> <version>"`` and a newline to its acknowledgement file, flushed and
fsynced: what a client told "your commit is in" may count on. A writer that
dies mid-line leaves a torn last line, which acknowledges nothing.

This is a plain module, not a conftest: the test modules import it by name
(pytest puts this folder on ``sys.path``, and child processes inherit it).
"""

from __future__ import annotations

import itertools
import multiprocessing.process
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

import mere
from mere.storage import SimulatedCrash

WAIT = 60.0  # upper bound for any single wait on a child process
IDS = pa.schema([pa.field("id", pa.string(), nullable=False)])

#: Commits one id in a transaction of the test's shape; returns the version it landed at.
Commit = Callable[[mere.Database, str], int]


def create_database(db_path: Path, checkpoint_interval: int) -> mere.Database:
    """A new database at ``db_path`` with the id tables ``a`` and ``b``."""
    db = mere.connect(db_path, checkpoint_interval=checkpoint_interval)
    with db.transaction() as tx:
        tx.create_table("a", IDS)
        tx.create_table("b", IDS)
    return db


# --- in the writer processes ------------------------------------------------------------


def acknowledge(ack: BinaryIO, ident: str, version: int) -> None:
    """Record a commit durably, as a client promised "your commit is in" would."""
    ack.write(f"{ident} {version}\n".encode())
    ack.flush()
    os.fsync(ack.fileno())


def commit_until_killed(
    db: mere.Database, commit: Commit, prefix: str, ack_path: str, ready: Any
) -> None:
    """Commit ids ``<prefix>n0, <prefix>n1, ...`` until killed, acknowledging each.

    Sets the event ``ready`` once the acknowledgement file is open.
    """
    with open(ack_path, "ab") as ack:
        ready.set()
        for n in itertools.count():
            ident = f"{prefix}n{n}"
            acknowledge(ack, ident, commit(db, ident))


def commit_until_crash(
    db: mere.Database, commit: Commit, prefix: str, ack_path: str, crash_path: str, limit: int
) -> None:
    """Like :func:`commit_until_killed`, on a store that raises ``SimulatedCrash``.

    On the crash it writes the id in flight to ``crash_path``, then exits at
    once (no cleanup, as a process that died); it gives up after ``limit``
    commits if the crash never came (the test then finds no ``crash_path``).
    """
    with open(ack_path, "ab") as ack:
        for n in range(limit):
            ident = f"{prefix}n{n}"
            try:
                version = commit(db, ident)
            except SimulatedCrash:
                Path(crash_path).write_text(ident)
                os._exit(0)
            acknowledge(ack, ident, version)


# --- in the test process ------------------------------------------------------------------


def kill(writer: multiprocessing.process.BaseProcess) -> None:
    """SIGKILL a writer that must still be running."""
    assert writer.is_alive(), f"{writer.name} died on its own ({writer.exitcode})"
    assert writer.pid is not None
    os.kill(writer.pid, signal.SIGKILL)


def reap_killed(writers: Iterable[multiprocessing.process.BaseProcess]) -> None:
    """Wait for killed writers to exit, and check that SIGKILL is what ended each."""
    for writer in writers:
        writer.join(WAIT)
        assert writer.exitcode == -signal.SIGKILL, (writer.name, writer.exitcode)


def read_acks(paths: list[Path]) -> dict[str, int]:
    """Acknowledged commits, id -> version (a torn last line is no acknowledgement)."""
    acks: dict[str, int] = {}
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines(keepends=True):
            if line.endswith("\n"):
                ident, version = line.split()
                acks[ident] = int(version)
    return acks


def check_acknowledged_commits_survived(acks: dict[str, int], first_seen: dict[str, int]) -> None:
    """Each acknowledged id first appeared at its acknowledged version (and never left).

    ``first_seen`` maps each id in the log to the first version that holds it.
    """
    wrong = {i: (v, first_seen.get(i)) for i, v in acks.items() if first_seen.get(i) != v}
    assert not wrong, f"acknowledged (id: (version, first seen at)) lost or moved: {wrong}"


def check_checkpoints_agree_with_the_log(
    db_path: Path, latest: int, interval: int, view: Callable[[mere.Snapshot], object]
) -> None:
    """Versions rebuilt from the newest checkpoint at or below them equal full replays.

    Checks each version where a checkpoint is due (every ``interval``): it
    loads that checkpoint if the writer lived to write it, else an older one
    plus some commits. ``view`` is what must agree (e.g. every table's files).
    """
    replayed = mere.connect(db_path, create=False)
    from_checkpoints = mere.connect(db_path, create=False)
    from_checkpoints.snapshot(latest)  # cached at the top: lower versions load a checkpoint
    for version in range(0, latest + 1, interval):
        expected = view(replayed.snapshot(version))  # replays up, one commit at a time
        assert view(from_checkpoints.snapshot(version)) == expected, version
