"""The TPC-H example pipeline: its invariant checker, its refreshes, and one end-to-end run."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest
from rich.console import Console

import mere

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "tpch_pipeline.py"


def load_pipeline() -> ModuleType:
    """Import examples/tpch_pipeline.py (not a package) as the module ``tpch_pipeline``."""
    name = "tpch_pipeline"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


tp = load_pipeline()

ORDERS = pa.schema([pa.field("o_orderkey", pa.int64(), nullable=False)])
LINEITEM = pa.schema(
    [
        pa.field("l_orderkey", pa.int64(), nullable=False),
        pa.field("l_linenumber", pa.int32(), nullable=False),
    ]
)
#: The miniature TPC-H: orders 1..14, order k with 1 + k % 7 lineitems (each count twice).
ORIGINAL_KEYS = list(range(1, 15))
PER_REFRESH = 2
REFRESHES = 4


def lines(key: int, n: int) -> list[dict[str, int]]:
    return [{"l_orderkey": key, "l_linenumber": i} for i in range(1, n + 1)]


def log_row(seq: int, kind: str, orders: int = 0, items: int = 0, writer: int = 0) -> dict:
    return {"writer": writer, "seq": seq, "kind": kind, "orders": orders, "lineitems": items}


def make_db(path: Path) -> mere.Database:
    """Orders 1..14 and their lineitems, plus the refresh log, in one transaction."""
    db = mere.connect(str(path))
    with db.transaction() as tx:
        tx.create_table("orders", ORDERS).append([{"o_orderkey": k} for k in ORIGINAL_KEYS])
        items = [row for k in ORIGINAL_KEYS for row in lines(k, tp.lines_for(k))]
        tx.create_table("lineitem", LINEITEM).append(items)
        tx.create_table(tp.REFRESH_LOG, tp.REFRESH_LOG_SCHEMA)
    return db


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[mere.Database, object]:
    db = make_db(tmp_path / "db")
    base = tp.compute_baseline(db.snapshot(), PER_REFRESH, REFRESHES)
    assert base.max_orderkey == 14 and base.orders == 14
    assert base.lineitems == sum(tp.lines_for(k) for k in ORIGINAL_KEYS)
    assert base.childless_orders == ()
    return db, base


def config(base, writer: int = 0) -> object:
    return tp.WriterConfig("db", writer, 2, REFRESHES, PER_REFRESH, 42, 5, base)


def rf1(db: mere.Database, base, seq: int, writer: int = 0) -> None:
    """A correct RF1: its key block's orders with 1 + k % 7 lineitems each, and its log row."""
    keys = tp.rf1_keys(config(base, writer), seq)
    items = [row for k in keys for row in lines(k, tp.lines_for(k))]
    with db.transaction() as tx:
        tx.table("orders").append([{"o_orderkey": k} for k in keys])
        tx.table("lineitem").append(items)
        tx.table(tp.REFRESH_LOG).append([log_row(seq, "RF1", len(keys), len(items), writer)])


def in_list(keys: list[int]) -> str:
    return ", ".join(str(k) for k in keys)


def rf2(db: mere.Database, seq: int, keys: list[int], writer: int = 0) -> None:
    """A correct RF2: delete orders and their lineitems, and log both counts, atomically."""
    with db.transaction() as tx:
        n_orders = tx.table("orders").delete(f"o_orderkey IN ({in_list(keys)})")
        n_items = tx.table("lineitem").delete(f"l_orderkey IN ({in_list(keys)})")
        tx.table(tp.REFRESH_LOG).append([log_row(seq, "RF2", -n_orders, -n_items, writer)])


def all_problems(db: mere.Database, base) -> dict[int, list[str]]:
    """The violations at every version since the load (only versions that have some)."""
    out = {}
    for version in range(base.load_version, db.version + 1):
        problems = tp.check_invariants(db.snapshot(version=version), base)
        if problems:
            out[version] = problems
    return out


def test_invariants_hold_for_atomic_refreshes(loaded) -> None:
    db, base = loaded
    rf1(db, base, 0)
    rf2(db, 1, [1, 2])
    rf1(db, base, 0, writer=1)
    rf2(db, 1, [7, 14], writer=1)
    assert db.snapshot().table("orders").scan().num_rows == 14 + 4 - 4
    assert all_problems(db, base) == {}


def test_torn_rf1_is_caught(loaded) -> None:
    """An RF1's orders and lineitems committed separately: the version between is flagged."""
    db, base = loaded
    keys = tp.rf1_keys(config(base), 0)
    items = [row for k in keys for row in lines(k, tp.lines_for(k))]
    with db.transaction() as tx:
        tx.table("orders").append([{"o_orderkey": k} for k in keys])
        tx.table(tp.REFRESH_LOG).append([log_row(0, "RF1", len(keys), len(items))])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("without lineitems" in p for p in problems), problems
    assert any("records lineitems" in p for p in problems), problems
    assert any("RF1 step 0 of writer 0" in p for p in problems), problems
    db.table("lineitem").append(items)
    problems = tp.check_invariants(db.snapshot(), base)
    assert problems and all("refresh_log rows" in p for p in problems), problems


def test_torn_rf2_is_caught(loaded) -> None:
    """Orders deleted in one commit and their lineitems in the next: orphans in between."""
    db, base = loaded
    with db.transaction() as tx:
        n = tx.table("orders").delete("o_orderkey IN (3, 4)")
        tx.table(tp.REFRESH_LOG).append([log_row(1, "RF2", -n, -9)])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("orphan lineitem" in p for p in problems), problems
    assert any("records lineitems -9, the tables changed +0" in p for p in problems), problems
    db.table("lineitem").delete("l_orderkey IN (3, 4)")
    problems = tp.check_invariants(db.snapshot(), base)
    assert problems and all("refresh_log rows" in p for p in problems), problems


def test_lineitems_deleted_without_their_order_are_caught(loaded) -> None:
    db, base = loaded
    with db.transaction() as tx:
        n = tx.table("lineitem").delete("l_orderkey = 5")
        tx.table(tp.REFRESH_LOG).append([log_row(1, "RF2", 0, -n)])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("order(s) without lineitems [5]" in p for p in problems), problems


@pytest.mark.parametrize(
    ("orders", "items", "log", "expected"),
    [
        ([], lines(20, 1), [], "orphan lineitem"),
        ([16], lines(16, 2), [log_row(0, "RF1", 1, 2)], "wrong lineitems"),  # 16 needs 3
        ([2], [], [log_row(0, "RF1", 1, 0)], "duplicate order keys"),
        ([15], lines(15, 2), [log_row(0, "RF1", 1, 3)], "records RF1 lineitems +3"),
        ([15], lines(15, 2), [log_row(1, "RF1", 1, 2)], "RF1 step 1 of writer 0"),
        ([15], lines(15, 2), [log_row(0, "RF2", 1, 2)], "RF2 log row adds"),
        ([15], lines(15, 2), [], "refresh_log rows"),
    ],
)
def test_broken_commits_are_caught(loaded, orders, items, log, expected) -> None:
    db, base = loaded
    with db.transaction() as tx:
        if orders:
            tx.table("orders").append([{"o_orderkey": k} for k in orders])
        if items:
            tx.table("lineitem").append(items)
        if log:
            tx.table(tp.REFRESH_LOG).append(log)
    problems = tp.check_invariants(db.snapshot(), base)
    assert any(expected in p for p in problems), problems


def test_refresh_step_twice_is_caught(loaded) -> None:
    db, base = loaded
    rf2(db, 1, [1])
    rf2(db, 1, [2])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("committed twice" in p for p in problems), problems


def test_rf1_keys_are_fresh_and_disjoint() -> None:
    base = tp.Baseline(1, 600, 150, 600, ())
    keys: list[int] = []
    for writer in range(3):
        cfg = tp.WriterConfig("db", writer, 3, 4, 5, 42, 10, base)
        for seq in range(4):
            keys += tp.rf1_keys(cfg, seq)
    assert len(keys) == len(set(keys)) == 3 * 4 * 5
    assert min(keys) > base.max_orderkey


def test_run_rf1_and_rf2_keep_the_invariants(loaded) -> None:
    """The writers' own refresh functions, one after the other, with their statistics."""
    db, base = loaded
    pinned = db.snapshot(version=base.load_version)
    templates = tp.Templates(pinned.table("orders").scan(), pinned.table("lineitem").scan())
    stats = tp.WriterStats()
    cfg = config(base)
    assert tp.run_rf1(db, cfg, 0, templates, stats) == base.load_version + 1
    assert tp.run_rf2(db, cfg, 1, 1, stats) == base.load_version + 2
    assert tp.run_rf1(db, cfg, 1, templates, stats) is None  # step 1 already done
    assert stats.orders_inserted == stats.orders_deleted == PER_REFRESH
    assert stats.lineitems_deleted > 0
    snap = db.snapshot()
    assert snap.table("orders").scan().num_rows == 14
    assert all_problems(db, base) == {}


def rf2_transaction(db: mere.Database, keys: list[int]) -> mere.Transaction:
    """An RF2 that has read and deleted, as run_rf2 does, but not committed."""
    tx = db.transaction()
    tx.table("orders").scan(columns=["o_orderkey"], filter="o_orderkey <= 14")
    n_orders = tx.table("orders").delete(f"o_orderkey IN ({in_list(keys)})")
    n_items = tx.table("lineitem").delete(f"l_orderkey IN ({in_list(keys)})")
    tx.table(tp.REFRESH_LOG).append([log_row(1, "RF2", -n_orders, -n_items)])
    return tx


def test_concurrent_rf1_does_not_conflict_with_rf2(loaded) -> None:
    """RF1 only appends keys above RF2's read: the RF2 rebases and commits."""
    db, base = loaded
    tx = rf2_transaction(db, [1])
    rf1(db, base, 0, writer=1)
    assert tx.commit() == base.load_version + 2
    assert all_problems(db, base) == {}


def test_concurrent_rf2s_conflict(loaded) -> None:
    """Two RF2s rewrite the same files: the later commit must fail, and is retried."""
    db, base = loaded
    tx = rf2_transaction(db, [1])
    rf2(db, 1, [2], writer=1)
    with pytest.raises(mere.ConflictError):
        tx.commit()
    assert all_problems(db, base) == {}


def run_refresh_processes(tmp_path: Path, monkeypatch, *extra: str):
    """run_refreshes (writer and reader processes) on the miniature database."""
    # Spawned processes import this module by name, as the test did.
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    args = tp.parse_args(["--scale-factor", "0.0001", "--refreshes", "2", *extra])
    db = make_db(tmp_path / "db")
    base = tp.compute_baseline(db.snapshot(), tp.orders_per_refresh(0.0001), 2)
    console = Console(file=io.StringIO(), width=120)
    outcome = tp.run_refreshes(args, tmp_path / "db", base, console)
    return db, base, outcome


@pytest.mark.slow
def test_refresh_processes_keep_the_invariants(tmp_path: Path, monkeypatch) -> None:
    """2 writers and 2 readers (processes) without Spark: every version checked, all hold."""
    db, base, outcome = run_refresh_processes(tmp_path, monkeypatch)
    assert outcome.errors == [] and outcome.violations == []
    assert {w: s["commits"] for w, s in outcome.writers.items()} == {0: 2, 1: 2}
    assert db.version == base.load_version + 4
    assert outcome.checked_versions == set(range(base.load_version, db.version + 1))
    assert all_problems(db, base) == {}


@pytest.mark.slow
def test_refresh_processes_catch_a_torn_rf1(tmp_path: Path, monkeypatch) -> None:
    """--torn-rf1: writer 0 commits its first RF1 as two transactions; readers catch it."""
    db, base, outcome = run_refresh_processes(tmp_path, monkeypatch, "--torn-rf1")
    assert outcome.errors == []
    assert any("without lineitems" in m for m in outcome.violations), outcome.violations
    assert all_problems(db, base)


def spark_available() -> str | None:
    """Why the end-to-end run cannot run here, or None."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if tp.java_missing():
        return "java is not installed"
    try:
        tp.tpchgen_command()
    except SystemExit:
        return "tpchgen-cli is not installed"
    return None


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(240)
@pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))
def test_pipeline_end_to_end(tmp_path: Path) -> None:
    """SF 0.01 with Spark, 2 writers, 2 readers, 2 refreshes each: exit 0, no violation."""
    summary_path = tmp_path / "summary.json"
    args = [sys.executable, str(SCRIPT), "--scale-factor", "0.01"]
    args += ["--workdir", str(tmp_path / "tpch"), "--writers", "2", "--readers", "2"]
    args += ["--refreshes", "2", "--summary-json", str(summary_path)]
    start = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True, timeout=220, check=False)
    elapsed = time.monotonic() - start
    output = result.stdout[-6000:] + result.stderr[-3000:]
    assert result.returncode == 0, output
    summary = json.loads(summary_path.read_text())
    assert summary["violations"] == 0
    assert summary["errors"] == []
    assert summary["versions_created"] == 4
    assert summary["commits_per_writer"] == {"0": 2, "1": 2}
    assert summary["orders_deleted"] == 2 * 15 and summary["lineitems_deleted"] > 0
    # every version from the load to the end was checked by some reader
    assert summary["distinct_versions_checked"] == summary["versions_created"] + 1
    assert summary["versions_checked"] == 2 * (summary["versions_created"] + 1)
    # Spark SQL ran Q1, Q6 and Q3 at the load version, the latest, and the load version again
    load, final = summary["load_version"], summary["final_version"]
    assert sorted(summary["spark_queries_run"]) == sorted(
        f"{q}@v{v}" for q in ("Q1", "Q6", "Q3") for v in (load, final, load)
    )
    assert summary["time_travel_identical"] is True
    assert set(summary["phase_seconds"]) >= {"spark start", "generate", "load"}
    assert "Q1 at version" in result.stdout and "OK: every invariant held" in result.stdout
    shutil.rmtree(tmp_path / "tpch", ignore_errors=True)
    # ~45 s on an idle 2-core machine; the timeout above is the guard under contention.
    print(f"pipeline end to end: {elapsed:.0f} s")
