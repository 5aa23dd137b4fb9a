"""Writers committing in a loop with no pause take turns: none starves (issue 17 item 5).

A writer that just won knows the state at its own version and can put its
next commit at once; a loser must first read the winner's commit. Without
pacing (mere.txn.pacing) a writer looping with no think time then wins every
race and the others never finish a commit. Here four processes append one row
at a time, each to its own table, through a local store whose log requests
take a few milliseconds (a network round trip: that is what makes the loser's
extra read cost as much as it does on a cloud store). Each writer stops once
it committed at or past a target version; progress is then read from the
log: every writer must own several of the versions up to the target.

Twice: racing for each version, as writers on different machines do (the
local store made with ``turns=False``), and queueing for turns, as writers
on one machine do (``LocalStore.turns``: an advisory file lock).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.storage import Fault, FaultyStore, LocalStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

WAIT = 60.0
WRITERS = 4
#: Versions the writers race for; a fair share is ROUNDS each. Enough that a
#: writer leading at the start (until its first probe pause, up to about a
#: second on a loaded machine: [1, 3, 1, 43] of 48 in one CI run) cannot take
#: them all.
ROUNDS = 50
#: What each writer must get of them at least (without pacing: all to one writer).
AT_LEAST = 5
#: A log request's round trip (seconds).
ROUND_TRIP = 0.003
ROWS = pa.schema([pa.field("writer", pa.int64()), pa.field("n", pa.int64())])


def _store(db_path: str, turns: bool) -> FaultyStore:
    """The local store, with every request on the log slowed by a round trip."""
    store = FaultyStore(LocalStore(db_path, turns=turns))
    store.inject(Fault("*", "delay", match=r"^_log/", delay=ROUND_TRIP, times=None))
    return store


def _looping_writer(db_path: str, writer: int, target: int, turns: bool, barrier: Any) -> None:
    """Append one row at a time to table ``w<writer>`` until one lands at ``target`` or later."""
    db = mere.connect(_store(db_path, turns), create=False)
    table = db.table(f"w{writer}")
    table.schema  # noqa: B018  (read the log before the start)
    barrier.wait(WAIT)
    n = 0
    while table.append([{"writer": writer, "n": n}]) < target:
        n += 1


@pytest.mark.parametrize(
    "turns", [pytest.param(False, id="racing"), pytest.param(True, id="turns")]
)
def test_writers_looping_without_pause_each_get_turns(
    turns: bool, db_path: Path, processes: Any
) -> None:
    db = mere.connect(db_path)
    for w in range(WRITERS):
        db.create_table(f"w{w}", ROWS)
    start = db.version
    target = start + WRITERS * ROUNDS
    barrier = processes.context.Barrier(WRITERS)
    for w in range(WRITERS):
        processes.start(
            _looping_writer, str(db_path), w, target, turns, barrier, name=f"writer {w}"
        )
    processes.join(timeout=2 * WAIT)

    fresh = mere.connect(db_path, create=False)
    # Each version up to the target is one writer's one-row append to its own
    # table: the rows of each table at the target are that writer's versions.
    snap = fresh.snapshot(target)
    per_writer = [snap.table(f"w{w}").scan().num_rows for w in range(WRITERS)]
    assert sum(per_writer) == WRITERS * ROUNDS
    assert min(per_writer) >= AT_LEAST, f"commits per writer up to the target: {per_writer}"
