"""Isolation across OS processes: every read is checked against what the log says it must be.

Several worker processes run random transactions concurrently at one
isolation level, over two tables and a handful of keys (so they collide).
A transaction reads keys (``scan(filter="k = ?")``) and appends rows with
globally unique values, in random order, then commits. Each worker records
everything: the version the transaction read, what every read returned, what
it appended, and how the commit ended (its version, or the conflict raised).
The database is a local directory, or a container on Azurite (``az://``,
marked ``azure``): the same workers and checks, through the ``ObjectStore`` API.
At ``serializable`` the test runs a second time with small writes inlined in
the log (``inlineLimit``) and a small flush bound, so that checkpointing
workers move inlined files to data files while the others commit (a flush's
version changes no row and is no transaction's).

From the records alone the test then rebuilds what each key held at every
version -- the rows appended by transactions committed at or below it -- and
checks:

1. **Reads see their snapshot** (every level): a read returned exactly the
   rows of its key committed at or below the transaction's read version, plus
   the transaction's own earlier appends to that key; no more, no less, no
   duplicates. The expectation comes from the *other* transactions' records,
   never from re-reading the database, so a wrong snapshot cannot hide.
2. **The log is the committed transactions** (every level): one version per
   committed transaction, with no gap; at every version each table holds
   exactly the rows of the transactions committed at or below it, so each
   append appears exactly once, at the version its committer was told, and
   nothing of a conflicted transaction is ever visible. ``scan()`` is
   cross-checked against the expectation at sampled versions.
3. **Serializable in log order** (``serializable``): replaying the committed
   transactions one by one in commit order gives every read the same result:
   it equals the key at ``commit_version - 1`` plus the transaction's own
   writes.
4. **Write-serializable** (``write_serializable``): a committed transaction's
   reads were not overtaken by a concurrent commit that appended to a key it
   read *and was not a blind append* (it read something itself); concurrent
   blind appends may slip under its reads (docs/format.md §9). How many
   committed transactions are not serializable in log order (read skew) is
   reported, not asserted.
5. **Snapshot** (``snapshot``): appends never conflict, whatever was read.
6. **Conflicts are truthful**: the winning version appended, to the table
   the error names, rows whose keys may match a read of the loser, and below
   serializable it was not a blind append.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes"),
]

WORKERS = 4
TRANSACTIONS = 40  # per worker
TABLES = ("a", "b")
KEYS = range(4)
SEED = 20240611
WAIT = 60.0
#: With inlining: a table's inlined bytes past this are flushed at the next checkpoint
#: (a one- or two-row file is about 700 bytes), so flushes race the workers' commits.
INLINE_FLUSH_BYTES = 4096
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("val", pa.string(), nullable=False),
        pa.field("writer", pa.string(), nullable=False),
    ]
)


# --- the workers (module level, so the fork server can import them) ------------------


def _plan(rng: random.Random) -> list[dict[str, Any]]:
    """A random transaction: 2-4 reads and appends in random order, at least one append;
    or, one time in ten, 1-3 reads only."""
    if rng.random() < 0.1:
        return [
            {"op": "read", "table": rng.choice(TABLES), "key": rng.choice(KEYS)}
            for _ in range(rng.randint(1, 3))
        ]
    ops: list[dict[str, Any]] = []
    for _ in range(rng.randint(2, 4)):
        table, key = rng.choice(TABLES), rng.choice(KEYS)
        if rng.random() < 0.55:
            ops.append({"op": "read", "table": table, "key": key})
        else:
            ops.append({"op": "append", "table": table, "key": key, "count": rng.randint(1, 2)})
    if not any(op["op"] == "append" for op in ops):
        ops.append(
            {"op": "append", "table": rng.choice(TABLES), "key": rng.choice(KEYS), "count": 1}
        )
    return ops


def _run_transaction(
    db: mere.Database, isolation: str, plan: list[dict[str, Any]], worker: int, n: int
) -> dict[str, Any]:
    """Run one planned transaction and return its record (see the module docstring)."""
    tx = db.transaction(isolation=isolation)  # type: ignore[arg-type]
    record: dict[str, Any] = {"worker": worker, "n": n, "read_version": tx.read_version}
    done: list[dict[str, Any]] = []
    record["ops"] = done
    try:
        for i, op in enumerate(plan):
            table, key = op["table"], op["key"]
            if op["op"] == "read":
                result = tx.table(table).scan(columns=["val"], filter=f"k = {key}")
                done.append({**op, "vals": sorted(result.column("val").to_pylist())})
            else:
                vals = [f"{worker}-{n}-{i}-{j}" for j in range(op["count"])]
                rows = [{"k": key, "val": v, "writer": f"w{worker}"} for v in vals]
                tx.table(table).append(rows)
                done.append({"op": "append", "table": table, "key": key, "vals": vals})
        record["version"] = tx.commit()
        record["outcome"] = "committed"
    except mere.ConflictError as exc:
        record["outcome"] = "conflict"
        record["error"] = type(exc).__name__
        record["winning_version"] = exc.winning_version
        record["error_table"] = exc.table
    except Exception as exc:  # recorded, so that the test fails saying what happened
        tx.abort()
        record["outcome"] = "error"
        record["error"] = repr(exc)
    return record


def _worker(
    uri: str,
    storage_options: dict[str, Any] | None,
    isolation: str,
    worker: int,
    out_path: str,
    barrier: Any,
) -> None:
    """Run TRANSACTIONS random transactions (seeded per worker) and save their records."""
    rng = random.Random(f"{SEED}-{isolation}-{worker}")
    plans = [_plan(rng) for _ in range(TRANSACTIONS)]
    db = mere.connect(uri, storage_options=storage_options)
    barrier.wait(WAIT)  # all workers start together
    records = [_run_transaction(db, isolation, plan, worker, n) for n, plan in enumerate(plans)]
    Path(out_path).write_text(json.dumps(records))


# --- what the records say the database held ---------------------------------------------


@dataclass
class History:
    """Every transaction's record, and what they imply about each version."""

    records: list[dict[str, Any]]

    @cached_property
    def committed(self) -> dict[int, dict[str, Any]]:
        """Committed transactions that wrote, by commit version (read-only ones make none)."""
        return {
            r["version"]: r
            for r in self.records
            if r["outcome"] == "committed" and not is_read_only(r)
        }

    def outcomes(self) -> Counter[str]:
        return Counter(r["outcome"] for r in self.records)

    def rows_at(self, table: str, key: int, version: int) -> list[str]:
        """The vals of ``key`` in ``table`` at ``version``: appends committed at or below it."""
        return sorted(
            val
            for v, record in self.committed.items()
            if v <= version
            for op in record["ops"]
            if op["op"] == "append" and op["table"] == table and op["key"] == key
            for val in op["vals"]
        )

    def table_at(self, table: str, version: int) -> Counter[tuple[int, str]]:
        """Every (k, val) of ``table`` at ``version``."""
        return Counter((k, val) for k in KEYS for val in self.rows_at(table, k, version))

    @staticmethod
    def own_appends(record: dict[str, Any], before: int, table: str, key: int) -> list[str]:
        """What the transaction itself appended to ``key`` before its op number ``before``."""
        return [
            val
            for op in record["ops"][:before]
            if op["op"] == "append" and op["table"] == table and op["key"] == key
            for val in op["vals"]
        ]

    def expected_read(self, record: dict[str, Any], index: int, version: int) -> list[str]:
        """What read ``index`` of ``record`` returns on the state at ``version`` + own writes."""
        op = record["ops"][index]
        base = self.rows_at(op["table"], op["key"], version)
        return sorted(base + self.own_appends(record, index, op["table"], op["key"]))

    def reads_differing_from(self, record: dict[str, Any], version: int) -> list[str]:
        """The reads of ``record`` that the state at ``version`` (+ own writes) contradicts."""
        return [
            f"w{record['worker']} tx {record['n']} read {op['table']}.k={op['key']} "
            f"-> {op['vals']}, state at v{version} says {self.expected_read(record, i, version)}"
            for i, op in enumerate(record["ops"])
            if op["op"] == "read" and op["vals"] != self.expected_read(record, i, version)
        ]


def _run_workers(location: Any, isolation: str, processes: Any, tmp_path: Path) -> History:
    """Start the workers together, wait for them, and gather their records."""
    barrier = processes.context.Barrier(WORKERS)
    outputs = [tmp_path / f"worker-{w}.json" for w in range(WORKERS)]
    for w, out in enumerate(outputs):
        args = (location.uri, location.storage_options, isolation, w, str(out), barrier)
        processes.start(_worker, *args, name=f"worker-{w}")
    processes.join(timeout=3 * WAIT)
    return History([record for out in outputs for record in json.loads(out.read_text())])


# --- the checks ------------------------------------------------------------------------


def check_reads_see_their_snapshot(history: History) -> None:
    """Every read, committed or not, saw its read version plus its own writes."""
    wrong = [
        line
        for record in history.records
        for line in history.reads_differing_from(record, record["read_version"])
    ]
    assert not wrong, f"{len(wrong)} reads did not see their snapshot, e.g. {wrong[:5]}"


def check_log_is_the_committed_transactions(
    location: Any, history: History, setup_version: int
) -> list[int]:
    """One version per committed transaction, besides flushes of inlined files (which
    change no row); each version holds exactly what was committed. Returns the flushes."""
    latest = location.connect().version
    db = location.connect()  # nothing cached: each version replays one commit
    committed = history.committed
    writers = [r for r in history.records if r["outcome"] == "committed" and not is_read_only(r)]
    assert len(committed) == len(writers), "two commits reported the same version"
    flushes = [e["version"] for e in db.history() if e["operation"] == "FLUSH INLINED"]
    assert sorted([*committed, *flushes]) == list(range(setup_version + 1, latest + 1))
    for version, record in committed.items():
        assert setup_version <= record["read_version"] < version
    for record in history.records:
        if record["outcome"] == "committed" and is_read_only(record):
            assert record["version"] == record["read_version"], "a read-only commit wrote"
    for version in range(setup_version, latest + 1):
        snapshot = db.snapshot(version)
        for table in TABLES:
            rows = location.data_files.rows(snapshot.table(table))
            actual = Counter((row["k"], row["val"]) for row in rows)
            assert actual == history.table_at(table, version), (version, table)
    # The same through the library's own filtered scans, at some versions.
    rng = random.Random(SEED)
    sampled = {setup_version, latest, *rng.sample(range(setup_version, latest + 1), 8)}
    for version in sorted(sampled):
        snapshot = db.snapshot(version)
        for table in TABLES:
            for key in KEYS:
                vals = snapshot.table(table).scan(filter=f"k = {key}").column("val").to_pylist()
                assert sorted(vals) == history.rows_at(table, key, version), (version, table, key)
    return flushes


def is_read_only(record: dict[str, Any]) -> bool:
    return all(op["op"] == "read" for op in record["ops"])


def is_blind_append(record: dict[str, Any]) -> bool:
    """A transaction that only appended, reading nothing (``commitInfo.isBlindAppend``)."""
    return not any(op["op"] == "read" for op in record["ops"])


def check_conflicted_transactions_left_no_files(location: Any) -> None:
    """Every data file in the store belongs to the table at the latest version: a conflicted
    transaction deleted what it wrote (docs/format.md §8), and nothing else is left over."""
    latest = location.connect().snapshot()
    referenced = {
        f"tables/{latest.table(t).id}/{f.path}"
        for t in latest.tables()
        for f in latest.table(t).files
        if f.inline is None  # an inlined file is no object
    }
    stored = {meta.key for meta in location.store.list("tables/")}
    assert stored == referenced, f"left over: {sorted(stored - referenced)[:5]}"
    if location.local_root is not None:  # a listing hides temp files; the disk does not
        root = location.local_root
        on_disk = {p.relative_to(root).as_posix() for p in (root / "tables").rglob("*")}
        files = {key for key in on_disk if (root / key).is_file()}
        assert files == stored, f"not listed: {sorted(files - stored)[:5]}"


def not_serializable_in_log_order(history: History) -> list[str]:
    """The reads of committed transactions that serial execution in log order contradicts."""
    return [
        line
        for version, record in sorted(history.committed.items())
        for line in history.reads_differing_from(record, version - 1)
    ]


def reads_overtaken_by_non_blind_commits(history: History) -> list[str]:
    """Reads of committed transactions that a non-blind commit, between the transaction's
    read version and its commit, appended matching rows to: write_serializable forbids them."""
    overtaken = []
    for version, record in sorted(history.committed.items()):
        read = {(op["table"], op["key"]) for op in record["ops"] if op["op"] == "read"}
        for between in range(record["read_version"] + 1, version):
            other = history.committed[between]
            if is_blind_append(other):
                continue
            appended = {(op["table"], op["key"]) for op in other["ops"] if op["op"] == "append"}
            for table, key in sorted(read & appended):
                overtaken.append(
                    f"w{record['worker']} tx {record['n']} (v{record['read_version']}->v{version})"
                    f" read {table}.k={key}, which non-blind v{between} appended to"
                )
    return overtaken


def check_conflicts_are_truthful(history: History, isolation: str, latest: int) -> None:
    """A conflict names a later commit that appended, to the named table, keys the loser read
    (and that was no blind append, below serializable)."""
    committed = history.committed
    for record in history.records:
        if record["outcome"] != "conflict":
            continue
        assert record["error"] == "ConcurrentAppend", record
        winner = committed.get(record["winning_version"])
        assert winner is not None and record["read_version"] < winner["version"] <= latest
        if isolation != "serializable":
            assert not is_blind_append(winner), (record, winner)
        table = record["error_table"]
        written = [
            op["key"] for op in winner["ops"] if op["op"] == "append" and op["table"] == table
        ]
        read = {op["key"] for op in record["ops"] if op["op"] == "read" and op["table"] == table}
        # A data file's key range lies within the winner's overall key range for the table.
        assert written and any(min(written) <= k <= max(written) for k in read), (record, winner)


# --- the test --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("isolation", "inline"),
    [
        pytest.param("serializable", False, id="serializable"),
        pytest.param("write_serializable", False, id="write_serializable"),
        pytest.param("snapshot", False, id="snapshot"),
        pytest.param("serializable", True, id="serializable-inlined"),
    ],
)
def test_concurrent_transactions_read_their_snapshot_and_commit_atomically(
    isolation: str, inline: bool, location: Any, tmp_path: Path, processes: Any
) -> None:
    db = location.connect(checkpoint_interval=10)
    if inline:  # small writes live in the log; checkpoints flush them to files (format §2.5)
        db.set_properties({"inlineLimit": "65536", "inlineFlushBytes": str(INLINE_FLUSH_BYTES)})
    with db.transaction() as setup:
        for table in TABLES:
            setup.create_table(table, SCHEMA)
    setup_version = db.version

    history = _run_workers(location, isolation, processes, tmp_path)

    outcomes = history.outcomes()
    errors = [r["error"] for r in history.records if r["outcome"] == "error"]
    assert not errors, f"unexpected errors: {errors[:5]}"
    check_reads_see_their_snapshot(history)
    flushes = check_log_is_the_committed_transactions(location, history, setup_version)
    check_conflicted_transactions_left_no_files(location)
    if inline:
        assert flushes, "no checkpoint flushed inlined files"
    check_conflicts_are_truthful(history, isolation, db.version)
    skewed = not_serializable_in_log_order(history)
    read_only = sum(is_read_only(r) for r in history.records if r["outcome"] == "committed")
    print(
        f"\n{isolation}: {outcomes['committed']} committed ({read_only} read-only), "
        f"{outcomes['conflict']} conflicts, "
        f"{len({line.split(' read ')[0] for line in skewed})} committed transactions not "
        f"serializable in log order; {len(flushes)} flushes of inlined files"
    )
    assert outcomes["committed"] > 0
    if isolation == "serializable":
        assert not skewed, f"not serializable in log order: {skewed[:5]}"
        assert outcomes["conflict"] > 0, "the workload is meant to make serializable conflict"
    elif isolation == "write_serializable":
        overtaken = reads_overtaken_by_non_blind_commits(history)
        assert not overtaken, f"missed write_serializable conflicts: {overtaken[:5]}"
    else:
        assert outcomes["conflict"] == 0, "appends never conflict at snapshot isolation"
