"""The TPC-H example pipeline: its invariant checker, and one end-to-end run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

import mere

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "tpch_pipeline.py"


def load_pipeline() -> ModuleType:
    """Import examples/tpch_pipeline.py (not a package) as a module."""
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


def lines(key: int, n: int) -> list[dict[str, int]]:
    return [{"l_orderkey": key, "l_linenumber": i} for i in range(1, n + 1)]


def log_row(seq: int, kind: str, orders: int = 0, items: int = 0, tombs: int = 0) -> dict:
    return {
        "writer": 0,
        "seq": seq,
        "kind": kind,
        "orders": orders,
        "lineitems": items,
        "tombstones": tombs,
    }


@pytest.fixture
def loaded(tmp_path: Path) -> tuple[mere.Database, object]:
    """A miniature TPC-H: orders 1..3 with 1, 2 and 1 lineitems, loaded in one transaction."""
    db = mere.connect(str(tmp_path / "db"))
    with db.transaction() as tx:
        tx.create_table("orders", ORDERS).append([{"o_orderkey": k} for k in (1, 2, 3)])
        tx.create_table("lineitem", LINEITEM).append(lines(1, 1) + lines(2, 2) + lines(3, 1))
        tx.create_table(tp.DELETED_ORDERS, tp.DELETED_ORDERS_SCHEMA)
        tx.create_table(tp.REFRESH_LOG, tp.REFRESH_LOG_SCHEMA)
    base = tp.compute_baseline(db.snapshot())
    assert base.max_orderkey == 3 and base.orders == 3 and base.lineitems == 4
    assert base.childless_orders == ()
    return db, base


def rf1(db: mere.Database, seq: int, key: int) -> None:
    """A correct RF1: one order with 1 + key % 7 lineitems, and its log row, atomically."""
    n = tp.lines_for(key)
    with db.transaction() as tx:
        tx.table("orders").append([{"o_orderkey": key}])
        tx.table("lineitem").append(lines(key, n))
        tx.table(tp.REFRESH_LOG).append([log_row(seq, "RF1", 1, n)])


def rf2(db: mere.Database, seq: int, keys: list[int]) -> None:
    with db.transaction() as tx:
        tx.table(tp.DELETED_ORDERS).append([{"o_orderkey": k} for k in keys])
        tx.table(tp.REFRESH_LOG).append([log_row(seq, "RF2", tombs=len(keys))])


def test_invariants_hold_for_atomic_refreshes(loaded) -> None:
    db, base = loaded
    rf1(db, 0, 10)
    rf2(db, 1, [1, 2])
    rf1(db, 2, 11)
    for version in range(base.load_version, db.version + 1):
        assert tp.check_invariants(db.snapshot(version=version), base) == []


def test_torn_rf1_is_caught(loaded) -> None:
    """The order and its lineitems committed separately: the version between is flagged."""
    db, base = loaded
    with db.transaction() as tx:
        tx.table("orders").append([{"o_orderkey": 10}])
        tx.table(tp.REFRESH_LOG).append([log_row(0, "RF1", 1, tp.lines_for(10))])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("without lineitems" in p for p in problems)
    assert any("lineitems, lineitem grew by 0" in p for p in problems)
    db.table("lineitem").append(lines(10, tp.lines_for(10)))
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("refresh_log rows" in p for p in problems)  # two commits for one refresh


@pytest.mark.parametrize(
    ("orders", "items", "log", "expected"),
    [
        ([], lines(12, 1), [], "orphan lineitem"),
        ([12], lines(12, 2), [log_row(0, "RF1", 1, 2)], "wrong lineitems"),  # 12 needs 6
        ([2], [], [log_row(0, "RF1", 1, 0)], "duplicate order keys"),
        ([], lines(2, 1), [log_row(0, "RF1", 0, 1)], "original lineitems"),
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


def test_bad_tombstones_are_caught(loaded) -> None:
    db, base = loaded
    rf2(db, 0, [1])
    rf2(db, 1, [1, 99])
    problems = tp.check_invariants(db.snapshot(), base)
    assert any("tombstoned twice" in p for p in problems), problems
    assert any("tombstones for missing orders" in p for p in problems), problems


def test_rf1_keys_are_fresh_and_disjoint() -> None:
    base = tp.Baseline(1, 600, 150, 600, ())
    keys: list[int] = []
    for writer in range(3):
        cfg = tp.WriterConfig("db", writer, 3, 4, 5, 42, 10, base)
        for seq in range(4):
            keys += tp.rf1_keys(cfg, seq)
    assert len(keys) == len(set(keys)) == 3 * 4 * 5
    assert min(keys) > base.max_orderkey


def test_normalize_schema_replaces_string_view() -> None:
    schema = pa.schema(
        [pa.field("a", pa.string_view(), nullable=False, metadata={"PARQUET:field_id": "1"})]
    )
    out = tp.normalize_schema(schema)
    assert out.field("a").type == pa.string()
    assert not out.field("a").nullable
    assert not out.field("a").metadata


def tpchgen_available() -> bool:
    try:
        tp.tpchgen_command()
    except SystemExit:
        return False
    return True


def run_pipeline(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the pipeline at SF 0.01 with 2 writers, 2 readers and 2 refreshes each."""
    summary_path = tmp_path / "summary.json"
    args = [sys.executable, str(SCRIPT), "--scale-factor", "0.01"]
    args += ["--workdir", str(tmp_path / "tpch"), "--writers", "2", "--readers", "2"]
    args += ["--refreshes", "2", "--summary-json", str(summary_path), *extra]
    result = subprocess.run(args, capture_output=True, text=True, timeout=170, check=False)
    output = result.stdout[-5000:] + result.stderr[-5000:]
    assert summary_path.exists(), output
    return result, json.loads(summary_path.read_text())


needs_tpchgen = pytest.mark.skipif(not tpchgen_available(), reason="tpchgen-cli is not installed")


@pytest.mark.slow
@pytest.mark.timeout(180)
@needs_tpchgen
def test_pipeline_end_to_end(tmp_path: Path) -> None:
    """SF 0.01, 2 writers, 2 readers, 2 refreshes each: exit 0 and no violation."""
    start = time.monotonic()
    result, summary = run_pipeline(tmp_path)
    elapsed = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert summary["violations"] == 0
    assert summary["errors"] == []
    assert summary["versions_checked"] > 0
    assert summary["versions_created"] == 4
    assert summary["commits_per_writer"] == {"0": 2, "1": 2}
    # every version from the load to the end was checked by some reader
    assert summary["distinct_versions_checked"] == summary["versions_created"] + 1
    assert summary["time_travel_identical"] is True
    assert "invariant violations" in result.stdout
    assert "OK: every invariant held" in result.stdout
    assert elapsed < 120, f"the pipeline took {elapsed:.0f} s"


@pytest.mark.slow
@pytest.mark.timeout(180)
@needs_tpchgen
def test_pipeline_reports_a_torn_refresh(tmp_path: Path) -> None:
    """--torn-rf1 commits one RF1 as two transactions: the readers catch it, exit 1."""
    result, summary = run_pipeline(tmp_path, "--torn-rf1")
    assert result.returncode == 1
    assert summary["violations"] > 0
    assert any("without lineitems" in m for m in summary["violation_messages"])
    assert "FAILED" in result.stdout


def rf2_reads(db: mere.Database, base) -> mere.Transaction:
    """An RF2 transaction that has done its reads, as run_rf2 does, but not committed."""
    tx = db.transaction(isolation="serializable")
    tx.table(tp.DELETED_ORDERS).scan(columns=["o_orderkey"])
    tx.table("orders").scan(columns=["o_orderkey"], filter=f"o_orderkey <= {base.max_orderkey}")
    tx.table(tp.DELETED_ORDERS).append([{"o_orderkey": 1}])
    tx.table(tp.REFRESH_LOG).append([log_row(0, "RF2", tombs=1)])
    return tx


def test_concurrent_rf1_does_not_conflict_with_rf2(loaded) -> None:
    """RF1's new keys lie above RF2's filtered read: the RF2 rebases and commits."""
    db, base = loaded
    tx = rf2_reads(db, base)
    rf1(db, 1, 10)
    assert tx.commit() == base.load_version + 2
    assert tp.check_invariants(db.snapshot(), base) == []


def test_concurrent_rf2s_conflict(loaded) -> None:
    """Two RF2s read the tombstones each other appends: the later one must retry."""
    db, base = loaded
    tx = rf2_reads(db, base)
    rf2(db, 1, [2])
    with pytest.raises(mere.ConcurrentAppend):
        tx.commit()
