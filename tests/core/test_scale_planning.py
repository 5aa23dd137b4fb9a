"""Planning and replay over live files as columns, against the object-per-file reference.

The vectorized analysis is proven against the per-file one over hand-made facts
(tests/expr/test_skipping_vectorized.py). Here the whole path a scan takes is
checked: ``add`` actions -> columns (partition text parsed in bulk, statistics
typed) -> facts -> chosen files, against the per-file choice over the same
objects and against the files' rows, with the partition values that are easy
to get wrong (NULL, NaN, -0.0, infinity). And replay on top of a checkpoint's
base (removes of base files, re-adds, files added and removed within the tail,
folds of the delta) against a plain dict of files.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mere
import mere.snapshot.files as files_module
from mere.expr import to_arrow
from mere.log.actions import (
    AddFile,
    Commit,
    CommitInfo,
    DatabaseMeta,
    Protocol,
    RemoveFile,
    TableMeta,
)
from mere.log.columns import FileLayout, adds_to_columns
from mere.snapshot.files import LiveFiles, TableSource
from mere.snapshot.planning import select_files
from mere.snapshot.scan import plan_scan
from mere.snapshot.state import DatabaseState, TableState

TID = "cd" * 16
SCHEMA = pa.schema([("p", pa.float64()), ("q", pa.string()), ("x", pa.int64())])
META = TableMeta(TID, "t", SCHEMA, ("p", "q"), {}, 1_700_000_000_000)

#: Partition texts of ``p`` as a log may hold them (writers refuse NaN; readers must cope).
P_TEXTS = {None: None, "nan": math.nan, "-0": -0.0, "0": 0.0, "1.5": 1.5, "-2.5": -2.5}
P_TEXTS["inf"] = math.inf
Q_TEXTS = [None, "", "a", "ab", "b"]

LEAVES = [
    "p = 0",
    "p = -0.0",
    "p > 0",
    "p >= 0",
    "p < 1.5",
    "p != 0",
    "p = CAST('NaN' AS DOUBLE)",
    "p > 1e308",
    "isnan(p)",
    "p IS NULL",
    "p IS NOT NULL",
    "p IN (0.0, NULL)",
    "p NOT IN (1.5, CAST('NaN' AS DOUBLE))",
    "p IS DISTINCT FROM 0.0",
    "p IS NOT DISTINCT FROM CAST('NaN' AS DOUBLE)",
    "q = ''",
    "q = 'a'",
    "q > 'a'",
    "q IS NULL",
    "q LIKE 'a%'",
    "starts_with(q, 'a')",
    "x > 3",
    "x <= 0",
    "x IS NULL",
    "x IN (2, 5)",
]


def _predicate(draw: Any, depth: int = 0) -> str:
    kind = draw(st.integers(0, 5 if depth < 2 else 0))
    if kind <= 2:
        return draw(st.sampled_from(LEAVES))
    if kind == 3:
        return f"NOT ({_predicate(draw, depth + 1)})"
    joiner = " AND " if kind == 4 else " OR "
    return joiner.join(f"({_predicate(draw, depth + 1)})" for _ in range(2))


@st.composite
def predicates(draw: Any) -> str:
    return _predicate(draw)


@st.composite
def data_files(draw: Any) -> tuple[AddFile, pa.Table]:
    """A file: its partition texts, its rows, and statistics a writer could have recorded."""
    p_text = draw(st.sampled_from(list(P_TEXTS)))
    q_text = draw(st.sampled_from(Q_TEXTS))
    xs = draw(st.lists(st.one_of(st.none(), st.integers(-3, 8)), min_size=0, max_size=5))
    rows = pa.table(
        {
            "p": pa.array([P_TEXTS[p_text]] * len(xs), pa.float64()),
            "q": pa.array([q_text] * len(xs), pa.string()),
            "x": pa.array(xs, pa.int64()),
        }
    )
    present = [v for v in xs if v is not None]
    stats: dict[str, Any] = {"numRecords": len(xs)}
    if draw(st.booleans()):  # else: no statistics for x at all
        if present:
            stats["minValues"] = {"x": min(present)}
            stats["maxValues"] = {"x": max(present)}
        stats["nullCount"] = {"x": len(xs) - len(present)}
    name = f"f-{uuid.uuid4().hex}.parquet"
    partitions = {"p": p_text, "q": q_text}
    return AddFile(TID, name, 100, len(xs), partitions, stats, 1), rows


@settings(max_examples=50, deadline=None)
@given(st.lists(data_files(), min_size=1, max_size=6), predicates())
def test_columns_choose_the_files_the_objects_do(files: list[Any], sql: str) -> None:
    adds = [a for a, _ in files]
    live = LiveFiles.from_adds(META, adds)
    plan = plan_scan(META, None, sql)
    assert plan.predicate is not None
    chosen = {a.path for a in select_files(plan, TableState(META, live))}
    assert chosen == {a.path for a in adds if plan.matches(a)}, sql
    for add, rows in files:
        if add.path not in chosen:  # pruned: no row of the file may match
            assert rows.filter(to_arrow(plan.predicate)).num_rows == 0, (sql, add)


# --- replay on top of a checkpoint's base ------------------------------------------------------


def _add(i: int, part: str) -> AddFile:
    stats = {
        "numRecords": 3,
        "minValues": {"x": i},
        "maxValues": {"x": i + 2},
        "nullCount": {"x": 0},
    }
    return AddFile(TID, f"file-{i:03d}.parquet", 10 + i, 3, {"p": "1.5", "q": part}, stats, i)


def _info(version: int) -> CommitInfo:
    return CommitInfo(uuid.uuid4().hex, 1_700_000_000_000 + version, version - 1, "snapshot", "X")


steps = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "readd"]), st.integers(0, 24)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=30, deadline=None)
@given(
    st.sets(st.integers(0, 24), max_size=16),
    st.lists(steps, min_size=1, max_size=8),
    st.integers(1, 3),
    st.sampled_from([0, 3, 4096]),
    st.sampled_from([0, 2, 256]),
    st.sampled_from([0, 65536]),
)
def test_replay_on_a_checkpoint_base_keeps_what_a_dict_would(
    base: set[int],
    commits: list[Any],
    per_batch: int,
    fold_min: int,
    pending_max: int,
    path_set_max: int,
) -> None:
    """Removes of base files, re-adds of live paths, adds removed again within the tail;
    the delta folded into a new base, added files kept as objects or turned into columns,
    their paths kept as a set or not."""
    expected = {_add(i, "a").path: _add(i, "a") for i in sorted(base)}
    layout = FileLayout.of(META)
    source = TableSource(layout, adds_to_columns(layout, list(expected.values())))
    start = DatabaseState(
        0,
        0,
        Protocol(1),
        DatabaseMeta("e" * 32, {}, 1_700_000_000_000),
        {TID: TableState(META, LiveFiles(TID, layout, source, version=0))},
        {"t": TID},
        {},
    )
    mp = pytest.MonkeyPatch()
    mp.setattr(files_module, "FOLD_MIN", fold_min)
    mp.setattr(files_module, "PENDING_MAX", pending_max)
    mp.setattr(files_module, "PATH_SET_MAX", path_set_max)
    try:
        state = start
        pending: list[Commit] = []
        for version, commit in enumerate(commits, start=1):
            actions: list[Any] = []
            for kind, i in commit:
                if kind == "remove":
                    path = _add(i, "a").path
                    actions.append(RemoveFile(TID, path, 1_700_000_000_000))
                    expected.pop(path, None)
                else:
                    a = _add(i, "a" if kind == "add" else "b")
                    actions.append(a)
                    expected.pop(a.path, None)
                    expected[a.path] = a
            pending.append(Commit(version, _info(version), tuple(actions)))
            if len(pending) == per_batch:
                state, pending = state.apply_many(pending), []
        state = state.apply_many(pending)
    finally:
        mp.undo()
    files = state.tables[TID].live
    assert dict(files.items()) == expected
    assert len(files) == len(expected)
    assert files.rows == 3 * len(expected)
    assert sorted(files.columns(["path"]).column(0).to_pylist()) == sorted(expected)
    written = pa.concat_tables(list(files.pieces()))  # what a checkpoint writes
    assert sorted(written.column("path").to_pylist()) == sorted(expected)
    # the base is untouched: the state it came from still reads as it was
    assert len(start.tables[TID].live) == len(base)


# --- a checkpoint's base under a newer schema ---------------------------------------------------


def test_columns_added_and_widened_after_a_checkpoint_read_from_its_parts(tmp_path: Any) -> None:
    """The parts hold the old layout; the table's files are read in the new one."""
    db = mere.connect(tmp_path / "db")
    db.create_table("t", pa.schema([("id", pa.int64()), ("v", pa.int32())]))
    for i in range(3):
        db.table("t").append([{"id": i, "v": i}])
    db.checkpoint()
    with db.begin() as tx:
        tx.alter_table("t").add_column("extra", pa.int64()).widen_column("v", pa.int64())
    db.table("t").append([{"id": 9, "v": 2**40, "extra": 5}])
    for _ in range(2):  # read from the old checkpoint's parts, then from a new checkpoint's
        fresh = mere.connect(tmp_path / "db", create=False)
        table = fresh.table("t")
        assert table.scan(filter="extra = 5").column("id").to_pylist() == [9]
        assert table.scan(filter="extra IS NULL").num_rows == 3
        assert table.scan(filter="v > 100").column("id").to_pylist() == [9]
        assert table.scan(filter="v = 1").column("id").to_pylist() == [1]
        assert table.describe()["files"] == 4
        assert fresh.latest_state().tables == db.latest_state().tables
        fresh.checkpoint()
