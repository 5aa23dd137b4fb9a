"""TPC-H on mere with Spark: a multi-table load, concurrent refreshes, consistent readers.

The pipeline shows what one database-wide log buys: several tables changed by
one atomic commit, and readers that see every table at one version.

1. **spark start**: a local Spark session (``local[2]``, UI off);
2. **generate** TPC-H data as Parquet with ``tpchgen-cli`` (skipped when the
   data for the scale factor is already in the work directory);
3. **load** the 8 TPC-H tables with Spark (``spark.read.parquet`` then
   ``mere.spark.write``) into a fresh database in ONE transaction, together
   with the bookkeeping table ``refresh_log``;
4. **queries at the load version**: TPC-H Q1, Q6 and Q3 as Spark SQL over
   temporary views read from the database at the load version;
5. **refresh + readers**: ``--writers`` processes run TPC-H refresh functions
   as multi-table transactions (pyarrow side), retrying on conflicts, while
   ``--readers`` processes check cross-table invariants at every version;
6. **queries after the refreshes**: Q1, Q6, Q3 at the latest version, then
   again at the load version: time travel must give identical results;
7. **summary**: versions, commits, conflicts, checks, violations, phase times.

Refresh functions (each one transaction over ``orders``, ``lineitem`` and
``refresh_log``):

* **RF1** inserts new orders *and* their lineitems. New order keys lie above
  the largest original key, in a block unique to the writer and step; order
  ``k`` gets exactly ``1 + k % 7`` lineitems, copied from an original order
  with that many lines.
* **RF2** deletes original orders *and* their lineitems (``DELETE ... WHERE
  o_orderkey IN (...)`` on both tables). Two RF2s running at once rewrite the
  same data files, so one of them gets a ``ConflictError`` and is re-run.

Each refresh also appends one ``refresh_log`` row with the change in the
number of orders and lineitems, so readers can check that the counts move
together. Run ``python examples/tpch_pipeline.py --help``;
``scripts/example.sh`` sets up the virtual environment and runs it. Exit
status 0 means every invariant held at every version checked; 1 means a
violation or a failure.
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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

import mere

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
REFRESH_LOG = "refresh_log"

REFRESH_LOG_SCHEMA = pa.schema(
    [
        pa.field("writer", pa.int32(), nullable=False),
        pa.field("seq", pa.int32(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "RF1" or "RF2"
        pa.field("orders", pa.int64(), nullable=False),  # change in orders: + RF1, - RF2
        pa.field("lineitems", pa.int64(), nullable=False),  # change in lineitems: + RF1, - RF2
    ]
)
#: How many violation messages one reader sends at most (the count is always exact).
MAX_REPORTED_VIOLATIONS = 20

#: TPC-H queries as Spark SQL text, over temporary views named like the tables.
QUERIES: dict[str, str] = {
    "Q1": """
        SELECT l_returnflag, l_linestatus,
               sum(l_quantity) AS sum_qty,
               sum(l_extendedprice) AS sum_base_price,
               sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
               sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge,
               avg(l_quantity) AS avg_qty,
               avg(l_extendedprice) AS avg_price,
               avg(l_discount) AS avg_disc,
               count(*) AS count_order
        FROM lineitem
        WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
        GROUP BY l_returnflag, l_linestatus
        ORDER BY l_returnflag, l_linestatus
    """,
    "Q6": """
        SELECT sum(l_extendedprice * l_discount) AS revenue
        FROM lineitem
        WHERE l_shipdate >= DATE '1994-01-01'
          AND l_shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR
          AND l_discount BETWEEN 0.06 - 0.01 AND 0.06 + 0.01
          AND l_quantity < 24
    """,
    "Q3": """
        SELECT l_orderkey,
               sum(l_extendedprice * (1 - l_discount)) AS revenue,
               o_orderdate, o_shippriority
        FROM customer, orders, lineitem
        WHERE c_mktsegment = 'BUILDING'
          AND c_custkey = o_custkey
          AND l_orderkey = o_orderkey
          AND o_orderdate < DATE '1995-03-15'
          AND l_shipdate > DATE '1995-03-15'
        GROUP BY l_orderkey, o_orderdate, o_shippriority
        ORDER BY revenue DESC, o_orderdate, l_orderkey
        LIMIT 10
    """,
}


# --- small helpers -------------------------------------------------------------


def lines_for(orderkey: int) -> int:
    """How many lineitems the RF1 order with this key has (1 to 7, as in TPC-H)."""
    return 1 + orderkey % 7


def orders_per_refresh(scale_factor: float) -> int:
    """Orders inserted by one RF1 or deleted by one RF2: SF * 1500, as in TPC-H."""
    return max(1, round(1500 * scale_factor))


def writer_app_id(writer: int) -> str:
    """The application-transaction id a writer records its progress under."""
    return f"tpch-refresh-writer-{writer}"


def refresh_kind(seq: int) -> str:
    """RF1 on even steps, RF2 on odd ones, for every writer (so RF2s overlap)."""
    return "RF1" if seq % 2 == 0 else "RF2"


def scale_dir_name(scale_factor: float) -> str:
    """The data directory's name for a scale factor (``sf0.1``)."""
    return f"sf{scale_factor:g}"


# --- phase: spark start ------------------------------------------------------------


def java_missing() -> str | None:
    """Why Spark cannot start for lack of Java, or None when a ``java`` is found."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return None
    if shutil.which("java"):
        return None
    return (
        "Spark needs Java 17 and no `java` was found (nor JAVA_HOME): install it, "
        "e.g. `sudo apt-get install openjdk-17-jre-headless`, or set JAVA_HOME"
    )


def start_spark(master: str = "local[2]", shuffle_partitions: int = 4) -> SparkSession:
    """A local Spark session for the load and the queries.

    Spark's Python workers run this interpreter (so they import the same
    mere); the UI and the console progress bars are off; few shuffle
    partitions suit the small joins and aggregations of the queries.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("mere-tpch-pipeline")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- phase: generate -----------------------------------------------------------------


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


# --- phase: load -----------------------------------------------------------------------


@dataclass(frozen=True)
class Baseline:
    """What the load committed, and how RF1 assigns keys: the invariants' reference."""

    load_version: int
    max_orderkey: int  # the largest original order key; RF1 keys lie above it
    orders: int  # original order count
    lineitems: int  # original lineitem count
    childless_orders: tuple[int, ...]  # original orders without lineitems (TPC-H: none)
    per_refresh: int = 0  # orders per RF1 key block (0: the per-step check is skipped)
    refreshes: int = 0  # refresh steps per writer (RF1 block = writer * refreshes + seq)


def load_database(
    spark: SparkSession, db: mere.Database, data_dir: Path, progress: Progress
) -> tuple[int, dict[str, int]]:
    """Load every table with Spark in ONE transaction; return its version and row counts.

    ``spark.read.parquet`` reads each tpchgen file; ``mere.spark.write`` has
    the executors write the table's data files, which become visible only
    when the transaction commits, all 8 tables at once. No type needs
    normalizing: Spark reads tpchgen's strings as ``StringType`` and keeps
    its decimals, dates and integers.
    """
    import mere.spark

    files = {name: data_dir / f"{name}.parquet" for name in TPCH_TABLES}
    total = sum(pq.ParquetFile(path).metadata.num_rows for path in files.values())
    task = progress.add_task("load (one transaction)", total=total, info="")
    rows: dict[str, int] = {}
    with db.transaction() as tx:
        for name, path in files.items():
            progress.update(task, info=f"spark writes {name}")
            rows[name] = mere.spark.write(tx, spark.read.parquet(str(path)), name, mode="append")
            progress.update(task, advance=rows[name])
        tx.create_table(REFRESH_LOG, REFRESH_LOG_SCHEMA)
        progress.update(task, info="committing")
    assert tx.commit_version is not None
    progress.update(task, info=f"committed version {tx.commit_version}")
    return tx.commit_version, rows


def compute_baseline(snap: mere.Snapshot, per_refresh: int = 0, refreshes: int = 0) -> Baseline:
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
        per_refresh=per_refresh,
        refreshes=refreshes,
    )


# --- invariants ----------------------------------------------------------------------


def _sample(values: pa.Array | pa.ChunkedArray | list[Any], limit: int = 5) -> str:
    items = sorted(values if isinstance(values, list) else values.to_pylist())
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return f"{items[:limit]}{more}"


def _total(values: pa.ChunkedArray) -> int:
    return int(pc.sum(values).as_py() or 0)


def _rf1_steps(keys: pa.ChunkedArray, base: Baseline) -> Counter[int]:
    """How many of these RF1 keys fall in each RF1 key block (writer * refreshes + seq)."""
    offsets = pc.subtract(keys, base.max_orderkey + 1)
    blocks = pc.divide(offsets, base.per_refresh)  # integer division: keys are above the range
    counts = pc.value_counts(blocks)
    return Counter(
        dict(
            zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(), strict=True)
        )
    )


def check_invariants(snap: mere.Snapshot, base: Baseline) -> list[str]:
    """Every cross-table invariant at one version; returns the violations (empty: all hold).

    * order keys are unique; every lineitem has its order (no orphans); no
      order lacks lineitems unless it already did in the load (none in TPC-H);
    * every RF1 order ``k`` has exactly ``1 + k % 7`` lineitems numbered 1..n;
    * ``refresh_log`` accounts for every row: the orders and lineitems
      columns add up to how much each table changed since the load, RF1's to
      the rows above the original keys and RF2's to the original rows
      deleted; with ``base.per_refresh``, each RF1 row matches the orders and
      lineitems in its own key block, and no block has rows without a log row;
    * ``refresh_log`` has one row per commit since the load (each refresh is
      one commit), no refresh step twice, RF1 rows only add and RF2 rows only
      delete.
    """
    v = snap.version
    bad: list[str] = []
    okeys = snap.table("orders").scan(columns=["o_orderkey"])["o_orderkey"]
    items = snap.table("lineitem").scan(columns=["l_orderkey", "l_linenumber"])
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
    new_childless = sorted(set(childless.to_pylist()) - set(base.childless_orders))
    if new_childless:
        bad.append(
            f"v{v}: {len(new_childless)} order(s) without lineitems {_sample(new_childless)}"
        )

    new_orders = pc.filter(okeys, pc.greater(okeys, base.max_orderkey))
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
    for what, logged, actual in (
        ("orders", _total(rlog["orders"]), len(okeys) - base.orders),
        ("lineitems", _total(rlog["lineitems"]), len(lkeys) - base.lineitems),
        ("RF1 orders", _total(rf1["orders"]), len(new_orders)),
        ("RF1 lineitems", _total(rf1["lineitems"]), new_items.num_rows),
        ("RF2 orders", _total(rf2["orders"]), len(okeys) - len(new_orders) - base.orders),
        (
            "RF2 lineitems",
            _total(rf2["lineitems"]),
            len(lkeys) - new_items.num_rows - base.lineitems,
        ),
    ):
        if logged != actual:
            bad.append(
                f"v{v}: refresh_log records {what} {logged:+d}, the tables changed {actual:+d}"
            )
    if (len(rf1) and pc.min(rf1["orders"]).as_py() < 0) or (
        len(rf2) and pc.max(rf2["orders"]).as_py() > 0
    ):
        bad.append(f"v{v}: an RF1 log row deletes orders or an RF2 log row adds some")

    if base.per_refresh and base.refreshes:
        steps = pc.add(pc.multiply(rf1["writer"], base.refreshes), rf1["seq"]).to_pylist()
        logged_orders = dict(zip(steps, rf1["orders"].to_pylist(), strict=True))
        logged_items = dict(zip(steps, rf1["lineitems"].to_pylist(), strict=True))
        found_orders = _rf1_steps(new_orders, base)
        found_items = _rf1_steps(new_items["l_orderkey"], base)
        for step in sorted(set(logged_orders) | set(found_orders) | set(found_items)):
            got = (found_orders.get(step, 0), found_items.get(step, 0))
            want = (logged_orders.get(step, 0), logged_items.get(step, 0))
            if got != want:
                writer, seq = divmod(step, base.refreshes)
                bad.append(
                    f"v{v}: RF1 step {seq} of writer {writer} logged {want[0]} orders and "
                    f"{want[1]} lineitems, its key block holds {got[0]} and {got[1]}"
                )

    if rlog.num_rows != v - base.load_version:
        bad.append(
            f"v{v}: {rlog.num_rows} refresh_log rows for {v - base.load_version} commits "
            "since the load (a commit without its log row, or the reverse)"
        )
    steps_seen = Counter(zip(rlog["writer"].to_pylist(), rlog["seq"].to_pylist(), strict=True))
    twice = sorted(k for k, n in steps_seen.items() if n > 1)
    if twice:
        bad.append(f"v{v}: refresh steps committed twice: {twice[:5]}")
    return bad


# --- phase: refresh writers ------------------------------------------------------------


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
    orders_inserted: int = 0
    lineitems_inserted: int = 0
    orders_deleted: int = 0
    lineitems_deleted: int = 0


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


def log_entry(writer: int, seq: int, kind: str, orders: int, lineitems: int) -> pa.Table:
    """The ``refresh_log`` row a refresh commits together with its data (signed changes)."""
    row = {"writer": writer, "seq": seq, "kind": kind, "orders": orders, "lineitems": lineitems}
    return pa.Table.from_pylist([row], schema=REFRESH_LOG_SCHEMA)


def run_rf1(
    db: mere.Database, cfg: WriterConfig, seq: int, templates: Templates, stats: WriterStats
) -> int | None:
    """Insert new orders and their lineitems in one transaction; None if already done."""
    rng = random.Random(f"{cfg.seed}-rf1-{cfg.writer}-{seq}")
    orders, items = templates.make_orders(rf1_keys(cfg, seq), rng)
    entry = log_entry(cfg.writer, seq, "RF1", orders.num_rows, items.num_rows)
    if cfg.torn and seq == 0:
        # Deliberately wrong, for --torn-rf1: the orders (and the log row) commit
        # first, their lineitems in a second transaction. The version in between
        # has orders without lineitems, and the readers must report it.
        with db.transaction() as tx:
            tx.table("orders").append(orders)
            tx.table(REFRESH_LOG).append(entry)
        with db.transaction() as tx:
            tx.table("lineitem").append(items)
            tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
    else:
        with db.transaction() as tx:
            if (tx.app_version(writer_app_id(cfg.writer)) or 0) > seq:
                return None  # committed by an earlier attempt whose outcome was unknown
            tx.table("orders").append(orders)
            tx.table("lineitem").append(items)
            tx.table(REFRESH_LOG).append(entry)
            tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
    stats.orders_inserted += orders.num_rows
    stats.lineitems_inserted += items.num_rows
    return tx.commit_version


def run_rf2(
    db: mere.Database, cfg: WriterConfig, seq: int, attempt: int, stats: WriterStats
) -> int | None:
    """Delete original orders and their lineitems in one transaction; None if already done.

    The orders to delete are picked among the original orders this
    transaction reads; deleting rewrites the data files that hold them
    (copy-on-write). A concurrent RF2 that rewrote the same files first makes
    this commit fail with a ``ConflictError`` (the caller re-runs it, picking
    again). A concurrent RF1 only appends files whose statistics show keys
    above the original range, so it never conflicts with an RF2.
    """
    rng = random.Random(f"{cfg.seed}-rf2-{cfg.writer}-{seq}-{attempt}")
    with db.transaction() as tx:
        if (tx.app_version(writer_app_id(cfg.writer)) or 0) > seq:
            return None
        originals = tx.table("orders").scan(
            columns=["o_orderkey"], filter=f"o_orderkey <= {cfg.base.max_orderkey}"
        )["o_orderkey"]
        chosen = sorted(rng.sample(originals.to_pylist(), min(cfg.per_refresh, len(originals))))
        keys = ", ".join(str(k) for k in chosen) or "NULL"
        orders = tx.table("orders").delete(f"o_orderkey IN ({keys})")
        lineitems = tx.table("lineitem").delete(f"l_orderkey IN ({keys})")
        tx.table(REFRESH_LOG).append(log_entry(cfg.writer, seq, "RF2", -orders, -lineitems))
        tx.set_app_transaction(writer_app_id(cfg.writer), seq + 1)
    stats.orders_deleted += orders
    stats.lineitems_deleted += lineitems
    return tx.commit_version


def writer_main(cfg: WriterConfig, start: Any, events: Any) -> None:
    """Process entry point: run ``cfg.refreshes`` refresh functions, retrying conflicts.

    Every writer waits at the ``start`` barrier before each step, so the
    writers' transactions really overlap: concurrent RF1s race for the same
    log version (the losers rebase inside ``commit``, as blind appends cannot
    conflict) and concurrent RF2s conflict on the files they both rewrite
    (the losers raise ConflictError and are re-run here, at most
    ``cfg.max_attempts`` times).
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
                        version = run_rf1(db, cfg, seq, templates, stats)
                    else:
                        version = run_rf2(db, cfg, seq, attempt, stats)
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


# --- phase: readers ----------------------------------------------------------------------


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


# --- phase: queries (Spark SQL) -------------------------------------------------------------


def register_views(spark: SparkSession, uri: str, version: int) -> None:
    """A temporary view per TPC-H table, reading the database at ``version``.

    ``mere.spark.read`` resolves the version's live data files from the log
    and reads them with Spark's own Parquet reader (column pruning and
    row-group skipping included), so each view is pinned to that version.
    """
    import mere.spark

    for name in TPCH_TABLES:
        mere.spark.read(spark, uri, name, version=version).createOrReplaceTempView(name)


def run_queries(
    spark: SparkSession, uri: str, version: int, console: Console | None = None
) -> dict[str, pa.Table]:
    """Run every query in :data:`QUERIES` as Spark SQL at ``version``; results as Arrow."""
    register_views(spark, uri, version)
    results = {}
    for name, sql in QUERIES.items():
        start = time.perf_counter()
        results[name] = spark.sql(sql).toArrow()
        if console is not None:
            console.log(
                f"{name} at version {version}: {results[name].num_rows} row(s) "
                f"in {time.perf_counter() - start:.2f} s"
            )
    return results


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
    """The progress display shared by the phases."""
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
    """Time a phase, print a rule before it and its elapsed time after it."""
    console.rule(f"[bold cyan]{name}")
    start = time.perf_counter()
    try:
        yield
    finally:
        times[name] = time.perf_counter() - start
        console.log(f"[cyan]{name}[/cyan] took {times[name]:.2f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line options."""
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
    parser.add_argument("--spark-master", default="local[2]", help="Spark master URL")
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
    problem = java_missing()
    if problem:
        console.print(f"[bold red]error[/bold red]: {problem}")
        return 2
    times: dict[str, float] = {}
    workdir: Path = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    db_path = workdir / "db"
    uri = str(db_path)
    console.print(
        f"[bold]mere TPC-H pipeline[/bold]: SF {args.scale_factor:g}, {args.writers} writer(s), "
        f"{args.readers} reader(s), {args.refreshes} refresh(es) each, seed {args.seed}, "
        f"workdir {workdir}"
    )

    with phase("spark start", times, console):
        spark = start_spark(args.spark_master)
        console.log(f"Spark {spark.version} ({args.spark_master}), Python workers {sys.executable}")

    with phase("generate", times, console):
        data_dir, generated = generate_data(workdir, args.scale_factor, console)
        console.log(f"{'generated' if generated else 'reusing'} TPC-H parquet in {data_dir}")

    with phase("load", times, console):
        shutil.rmtree(db_path, ignore_errors=True)
        db = mere.connect(uri)
        with make_progress(console) as progress:
            load_version, rows = load_database(spark, db, data_dir, progress)
        pinned = db.snapshot(version=load_version)
        base = compute_baseline(pinned, orders_per_refresh(args.scale_factor), args.refreshes)
        console.log(
            f"loaded {sum(rows.values()):,} rows into {len(rows) + 1} tables at version "
            f"{load_version}: " + ", ".join(f"{n} {c:,}" for n, c in rows.items())
        )
        load_problems = check_invariants(pinned, base)
        if base.childless_orders:
            console.log(f"[yellow]{len(base.childless_orders)} original orders have no lineitems")

    queries_run: list[str] = []
    with phase("queries at the load version", times, console):
        before = run_queries(spark, uri, load_version, console)
        for name, result in before.items():
            show_result(console, f"{name} at version {load_version} (pinned)", result)
            queries_run.append(f"{name}@v{load_version}")

    with phase("refresh + readers", times, console):
        outcome = run_refreshes(args, db_path, base, console)

    with phase("queries after the refreshes", times, console):
        latest = db.snapshot()
        after = run_queries(spark, uri, latest.version, console)
        for name, result in after.items():
            show_result(console, f"{name} at version {latest.version} (latest)", result)
            queries_run.append(f"{name}@v{latest.version}")
        again = run_queries(spark, uri, load_version, console)
        queries_run += [f"{name}@v{load_version}" for name in again]
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
        final_rows = {
            name: latest.table(name).scan(columns=[col]).num_rows
            for name, col in (("orders", "o_orderkey"), ("lineitem", "l_orderkey"))
        }
    spark.stop()

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

    def total(key: str) -> int:
        return sum(s.get(key, 0) for s in outcome.writers.values())

    summary: dict[str, Any] = {
        "scale_factor": args.scale_factor,
        "load_version": load_version,
        "final_version": latest.version,
        "versions_created": latest.version - load_version,
        "commits_per_writer": {w: s["commits"] for w, s in sorted(outcome.writers.items())},
        "rf1_per_writer": {w: s["rf1"] for w, s in sorted(outcome.writers.items())},
        "rf2_per_writer": {w: s["rf2"] for w, s in sorted(outcome.writers.items())},
        "orders_inserted": total("orders_inserted"),
        "lineitems_inserted": total("lineitems_inserted"),
        "orders_deleted": total("orders_deleted"),
        "lineitems_deleted": total("lineitems_deleted"),
        "rows_loaded": {"orders": base.orders, "lineitem": base.lineitems},
        "rows_final": final_rows,
        "conflicts_retried": total("conflicts"),
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
        "spark_queries_run": queries_run,
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
    table.add_row(
        "orders: loaded, +RF1, -RF2, final",
        f"{s['rows_loaded']['orders']:,} +{s['orders_inserted']:,} "
        f"-{s['orders_deleted']:,} = {s['rows_final']['orders']:,}",
    )
    table.add_row(
        "lineitems: loaded, +RF1, -RF2, final",
        f"{s['rows_loaded']['lineitem']:,} +{s['lineitems_inserted']:,} "
        f"-{s['lineitems_deleted']:,} = {s['rows_final']['lineitem']:,}",
    )
    table.add_row("conflicts retried per writer", per(s["conflicts_per_writer"]))
    if s["conflict_kinds"]:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(s["conflict_kinds"].items()))
        table.add_row("conflict kinds", kinds)
    table.add_row("versions checked per reader", per(s["versions_checked_per_reader"]))
    table.add_row("distinct versions checked", str(s["distinct_versions_checked"]))
    style = "green" if s["violations"] == 0 else "red"
    table.add_row("invariant violations", f"[{style}]{s['violations']}[/{style}]")
    table.add_row("Spark SQL queries run", str(len(s["spark_queries_run"])))
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
