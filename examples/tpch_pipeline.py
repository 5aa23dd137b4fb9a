"""TPC-H on mere: a multi-table load, concurrent refreshes and consistent readers.

The pipeline shows what one database-wide log buys: several tables changed by
one atomic commit, and readers that see every table at one version.

1. **generate** TPC-H data as Parquet with ``tpchgen-cli`` (skipped when the
   data for the scale factor is already in the work directory);
2. **load** the 8 TPC-H tables into a fresh database in ONE transaction, with
   two bookkeeping tables: ``deleted_orders`` (tombstones) and ``refresh_log``;
3. **refresh**: ``--writers`` processes run TPC-H refresh functions as
   multi-table transactions, retrying on conflicts, while ``--readers``
   processes check cross-table invariants at every version committed;
4. **query**: TPC-H Q1, Q6 and Q3 (pyarrow compute) at the version right after
   the load and at the latest version, then again at the load version to show
   that time travel returns identical results;
5. **summary**: versions, commits, conflicts, checks, violations, phase times.

Refresh functions, with appends only (row-level DELETE arrives with DML):

* **RF1** appends new orders *and* their lineitems in one transaction (plus a
  ``refresh_log`` row). New order keys lie above the largest original key and
  are unique per writer and refresh; order ``k`` gets exactly ``1 + k % 7``
  lineitems, copied from an original order with that many lines.
* **RF2** records tombstones: in one *serializable* transaction it reads the
  existing tombstones and the original orders, picks orders not yet
  tombstoned, and appends their keys to ``deleted_orders`` (plus a
  ``refresh_log`` row). Two RF2s running at once conflict (each read the
  tombstones the other appends), so one of them retries: no order is ever
  tombstoned twice. Queries treat tombstoned orders as deleted.

Run ``python examples/tpch_pipeline.py --help``; ``scripts/example.sh`` sets
up the virtual environment and runs it. Exit status 0 means every invariant
held at every version checked; 1 means a violation or a failure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

import mere

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
DELETED_ORDERS = "deleted_orders"
REFRESH_LOG = "refresh_log"

DELETED_ORDERS_SCHEMA = pa.schema([pa.field("o_orderkey", pa.int64(), nullable=False)])
REFRESH_LOG_SCHEMA = pa.schema(
    [
        pa.field("writer", pa.int32(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "RF1" or "RF2"
        pa.field("orders", pa.int64(), nullable=False),  # orders inserted (RF1)
        pa.field("lineitems", pa.int64(), nullable=False),  # lineitems inserted (RF1)
        pa.field("tombstones", pa.int64(), nullable=False),  # orders tombstoned (RF2)
    ]
)
#: Rows per append while loading, so a large scale factor streams through.
LOAD_BATCH_ROWS = 500_000
#: Q1's ship-date bound: DATE '1998-12-01' - INTERVAL '90' DAY.
Q1_SHIPDATE = "1998-09-02"
#: How many violation messages one reader sends at most (the count is always exact).
MAX_REPORTED_VIOLATIONS = 20

ONE = pa.scalar(Decimal("1.00"), pa.decimal128(15, 2))


# --- small helpers -------------------------------------------------------------


def lines_for(orderkey: int) -> int:
    """How many lineitems the RF1 order with this key has (1 to 7, as in TPC-H)."""
    return 1 + orderkey % 7


def orders_per_refresh(scale_factor: float) -> int:
    """Orders inserted by one RF1 or tombstoned by one RF2: SF * 1500, as in TPC-H."""
    return max(1, round(1500 * scale_factor))


def writer_app_id(writer: int) -> str:
    """The application-transaction id a writer records its progress under."""
    return f"tpch-refresh-writer-{writer}"


def refresh_kind(seq: int) -> str:
    """RF1 on even steps, RF2 on odd ones, for every writer (so RF2s overlap)."""
    return "RF1" if seq % 2 == 0 else "RF2"


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """The table schema for a tpchgen Parquet schema.

    tpchgen writes ``string_view`` columns, which mere does not store (it
    casts them on append), so they become ``string``. Parquet field ids in
    the field metadata are dropped: mere writes its own files.
    """
    fields = []
    for f in schema:
        t = f.type
        if t == pa.string_view():
            t = pa.string()
        elif t == pa.binary_view():
            t = pa.binary()
        fields.append(pa.field(f.name, t, f.nullable))
    return pa.schema(fields)


def scale_dir_name(scale_factor: float) -> str:
    return f"sf{scale_factor:g}"


# --- phase 1: generate -----------------------------------------------------------


def tpchgen_command() -> list[str]:
    """The tpchgen-cli console script next to this interpreter (or on PATH)."""
    bindir = Path(sys.executable).parent
    for name in ("tpchgen-cli", "tpchgen-cli.exe"):
        candidate = bindir / name
        if candidate.exists():
            return [str(candidate)]
    found = shutil.which("tpchgen-cli")
    if found:
        return [found]
    raise SystemExit(
        "tpchgen-cli is not installed: run `bash scripts/setup.sh example` "
        "(or pip install tpchgen-cli)"
    )


def generate_data(workdir: Path, scale_factor: float, console: Console) -> tuple[Path, bool]:
    """Generate the 8 TPC-H tables as Parquet under ``workdir/sf<SF>``.

    Returns the directory and whether it was generated (False: already there).
    The files are written to a temporary directory renamed into place, and a
    marker file is written last, so an interrupted run is never mistaken for
    complete data.
    """
    target = workdir / scale_dir_name(scale_factor)
    marker = target / "_COMPLETE"
    if marker.exists() and all((target / f"{t}.parquet").exists() for t in TPCH_TABLES):
        return target, False
    cmd = tpchgen_command()
    tmp = workdir / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # tpchgen-cli 3+ has a `parquet` subcommand; older releases took --format=parquet.
    probe = subprocess.run([*cmd, "parquet", "--help"], capture_output=True, check=False)
    if probe.returncode == 0:
        args = [*cmd, "parquet", "--scale-factor", str(scale_factor), "--output-dir", str(tmp)]
    else:
        args = [*cmd, "--format=parquet", "--scale-factor", str(scale_factor)]
        args += ["--output-dir", str(tmp)]
    console.log(f"running {' '.join(Path(a).name if i == 0 else a for i, a in enumerate(args))}")
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"tpchgen-cli failed ({result.returncode}):\n{result.stderr}")
    missing = [t for t in TPCH_TABLES if not (tmp / f"{t}.parquet").exists()]
    if missing:
        raise SystemExit(f"tpchgen-cli did not write {missing} in {tmp}")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    marker.write_text(json.dumps({"scale_factor": scale_factor}) + "\n")
    return target, True


# --- phase 2: load -----------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """What the load committed, which the invariants are stated against."""

    load_version: int
    max_orderkey: int  # the largest original order key; RF1 keys lie above it
    orders: int  # original order count
    lineitems: int  # original lineitem count
    childless_orders: tuple[int, ...]  # original orders without lineitems (TPC-H: none)


def load_database(
    db: mere.Database, data_dir: Path, progress: Progress
) -> tuple[int, dict[str, int]]:
    """Create and fill every table in ONE transaction; return its version and row counts."""
    files = {name: pq.ParquetFile(data_dir / f"{name}.parquet") for name in TPCH_TABLES}
    total = sum(f.metadata.num_rows for f in files.values())
    task = progress.add_task("load (one transaction)", total=total, info="")
    rows: dict[str, int] = {}
    with db.transaction() as tx:
        for name, pf in files.items():
            table = tx.create_table(name, normalize_schema(pf.schema_arrow))
            rows[name] = 0
            for batch in pf.iter_batches(batch_size=LOAD_BATCH_ROWS):
                rows[name] += table.append(batch)
                progress.update(task, advance=batch.num_rows, info=name)
        tx.create_table(DELETED_ORDERS, DELETED_ORDERS_SCHEMA)
        tx.create_table(REFRESH_LOG, REFRESH_LOG_SCHEMA)
        progress.update(task, info="committing")
    assert tx.commit_version is not None
    progress.update(task, info=f"committed version {tx.commit_version}")
    return tx.commit_version, rows


def compute_baseline(snap: mere.Snapshot) -> Baseline:
    """The counts and key range of the freshly loaded orders and lineitems."""
    okeys = snap.table("orders").scan(columns=["o_orderkey"])["o_orderkey"]
    lkeys = snap.table("lineitem").scan(columns=["l_orderkey"])["l_orderkey"]
    childless = pc.filter(okeys, pc.invert(pc.is_in(okeys, value_set=pc.unique(lkeys))))
    return Baseline(
        load_version=snap.version,
        max_orderkey=int(pc.max(okeys).as_py()),
        orders=len(okeys),
        lineitems=len(lkeys),
        childless_orders=tuple(sorted(childless.to_pylist())),
    )


# --- invariants ----------------------------------------------------------------------


def _sample(values: pa.Array | pa.ChunkedArray, limit: int = 5) -> str:
    items = sorted(values.to_pylist())
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return f"{items[:limit]}{more}"


def check_invariants(snap: mere.Snapshot, base: Baseline) -> list[str]:
    """Every cross-table invariant at one version; returns the violations (empty: all hold).

    * orders are unique; every lineitem has its order (no orphans); the orders
      without lineitems are exactly the original data's (none);
    * the original orders and lineitems are untouched;
    * every RF1 order ``k`` has exactly ``1 + k % 7`` lineitems numbered 1..n;
    * ``refresh_log`` accounts for every row: its RF1 totals equal the orders
      and lineitems added since the load, its RF2 total the tombstones, and it
      has one row per commit since the load (each refresh is one commit);
    * tombstones name existing original orders, each at most once.
    """
    v = snap.version
    bad: list[str] = []
    okeys = snap.table("orders").scan(columns=["o_orderkey"])["o_orderkey"]
    items = snap.table("lineitem").scan(columns=["l_orderkey", "l_linenumber"])
    tombs = snap.table(DELETED_ORDERS).scan(columns=["o_orderkey"])["o_orderkey"]
    rlog = snap.table(REFRESH_LOG).scan()
    lkeys = items["l_orderkey"]

    if pc.count_distinct(okeys).as_py() != len(okeys):
        counts = pc.value_counts(okeys)
        dups = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
        bad.append(f"v{v}: duplicate order keys {_sample(dups)}")

    orphans = pc.filter(lkeys, pc.invert(pc.is_in(lkeys, value_set=okeys)))
    if len(orphans):
        bad.append(f"v{v}: {len(orphans)} orphan lineitem(s), orders {_sample(pc.unique(orphans))}")

    childless = pc.filter(okeys, pc.invert(pc.is_in(okeys, value_set=pc.unique(lkeys))))
    if sorted(childless.to_pylist()) != list(base.childless_orders):
        bad.append(f"v{v}: orders without lineitems {_sample(childless)}, expected none new")

    orig = pc.less_equal(okeys, base.max_orderkey)
    n_orig_orders = pc.sum(orig).as_py() or 0
    n_orig_items = pc.sum(pc.less_equal(lkeys, base.max_orderkey)).as_py() or 0
    if n_orig_orders != base.orders:
        bad.append(f"v{v}: {n_orig_orders} original orders, the load had {base.orders}")
    if n_orig_items != base.lineitems:
        bad.append(f"v{v}: {n_orig_items} original lineitems, the load had {base.lineitems}")

    new_items = items.filter(pc.greater(lkeys, base.max_orderkey))
    if new_items.num_rows:
        per_order = new_items.group_by("l_orderkey").aggregate(
            [("l_linenumber", "count"), ("l_linenumber", "min"), ("l_linenumber", "max")]
        )
        expected = pc.add(pc.cast(pc.remainder(per_order["l_orderkey"], 7), pa.int64()), 1)
        ok = pc.and_(
            pc.and_(
                pc.equal(per_order["l_linenumber_count"], expected),
                pc.equal(per_order["l_linenumber_min"], 1),
            ),
            pc.equal(pc.cast(per_order["l_linenumber_max"], pa.int64()), expected),
        )
        wrong = pc.filter(per_order["l_orderkey"], pc.invert(ok))
        if len(wrong):
            bad.append(f"v{v}: {len(wrong)} RF1 order(s) with the wrong lineitems {_sample(wrong)}")

    rf1 = rlog.filter(pc.equal(rlog["kind"], "RF1"))
    rf2 = rlog.filter(pc.equal(rlog["kind"], "RF2"))
    logged_orders = pc.sum(rf1["orders"]).as_py() or 0
    logged_items = pc.sum(rf1["lineitems"]).as_py() or 0
    logged_tombs = pc.sum(rf2["tombstones"]).as_py() or 0
    if logged_orders != len(okeys) - base.orders:
        bad.append(
            f"v{v}: refresh_log records {logged_orders} RF1 orders, "
            f"orders grew by {len(okeys) - base.orders}"
        )
    if logged_items != len(lkeys) - base.lineitems:
        bad.append(
            f"v{v}: refresh_log records {logged_items} RF1 lineitems, "
            f"lineitem grew by {len(lkeys) - base.lineitems}"
        )
    if logged_tombs != len(tombs):
        bad.append(f"v{v}: refresh_log records {logged_tombs} tombstones, found {len(tombs)}")
    if rlog.num_rows != v - base.load_version:
        bad.append(
            f"v{v}: {rlog.num_rows} refresh_log rows for {v - base.load_version} commits "
            "since the load (a commit without its log row, or the reverse)"
        )
    steps = Counter(zip(rlog["writer"].to_pylist(), rlog["seq"].to_pylist(), strict=True))
    twice = sorted(k for k, n in steps.items() if n > 1)
    if twice:
        bad.append(f"v{v}: refresh steps committed twice: {twice[:5]}")

    if pc.count_distinct(tombs).as_py() != len(tombs):
        bad.append(f"v{v}: an order was tombstoned twice")
    dangling = pc.filter(tombs, pc.invert(pc.is_in(tombs, value_set=okeys)))
    if len(dangling):
        bad.append(f"v{v}: tombstones for missing orders {_sample(dangling)}")
    if len(tombs) and pc.max(tombs).as_py() > base.max_orderkey:
        bad.append(f"v{v}: a tombstone names an RF1 order (RF2 only deletes original orders)")
    return bad


# --- phase 3: refresh writers ------------------------------------------------------------


@dataclass(frozen=True)
class WriterConfig:
    """What one writer process needs (picklable, for the spawn start method)."""

    db_path: str
    writer: int
    writers: int
    refreshes: int
    per_refresh: int
    seed: int
    max_attempts: int
    base: Baseline
    torn: bool = False  # commit this writer's first RF1 as two transactions (a demo bug)


@dataclass
class WriterStats:
    """What one writer did."""

    commits: int = 0
    rf1: int = 0
    rf2: int = 0
    conflicts: int = 0
    conflict_kinds: dict[str, int] = field(default_factory=dict)
    versions: list[int] = field(default_factory=list)


class Templates:
    """Original orders grouped by their number of lineitems, to copy into RF1 orders."""

    def __init__(self, orders: pa.Table, lineitem: pa.Table) -> None:
        self.orders = orders
        self.lineitem = lineitem
        counts = lineitem.group_by("l_orderkey").aggregate([("l_linenumber", "count")])
        self.by_lines: dict[int, list[int]] = {}
        for key, n in zip(
            counts["l_orderkey"].to_pylist(), counts["l_linenumber_count"].to_pylist(), strict=True
        ):
            self.by_lines.setdefault(n, []).append(key)
        for keys in self.by_lines.values():
            keys.sort()

    def make_orders(self, new_keys: list[int], rng: random.Random) -> tuple[pa.Table, pa.Table]:
        """New orders with these keys and their lineitems, copied from original orders."""
        wanted: dict[int, list[int]] = {}
        for key in new_keys:
            wanted.setdefault(lines_for(key), []).append(key)
        sources: list[int] = []
        targets: list[int] = []
        for n, keys in sorted(wanted.items()):
            pool = self.by_lines.get(n, [])
            if len(pool) < len(keys):
                raise RuntimeError(f"not enough original orders with {n} lineitems to copy")
            sources += rng.sample(pool, len(keys))
            targets += keys
        src = pa.array(sources, pa.int64())
        dst = pa.array(targets, pa.int64())
        orders = self.orders.filter(pc.is_in(self.orders["o_orderkey"], value_set=src))
        orders = orders.set_column(
            orders.schema.get_field_index("o_orderkey"),
            orders.schema.field("o_orderkey"),
            dst.take(pc.index_in(orders["o_orderkey"], value_set=src)),
        )
        items = self.lineitem.filter(pc.is_in(self.lineitem["l_orderkey"], value_set=src))
        items = items.set_column(
            items.schema.get_field_index("l_orderkey"),
            items.schema.field("l_orderkey"),
            dst.take(pc.index_in(items["l_orderkey"], value_set=src)),
        )
        return orders, items


def rf1_keys(cfg: WriterConfig, seq: int) -> list[int]:
    """Fresh order keys for one RF1: a block above the original keys, unique per (writer, seq)."""
    block = cfg.writer * cfg.refreshes + seq
    start = cfg.base.max_orderkey + 1 + block * cfg.per_refresh
    return list(range(start, start + cfg.per_refresh))


def log_entry(
    cfg: WriterConfig, seq: int, kind: str, orders: int = 0, lineitems: int = 0, tombstones: int = 0
) -> pa.Table:
    """The ``refresh_log`` row a refresh commits together with its data."""
    row = {
        "writer": cfg.writer,
        "seq": seq,
        "kind": kind,
        "orders": orders,
        "lineitems": lineitems,
        "tombstones": tombstones,
    }
    return pa.Table.from_pylist([row], schema=REFRESH_LOG_SCHEMA)


def run_rf1(db: mere.Database, cfg: WriterConfig, seq: int, templates: Templates) -> int | None:
    """Insert new orders and their lineitems in one transaction; None if already done."""
    rng = random.Random(f"{cfg.seed}-rf1-{cfg.writer}-{seq}")
    orders, items = templates.make_orders(rf1_keys(cfg, seq), rng)
    if cfg.torn and seq == 0:
        # Deliberately wrong, for --torn-rf1: the orders (and the log row) commit
        # first, their lineitems in a second transaction. The version in between
        # has orders without lineitems, and the readers must report it.
        with db.transaction() as tx:
            tx.table("orders").append(orders)
            tx.table(REFRESH_LOG).append(
                log_entry(cfg, seq, "RF1", orders.num_rows, items.num_rows)
            )
        with db.transaction() as tx:
            tx.table("lineitem").append(items)
            tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
        return tx.commit_version
    with db.transaction() as tx:
        if (tx.app_version(writer_app_id(cfg.writer)) or 0) > seq:
            return None  # committed by an earlier attempt whose outcome was unknown
        tx.table("orders").append(orders)
        tx.table("lineitem").append(items)
        tx.table(REFRESH_LOG).append(log_entry(cfg, seq, "RF1", orders.num_rows, items.num_rows))
        tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
    return tx.commit_version


def run_rf2(db: mere.Database, cfg: WriterConfig, seq: int, attempt: int) -> int | None:
    """Tombstone original orders not tombstoned yet, in one serializable transaction."""
    rng = random.Random(f"{cfg.seed}-rf2-{cfg.writer}-{seq}-{attempt}")
    with db.transaction(isolation="serializable") as tx:
        if (tx.app_version(writer_app_id(cfg.writer)) or 0) > seq:
            return None
        # Both reads are recorded: a concurrent commit adding tombstones (any
        # row matches this unfiltered read) makes this one conflict and retry.
        # RF1 files hold keys above max_orderkey, so their statistics show
        # they cannot match the orders read, and RF1 never conflicts with it.
        tombstoned = tx.table(DELETED_ORDERS).scan(columns=["o_orderkey"])["o_orderkey"]
        originals = tx.table("orders").scan(
            columns=["o_orderkey"], filter=f"o_orderkey <= {cfg.base.max_orderkey}"
        )["o_orderkey"]
        live = pc.filter(originals, pc.invert(pc.is_in(originals, value_set=tombstoned)))
        chosen = sorted(rng.sample(live.to_pylist(), min(cfg.per_refresh, len(live))))
        tx.table(DELETED_ORDERS).append(pa.table({"o_orderkey": pa.array(chosen, pa.int64())}))
        tx.table(REFRESH_LOG).append(log_entry(cfg, seq, "RF2", tombstones=len(chosen)))
        tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
    return tx.commit_version


def writer_main(cfg: WriterConfig, start: Any, events: Any) -> None:
    """Process entry point: run ``cfg.refreshes`` refresh functions, retrying conflicts.

    Every writer waits at the ``start`` barrier before each step, so the
    writers' transactions really overlap: concurrent RF1s race for the same
    log version (the losers rebase and retry inside ``commit``, as their
    appends cannot conflict) and concurrent RF2s conflict on the tombstones
    they both read (the losers raise ConflictError and are re-run here).
    """
    try:
        stats = WriterStats()
        db = mere.connect(cfg.db_path, create=False)
        pinned = db.snapshot(version=cfg.base.load_version)
        templates = Templates(pinned.table("orders").scan(), pinned.table("lineitem").scan())
        for seq in range(cfg.refreshes):
            kind = refresh_kind(seq)
            try:
                start.wait(timeout=120)
            except threading.BrokenBarrierError:
                pass  # another writer failed or is late: carry on without it
            for attempt in range(1, cfg.max_attempts + 1):
                try:
                    if kind == "RF1":
                        version = run_rf1(db, cfg, seq, templates)
                    else:
                        version = run_rf2(db, cfg, seq, attempt)
                    break
                except (mere.ConflictError, mere.CommitOutcomeUnknown) as exc:
                    stats.conflicts += 1
                    name = type(exc).__name__
                    stats.conflict_kinds[name] = stats.conflict_kinds.get(name, 0) + 1
                    events.put(("conflict", cfg.writer, kind, name))
                    time.sleep(random.uniform(0, min(0.5, 0.01 * 2**attempt)))
            else:
                raise RuntimeError(
                    f"writer {cfg.writer}: {kind} step {seq} failed {cfg.max_attempts} times"
                )
            stats.commits += 1
            stats.rf1 += kind == "RF1"
            stats.rf2 += kind == "RF2"
            if version is not None:
                stats.versions.append(version)
            events.put(("commit", cfg.writer, kind, version))
        events.put(("done", "writer", cfg.writer, asdict(stats)))
    except BaseException:
        events.put(("error", "writer", cfg.writer, traceback.format_exc()))
        sys.exit(1)


# --- phase 3: readers -------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderConfig:
    """What one reader process needs."""

    db_path: str
    reader: int
    base: Baseline
    poll_seconds: float = 0.02


def reader_main(cfg: ReaderConfig, stop: Any, events: Any) -> None:
    """Process entry point: check the invariants at every version until told to stop.

    Each round opens the latest snapshot; versions committed since the last
    round that it skipped over are checked too, through time travel, so every
    version from the load on is checked exactly once. After ``stop`` is set
    one last round checks up to the final version.
    """
    try:
        db = mere.connect(cfg.db_path, create=False)
        next_version = cfg.base.load_version
        checked = 0
        latest_reads = 0
        violations = 0
        while True:
            stopping = stop.is_set()
            latest = db.snapshot()
            latest_reads += 1
            if latest.version < next_version - 1:
                violations += 1
                events.put(
                    ("violation", cfg.reader, latest.version, "the latest version went backwards")
                )
            for version in range(next_version, latest.version + 1):
                snap = latest if version == latest.version else db.snapshot(version=version)
                problems = check_invariants(snap, cfg.base)
                checked += 1
                for msg in problems:
                    violations += 1
                    if violations <= MAX_REPORTED_VIOLATIONS:
                        events.put(("violation", cfg.reader, version, msg))
                events.put(("checked", cfg.reader, version, len(problems)))
            progressed = latest.version >= next_version
            next_version = max(next_version, latest.version + 1)
            if stopping:
                break
            if not progressed:
                time.sleep(cfg.poll_seconds)
        events.put(
            (
                "done",
                "reader",
                cfg.reader,
                {
                    "versions_checked": checked,
                    "latest_reads": latest_reads,
                    "violations": violations,
                    "last_version": next_version - 1,
                },
            )
        )
    except BaseException:
        events.put(("error", "reader", cfg.reader, traceback.format_exc()))
        sys.exit(1)


@dataclass
class RefreshOutcome:
    """What the writers and readers reported."""

    writers: dict[int, dict[str, Any]] = field(default_factory=dict)
    readers: dict[int, dict[str, Any]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    checked_versions: set[int] = field(default_factory=set)


def run_refreshes(
    args: argparse.Namespace, db_path: Path, base: Baseline, console: Console
) -> RefreshOutcome:
    """Run the writer and reader processes and collect what they report."""
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    stop = ctx.Event()
    start = ctx.Barrier(args.writers)
    per_refresh = orders_per_refresh(args.scale_factor)
    readers = [
        ctx.Process(
            target=reader_main,
            args=(ReaderConfig(str(db_path), r, base), stop, events),
            name=f"reader-{r}",
        )
        for r in range(args.readers)
    ]
    writers = [
        ctx.Process(
            target=writer_main,
            args=(
                WriterConfig(
                    str(db_path),
                    w,
                    args.writers,
                    args.refreshes,
                    per_refresh,
                    args.seed,
                    args.max_attempts,
                    base,
                    torn=args.torn_rf1 and w == 0,
                ),
                start,
                events,
            ),
            name=f"writer-{w}",
        )
        for w in range(args.writers)
    ]
    out = RefreshOutcome()
    with make_progress(console) as progress:
        wtasks = {
            w: progress.add_task(f"writer {w}", total=args.refreshes, info="starting")
            for w in range(args.writers)
        }
        rtasks = {
            r: progress.add_task(f"reader {r}", total=None, info="starting")
            for r in range(args.readers)
        }
        for p in readers + writers:
            p.start()
        conflicts: Counter[int] = Counter()
        checked: Counter[int] = Counter()
        done: set[str] = set()
        procs = {p.name: p for p in readers + writers}
        while len(done) < len(procs):
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                for name, p in procs.items():
                    if name not in done and p.exitcode is not None:
                        # Drain what it sent before dying, then record the death.
                        time.sleep(0.2)
                        if name not in done and events.empty():
                            done.add(name)
                            out.errors.append(f"{name} exited with code {p.exitcode}")
                if all(f"writer-{w}" in done for w in range(args.writers)):
                    stop.set()
                continue
            kind = event[0]
            if kind == "commit":
                _, w, rf, version = event
                progress.update(
                    wtasks[w], advance=1, info=f"{rf} -> v{version}, {conflicts[w]} conflicts"
                )
            elif kind == "conflict":
                _, w, rf, name = event
                conflicts[w] += 1
                progress.update(wtasks[w], info=f"{rf} retry after {name}")
            elif kind == "checked":
                _, r, version, n = event
                checked[r] += 1
                out.checked_versions.add(version)
                progress.update(
                    rtasks[r], advance=1, info=f"v{version} {'OK' if n == 0 else 'VIOLATED'}"
                )
            elif kind == "violation":
                _, r, version, msg = event
                out.violations.append(f"reader {r}: {msg}")
                console.log(f"[red]violation[/red] reader {r} at v{version}: {msg}")
            elif kind == "done":
                _, role, i, stats = event
                done.add(f"{role}-{i}")
                if role == "writer":
                    out.writers[i] = stats
                    progress.update(wtasks[i], info=f"done, {stats['conflicts']} conflicts")
                else:
                    out.readers[i] = stats
                    progress.update(
                        rtasks[i], total=checked[i], info=f"done at v{stats['last_version']}"
                    )
            elif kind == "error":
                _, role, i, tb = event
                done.add(f"{role}-{i}")
                out.errors.append(f"{role} {i} failed:\n{tb}")
                console.log(f"[red]{role} {i} failed[/red]:\n{tb}")
            if all(f"writer-{w}" in done for w in range(args.writers)):
                stop.set()
    stop.set()
    for p in readers + writers:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            out.errors.append(f"{p.name} did not exit")
    return out


# --- phase 4: queries ---------------------------------------------------------------------


def live_orders_filter(keys: pa.ChunkedArray, tombstones: pa.ChunkedArray) -> pa.ChunkedArray:
    """True where an order key is not tombstoned."""
    return pc.invert(pc.is_in(keys, value_set=tombstones))


def tombstones_of(snap: mere.Snapshot) -> pa.ChunkedArray:
    return snap.table(DELETED_ORDERS).scan(columns=["o_orderkey"])["o_orderkey"]


def q1(snap: mere.Snapshot) -> pa.Table:
    """TPC-H Q1, pricing summary report."""
    li = snap.table("lineitem").scan(
        columns=[
            "l_orderkey",
            "l_returnflag",
            "l_linestatus",
            "l_quantity",
            "l_extendedprice",
            "l_discount",
            "l_tax",
        ],
        filter=f"l_shipdate <= DATE '{Q1_SHIPDATE}'",
    )
    li = li.filter(live_orders_filter(li["l_orderkey"], tombstones_of(snap)))
    disc_price = pc.multiply(li["l_extendedprice"], pc.subtract(ONE, li["l_discount"]))
    disc_price = disc_price.cast(pa.decimal128(20, 4))
    charge = pc.multiply(disc_price, pc.add(ONE, li["l_tax"]))
    avg_type = pa.decimal128(20, 4)
    li = (
        li.append_column("disc_price", disc_price)
        .append_column("charge", charge)
        .append_column("qty4", li["l_quantity"].cast(avg_type))
        .append_column("price4", li["l_extendedprice"].cast(avg_type))
        .append_column("disc4", li["l_discount"].cast(avg_type))
    )
    out = li.group_by(["l_returnflag", "l_linestatus"]).aggregate(
        [
            ("l_quantity", "sum"),
            ("l_extendedprice", "sum"),
            ("disc_price", "sum"),
            ("charge", "sum"),
            ("qty4", "mean"),
            ("price4", "mean"),
            ("disc4", "mean"),
            ("l_orderkey", "count"),
        ]
    )
    out = out.rename_columns(
        [
            "l_returnflag",
            "l_linestatus",
            "sum_qty",
            "sum_base_price",
            "sum_disc_price",
            "sum_charge",
            "avg_qty",
            "avg_price",
            "avg_disc",
            "count_order",
        ]
    )
    return out.sort_by([("l_returnflag", "ascending"), ("l_linestatus", "ascending")])


def q6(snap: mere.Snapshot) -> pa.Table:
    """TPC-H Q6, forecasting revenue change (the filter is pushed into the scan)."""
    li = snap.table("lineitem").scan(
        columns=["l_orderkey", "l_extendedprice", "l_discount"],
        filter=(
            "l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' "
            "AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24"
        ),
    )
    li = li.filter(live_orders_filter(li["l_orderkey"], tombstones_of(snap)))
    revenue = pc.sum(pc.multiply(li["l_extendedprice"], li["l_discount"]))
    return pa.table({"revenue": pa.array([revenue.as_py()], revenue.type)})


def q3(snap: mere.Snapshot) -> pa.Table:
    """TPC-H Q3, shipping priority: the 10 unshipped orders of highest value."""
    customers = snap.table("customer").scan(
        columns=["c_custkey"], filter="c_mktsegment = 'BUILDING'"
    )["c_custkey"]
    orders = snap.table("orders").scan(
        columns=["o_orderkey", "o_custkey", "o_orderdate", "o_shippriority"],
        filter="o_orderdate < DATE '1995-03-15'",
    )
    orders = orders.filter(pc.is_in(orders["o_custkey"], value_set=customers))
    orders = orders.filter(live_orders_filter(orders["o_orderkey"], tombstones_of(snap)))
    li = snap.table("lineitem").scan(
        columns=["l_orderkey", "l_extendedprice", "l_discount"],
        filter="l_shipdate > DATE '1995-03-15'",
    )
    li = li.append_column(
        "volume", pc.multiply(li["l_extendedprice"], pc.subtract(ONE, li["l_discount"]))
    )
    joined = li.select(["l_orderkey", "volume"]).join(
        orders.select(["o_orderkey", "o_orderdate", "o_shippriority"]),
        keys="l_orderkey",
        right_keys="o_orderkey",
        join_type="inner",
    )
    out = joined.group_by(["l_orderkey", "o_orderdate", "o_shippriority"]).aggregate(
        [("volume", "sum")]
    )
    out = out.rename_columns(["l_orderkey", "o_orderdate", "o_shippriority", "revenue"])
    out = out.select(["l_orderkey", "revenue", "o_orderdate", "o_shippriority"])
    out = out.sort_by(
        [("revenue", "descending"), ("o_orderdate", "ascending"), ("l_orderkey", "ascending")]
    )
    return out.slice(0, 10)


QUERIES: dict[str, Callable[[mere.Snapshot], pa.Table]] = {"Q1": q1, "Q6": q6, "Q3": q3}


def show_result(console: Console, title: str, result: pa.Table, rows: int = 5) -> None:
    """Print the first rows of a query result as a rich table (decimals to 2 places)."""

    def cell(value: Any) -> str:
        return f"{value:.2f}" if isinstance(value, Decimal) else str(value)

    console.print(f"[bold]{title}[/bold]")
    table = RichTable(show_lines=False)
    for name in result.column_names:
        is_text = pa.types.is_string(result.schema.field(name).type)
        table.add_column(name, justify="left" if is_text else "right")
    for row in result.slice(0, rows).to_pylist():
        table.add_row(*(cell(row[name]) for name in result.column_names))
    if result.num_rows > rows:
        table.caption = f"{result.num_rows - rows} more row(s)"
    console.print(table)


# --- main ---------------------------------------------------------------------------------


def make_progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[info]}"),
        console=console,
    )


@contextmanager
def phase(name: str, times: dict[str, float], console: Console) -> Iterator[None]:
    """Time a phase and print a rule before it."""
    console.rule(f"[bold cyan]{name}")
    start = time.perf_counter()
    try:
        yield
    finally:
        times[name] = time.perf_counter() - start


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--scale-factor", type=float, default=0.1, help="TPC-H scale factor")
    parser.add_argument(
        "--workdir", type=Path, default=Path("data/tpch"), help="where data and database live"
    )
    parser.add_argument("--writers", type=int, default=2, help="refresh writer processes")
    parser.add_argument("--readers", type=int, default=2, help="invariant reader processes")
    parser.add_argument("--refreshes", type=int, default=4, help="refresh functions per writer")
    parser.add_argument("--seed", type=int, default=42, help="seed for the refresh functions")
    parser.add_argument(
        "--max-attempts", type=int, default=20, help="attempts per refresh function on conflicts"
    )
    parser.add_argument(
        "--torn-rf1",
        action="store_true",
        help="demonstrate a violation: writer 0 commits its first RF1 as two "
        "transactions, which the readers must catch (the run then exits 1)",
    )
    parser.add_argument(
        "--summary-json", type=Path, default=None, help="also write the summary here as JSON"
    )
    args = parser.parse_args(argv)
    if args.scale_factor <= 0:
        parser.error("--scale-factor must be positive")
    for name in ("writers", "readers", "refreshes", "max_attempts"):
        if getattr(args, name) < (1 if name != "readers" else 0):
            parser.error(f"--{name.replace('_', '-')} is too small")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline; return the exit status (0: every invariant held)."""
    args = parse_args(argv)
    # Wide enough for the query results when the output is not a terminal.
    console = Console(log_path=False, width=None if sys.stdout.isatty() else 140)
    times: dict[str, float] = {}
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    db_path = workdir / "db"
    console.print(
        f"[bold]mere TPC-H pipeline[/bold]: SF {args.scale_factor:g}, {args.writers} writer(s), "
        f"{args.readers} reader(s), {args.refreshes} refresh(es) each, seed {args.seed}, "
        f"workdir {workdir}"
    )

    with phase("generate", times, console):
        data_dir, generated = generate_data(workdir, args.scale_factor, console)
        console.log(f"{'generated' if generated else 'reusing'} TPC-H parquet in {data_dir}")

    with phase("load", times, console):
        shutil.rmtree(db_path, ignore_errors=True)
        db = mere.connect(str(db_path))
        with make_progress(console) as progress:
            load_version, rows = load_database(db, data_dir, progress)
        pinned = db.snapshot(version=load_version)
        base = compute_baseline(pinned)
        console.log(
            f"loaded {sum(rows.values()):,} rows into {len(rows) + 2} tables at version "
            f"{load_version}: " + ", ".join(f"{n} {c:,}" for n, c in rows.items())
        )
        load_problems = check_invariants(pinned, base)
        if base.childless_orders:
            console.log(f"[yellow]{len(base.childless_orders)} original orders have no lineitems")

    with phase("queries at the load version", times, console):
        before = {name: query(pinned) for name, query in QUERIES.items()}
        for name, result in before.items():
            show_result(console, f"{name} at version {load_version} (pinned)", result)

    with phase("refresh + readers", times, console):
        outcome = run_refreshes(args, db_path, base, console)

    with phase("queries after the refreshes", times, console):
        latest = db.snapshot()
        after = {name: query(latest) for name, query in QUERIES.items()}
        for name, result in after.items():
            show_result(console, f"{name} at version {latest.version} (latest)", result)
        again = {name: query(db.snapshot(version=load_version)) for name, query in QUERIES.items()}
        time_travel_ok = {name: again[name].equals(before[name]) for name in QUERIES}
        for name, ok in time_travel_ok.items():
            status = "[green]identical[/green]" if ok else "[red]DIFFERENT[/red]"
            changed = "changed" if not after[name].equals(before[name]) else "unchanged"
            console.log(
                f"{name} re-run at pinned version {load_version}: {status}; "
                f"at latest version {latest.version}: {changed}"
            )

    with phase("final check", times, console):
        final_problems = check_invariants(latest, base)
        console.log(
            f"invariants at the final version {latest.version}: "
            + ("[green]hold[/green]" if not final_problems else "[red]VIOLATED[/red]")
        )

    own = (
        [f"load: {m}" for m in load_problems]
        + [f"final: {m}" for m in final_problems]
        + [
            f"time travel: {n} differs at the pinned version"
            for n, ok in time_travel_ok.items()
            if not ok
        ]
    )
    violations = own + outcome.violations
    # Readers send at most MAX_REPORTED_VIOLATIONS messages each, but count them all.
    n_violations = len(own) + max(
        len(outcome.violations), sum(r["violations"] for r in outcome.readers.values())
    )
    expected_commits = args.writers * args.refreshes
    commits = sum(w.get("commits", 0) for w in outcome.writers.values())
    errors = list(outcome.errors)
    if commits != expected_commits:
        errors.append(f"{commits} refreshes committed, {expected_commits} expected")
    all_versions = set(range(load_version, latest.version + 1))
    unchecked = sorted(all_versions - outcome.checked_versions) if args.readers else []
    if unchecked:
        errors.append(f"versions never checked by a reader: {unchecked[:10]}")

    summary: dict[str, Any] = {
        "scale_factor": args.scale_factor,
        "load_version": load_version,
        "final_version": latest.version,
        "versions_created": latest.version - load_version,
        "commits_per_writer": {w: s["commits"] for w, s in sorted(outcome.writers.items())},
        "rf1_per_writer": {w: s["rf1"] for w, s in sorted(outcome.writers.items())},
        "rf2_per_writer": {w: s["rf2"] for w, s in sorted(outcome.writers.items())},
        "conflicts_retried": sum(s["conflicts"] for s in outcome.writers.values()),
        "conflicts_per_writer": {w: s["conflicts"] for w, s in sorted(outcome.writers.items())},
        "conflict_kinds": dict(
            sum((Counter(s["conflict_kinds"]) for s in outcome.writers.values()), Counter())
        ),
        "versions_checked_per_reader": {
            r: s["versions_checked"] for r, s in sorted(outcome.readers.items())
        },
        "versions_checked": sum(s["versions_checked"] for s in outcome.readers.values()),
        "distinct_versions_checked": len(outcome.checked_versions),
        "violations": n_violations,
        "violation_messages": violations[:50],
        "time_travel_identical": all(time_travel_ok.values()),
        "errors": errors,
        "phase_seconds": {k: round(v, 3) for k, v in times.items()},
        "total_seconds": round(sum(times.values()), 3),
    }
    db.close()
    print_summary(console, summary)
    if args.summary_json:
        args.summary_json.write_text(json.dumps(summary, indent=2) + "\n")
    ok = n_violations == 0 and not errors
    console.print(
        "[bold green]OK[/bold green]: every invariant held at every version checked"
        if ok
        else "[bold red]FAILED[/bold red]: see the violations and errors above"
    )
    return 0 if ok else 1


def print_summary(console: Console, s: dict[str, Any]) -> None:
    """The final summary table."""
    table = RichTable(title="Summary", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")

    def per(d: dict[int, int]) -> str:
        return " / ".join(str(v) for v in d.values()) + f"  (total {sum(d.values())})"

    table.add_row("versions created by refreshes", str(s["versions_created"]))
    table.add_row("load version -> final version", f"{s['load_version']} -> {s['final_version']}")
    table.add_row("commits per writer", per(s["commits_per_writer"]))
    table.add_row(
        "RF1 / RF2 commits",
        f"{sum(s['rf1_per_writer'].values())} / {sum(s['rf2_per_writer'].values())}",
    )
    table.add_row("conflicts retried per writer", per(s["conflicts_per_writer"]))
    if s["conflict_kinds"]:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(s["conflict_kinds"].items()))
        table.add_row("conflict kinds", kinds)
    table.add_row("versions checked per reader", per(s["versions_checked_per_reader"]))
    table.add_row("distinct versions checked", str(s["distinct_versions_checked"]))
    style = "green" if s["violations"] == 0 else "red"
    table.add_row("invariant violations", f"[{style}]{s['violations']}[/{style}]")
    table.add_row("time travel identical", str(s["time_travel_identical"]))
    table.add_row("errors", str(len(s["errors"])))
    for name, seconds in s["phase_seconds"].items():
        table.add_row(f"time: {name}", f"{seconds:.2f} s")
    table.add_row("time: total", f"{s['total_seconds']:.2f} s")
    console.print(table)
    for msg in s["violation_messages"]:
        console.print(f"[red]violation[/red] {msg}")
    for msg in s["errors"]:
        console.print(f"[red]error[/red] {msg}")


if __name__ == "__main__":
    sys.exit(main())
