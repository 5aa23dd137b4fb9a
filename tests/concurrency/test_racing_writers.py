"""Writers that must never conflict, racing for the same log from separate processes.

Two workloads where docs/format.md §9 promises no conflict at all, however
hard the writers race for each version:

* **Blind appends to one table** at ``write_serializable``: six processes each
  commit 30 single-row appends to the same table, stored as data files or
  inlined in the log (the database property ``inlineLimit``), taking turns
  (LocalStore.turns) or racing for each version as writers on different
  machines do. None may conflict; every row lands exactly once; the log has
  no gap, each of the 180 versions after the table's creation holding
  exactly the row its committer was told it committed; each commit read an
  older version (``readVersion < version``) and commit timestamps never go
  backwards.
* **Disjoint tables** at ``serializable``: four processes each create a table
  of their own, then repeatedly read it in full and append to it. Reads of
  one's own table are not invalidated by appends to other tables, nor are
  creations of other names, so again nothing may conflict, and each read
  sees exactly that writer's earlier rows.
* **Creating the database**: processes that all find no database at a path
  and create it at the same moment agree on one version 0, and then commit
  on top of it.
"""

from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.storage import LocalStore

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

WAIT = 60.0
ROWS = pa.schema([pa.field("writer", pa.int64()), pa.field("n", pa.int64())])


# --- the workers (module level, so the fork server can import them) -------------------


def _commit(tx: mere.Transaction) -> dict[str, Any]:
    """Commit and say how it went: {"version": v} or {"conflict": error class}."""
    try:
        return {"version": tx.commit()}
    except mere.ConflictError as exc:
        return {"conflict": type(exc).__name__, "message": str(exc)}


def _blind_appender(
    db_path: str, writer: int, count: int, out_path: str, barrier: Any, *, turns: bool = True
) -> None:
    """Commit ``count`` one-row appends to table ``t``; save each commit's outcome.

    ``turns=False``: race for each version as writers on different machines
    do, instead of taking turns as writers on one machine do (LocalStore.turns).
    """
    db = mere.connect(LocalStore(db_path, turns=turns))
    barrier.wait(WAIT)  # all writers start together
    outcomes = []
    for n in range(count):
        tx = db.transaction(isolation="write_serializable")
        tx.table("t").append([{"writer": writer, "n": n}])
        outcomes.append({"n": n, **_commit(tx)})
    Path(out_path).write_text(json.dumps(outcomes))


def _own_table_writer(db_path: str, writer: int, count: int, out_path: str, barrier: Any) -> None:
    """Create table ``w<writer>`` with a first row, then ``count - 1`` times read it and append.

    Saves each commit's outcome and how many rows each read returned.
    """
    db = mere.connect(db_path)
    barrier.wait(WAIT)  # all writers start together
    name = f"w{writer}"
    outcomes = []
    for n in range(count):
        tx = db.transaction(isolation="serializable")
        if n == 0:
            tx.create_table(name, ROWS)
            seen = 0
        else:
            seen = tx.table(name).scan().num_rows
        tx.table(name).append([{"writer": writer, "n": n}])
        outcomes.append({"n": n, "seen": seen, **_commit(tx)})
    Path(out_path).write_text(json.dumps(outcomes))


def _creator(db_path: str, writer: int, out_path: str, barrier: Any) -> None:
    """Connect to a database that does not exist yet (creating it), then create a table."""
    barrier.wait(WAIT)
    db = mere.connect(db_path)
    tx = db.transaction()
    tx.create_table(f"w{writer}", ROWS)
    Path(out_path).write_text(json.dumps(_commit(tx)))


def race(processes: Any, target: Any, db_path: Path, tmp_path: Path, writers: int, count: int):
    """Run ``writers`` copies of ``target``, released together; return their outcomes."""
    barrier = processes.context.Barrier(writers)
    outputs = [tmp_path / f"writer-{w}.json" for w in range(writers)]
    for w, out in enumerate(outputs):
        processes.start(target, str(db_path), w, count, str(out), barrier, name=f"writer {w}")
    processes.join(timeout=2 * WAIT)
    return [json.loads(out.read_text()) for out in outputs]


def check_log_is_gapless(db: mere.Database, first: int, last: int) -> list[dict[str, Any]]:
    """Versions ``0..last`` all exist; from ``first`` on each read an older version;
    timestamps never go backwards. Returns the history, oldest first."""
    history = list(reversed(db.history()))
    assert [entry["version"] for entry in history] == list(range(last + 1))
    for entry in history[first:]:
        assert entry["read_version"] < entry["version"], entry
    stamps = [datetime.fromisoformat(entry["timestamp"]) for entry in history]
    assert stamps == sorted(stamps)
    return history


# --- the tests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "turns", [pytest.param(True, id="turns"), pytest.param(False, id="racing")]
)
@pytest.mark.parametrize(
    "inline", [pytest.param(False, id="stored"), pytest.param(True, id="inlined")]
)
def test_blind_appends_from_many_processes_never_conflict(
    inline: bool, turns: bool, db_path: Path, tmp_path: Path, processes: Any, data_files: Any
) -> None:
    writers, count = 6, 30
    db = mere.connect(db_path)
    if inline:  # each one-row append carries its Parquet bytes in its commit (format §2.5)
        db.set_properties({"inlineLimit": "65536"})
    db.create_table("t", ROWS)
    base = db.version

    appender = functools.partial(_blind_appender, turns=turns)
    outcomes = race(processes, appender, db_path, tmp_path, writers, count)

    conflicts = [o for per_writer in outcomes for o in per_writer if "conflict" in o]
    assert not conflicts, f"blind appends conflicted: {conflicts[:3]}"
    committed_at = {o["version"]: (w, o["n"]) for w, ow in enumerate(outcomes) for o in ow}
    last = base + writers * count
    assert sorted(committed_at) == list(range(base + 1, last + 1)), "versions reused or lost"
    history = check_log_is_gapless(db, base, last)
    rebased = sum(e["read_version"] < e["version"] - 1 for e in history[base + 1 :])
    print(f"\n{writers * count} blind appends, {rebased} committed after losing a race")
    rows = db.table("t").scan()
    assert rows.num_rows == writers * count
    assert Counter(zip(rows["writer"].to_pylist(), rows["n"].to_pylist(), strict=True)) == Counter(
        committed_at.values()
    )
    assert all((f.inline is not None) == inline for f in db.snapshot().table("t").files)
    # Each version added exactly the row its committer was told it committed there.
    before: Counter[tuple[int, int]] = Counter()
    for version in range(base + 1, last + 1):
        table = db.snapshot(version).table("t")
        now = Counter((r["writer"], r["n"]) for r in data_files.rows(table))
        assert now - before == Counter([committed_at[version]]) and before <= now, version
        before = now


def test_transactions_on_disjoint_tables_never_conflict(
    db_path: Path, tmp_path: Path, processes: Any
) -> None:
    writers, count = 4, 30
    db = mere.connect(db_path)

    outcomes = race(processes, _own_table_writer, db_path, tmp_path, writers, count)

    conflicts = [o for per_writer in outcomes for o in per_writer if "conflict" in o]
    assert not conflicts, f"writers of disjoint tables conflicted: {conflicts[:3]}"
    versions = sorted(o["version"] for per_writer in outcomes for o in per_writer)
    assert versions == list(range(1, 1 + writers * count))
    check_log_is_gapless(db, 1, writers * count)
    assert db.tables() == [f"w{w}" for w in range(writers)]
    for w, per_writer in enumerate(outcomes):
        assert [o["seen"] for o in per_writer] == list(range(count)), f"writer {w} misread"
        rows = db.table(f"w{w}").scan()
        assert sorted(rows["n"].to_pylist()) == list(range(count))
        assert set(rows["writer"].to_pylist()) == {w}


def test_processes_creating_the_same_database_agree_on_one(
    db_path: Path, tmp_path: Path, processes: Any
) -> None:
    writers = 6
    barrier = processes.context.Barrier(writers)
    outputs = [tmp_path / f"writer-{w}.json" for w in range(writers)]
    for w, out in enumerate(outputs):
        processes.start(_creator, str(db_path), w, str(out), barrier, name=f"creator {w}")
    processes.join()

    outcomes = [json.loads(out.read_text()) for out in outputs]
    assert sorted(o["version"] for o in outcomes) == list(range(1, 1 + writers)), outcomes
    db = mere.connect(db_path, create=False)
    history = check_log_is_gapless(db, 1, writers)
    assert history[0]["operation"] == "CREATE DATABASE"
    assert db.tables() == [f"w{w}" for w in range(writers)]
