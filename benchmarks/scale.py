"""Metadata at scale: mere beside delta-rs on tables of 1k to 1M live files, and 100k commits.

The databases are written directly from the formats' documents (mere's
``docs/format.md``, Delta's PROTOCOL.md), not through either library, so that a
million-file table takes a minute to build instead of hours:

* ``files-N`` (N = 1k, 10k, 100k, 1M): one table (``id`` int64, ``value``
  float64, ``label`` string, ``ts`` timestamp[us, UTC]) whose files are added by
  100 commits of N/100 files each. The checkpoint sits after the 99th; a tail of
  50 commits follows: the 100th batch, then 49 one-file commits, every fifth
  also removing an early file. So the latest version is "checkpoint + 50-commit
  tail", as a reader arriving at a random time finds it on average.
* ``commits-C`` (C = 100k): C one-file commits, a checkpoint at the C-th, and
  the same 50-commit tail.

mere's checkpoint is written directly in the layout ``--checkpoint-layout``
names (1: the single Parquet file of format.md §4.1; 2: the columnar layout of
§4.2, when the mere under test documents it; default: the newest this mere
reads). delta-rs writes Delta's own checkpoint (``DeltaTable.create_checkpoint``
after the commits before the tail; not timed), so each side reads what it
would have written itself.

**The shortcut.** Every file has ``ROWS_PER_FILE`` rows and exact statistics
(``id`` runs from ``i * ROWS_PER_FILE``), but only the one data file the point
lookup needs exists; the others are referenced and never written. Opening,
time travel, checkpoints and vacuum never read data files, and a point lookup
reads only the files whose statistics admit its key, so nothing the benchmark
does reads a missing file (a full scan would fail). Vacuum's dry run lists
what exists, which is that one file.

Measured, each in a fresh Python process (``mere``, ``pyarrow`` and
``deltalake`` imported before the clock starts), with the process's peak RSS
(``VmHWM`` of ``/proc/self/status``, interpreter and imports included; not
``ru_maxrss``, which Linux carries over from the parent across fork and exec, so
that every child reported at least the builder's own size;
``base`` is the RSS after the imports):

* ``open``: ``mere.connect(p).snapshot().table("t").describe()`` (files, rows,
  bytes) / ``DeltaTable(p)`` and its add actions;
* ``time travel``: the same at version latest - 25 (checkpoint + 25 commits);
* ``lookup``: ``connect(p).table("t").scan(filter="id = K")`` / DataFusion through
  ``QueryBuilder().register("t", DeltaTable(p)).execute("... WHERE id = K")``, one
  row (``to_pyarrow_table(filters=...)`` takes 200 s at 100k files: it builds a
  dataset fragment per file);
* ``vacuum``: a dry run with a one-hour retention (every commit is two days
  old, so only the latest version is retained);
* ``checkpoint``: ``connect(p).checkpoint()`` / ``DeltaTable(p).create_checkpoint()``
  at the latest version (removed again afterwards, so runs repeat).

    .venv/bin/python benchmarks/scale.py                       # every size, both engines
    .venv/bin/python benchmarks/scale.py --sizes 1000,10000 --commits 0 --engines mere
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import _common as c

BENCH = Path(__file__).resolve()
ROWS_PER_FILE = 1000
FAKE_SIZE = 30_000  # bytes recorded for the data files that are referenced but not written
TAIL = 50
BATCHES = 100
REMOVE_EVERY = 5  # every fifth one-file tail commit also removes an early file
TABLE_ID = "5ca1e000000000000000000000000001"
DELTA_TABLE_ID = "5ca1e000-0000-0000-0000-000000000002"
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("value", pa.float64()),
        pa.field("label", pa.string()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
    ]
)
MERE_SCHEMA_JSON = {
    "fields": [
        {"name": "id", "type": "int64", "nullable": True},
        {"name": "value", "type": "float64", "nullable": True},
        {"name": "label", "type": "string", "nullable": True},
        {"name": "ts", "type": "timestamp[us, tz=UTC]", "nullable": True},
    ]
}
DELTA_SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "value", "type": "double", "nullable": True, "metadata": {}},
            {"name": "label", "type": "string", "nullable": True, "metadata": {}},
            {"name": "ts", "type": "timestamp", "nullable": True, "metadata": {}},
        ],
    }
)
OPS = ("open", "time_travel", "lookup", "vacuum", "checkpoint")


# --- the shape of a database ------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """Which files each data commit adds and removes; the checkpoint follows ``before``."""

    name: str
    batches: tuple[tuple[int, int], ...]  # (first file, count) added by each commit
    before: int  # data commits before the checkpoint

    @staticmethod
    def files(n: int) -> Shape:
        per = max(1, n // BATCHES)
        batches = tuple((i * per, per) for i in range(BATCHES))
        return Shape._with_tail(f"files-{n}", batches, BATCHES - 1)

    @staticmethod
    def commits(n: int) -> Shape:
        return Shape._with_tail(f"commits-{n}", tuple((i, 1) for i in range(n - 1)), n - 1)

    @staticmethod
    def _with_tail(name: str, batches: tuple[tuple[int, int], ...], before: int) -> Shape:
        added = sum(count for _, count in batches)
        tail = TAIL - (len(batches) - before)
        return Shape(name, batches + tuple((added + i, 1) for i in range(tail)), before)

    def commits_list(self) -> Iterator[tuple[list[int], list[int]]]:
        """(added file numbers, removed file numbers) of each data commit, in order."""
        removed = 0
        for k, (first, count) in enumerate(self.batches):
            drops: list[int] = []
            if count == 1 and k >= self.before + 1 and (k - self.before) % REMOVE_EVERY == 0:
                drops = [removed]
                removed += 1
            yield list(range(first, first + count)), drops

    @property
    def target(self) -> int:
        """The file the point lookup finds: in the middle of the checkpointed ones."""
        files_before = sum(count for _, count in self.batches[: self.before])
        return files_before // 2

    @property
    def key(self) -> int:
        return self.target * ROWS_PER_FILE + 7

    @property
    def live_files(self) -> int:
        added = sum(count for _, count in self.batches)
        return added - sum(len(r) for _, r in self.commits_list())


def file_name(i: int) -> str:
    return f"part-{i:032x}.parquet"


#: Commit times: two days before the build plus one second per version (older than an hour).
START_MS = int(time.time() * 1000) - 2 * 86_400_000


def commit_ms(version: int) -> int:
    return START_MS + version * 1000


def file_data(i: int) -> pa.Table:
    ids = pa.array(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE), pa.int64())
    first = i * ROWS_PER_FILE
    return pa.table(
        {
            "id": ids,
            "value": pa.array([v * 0.5 for v in range(first, first + ROWS_PER_FILE)]),
            "label": pa.array([f"label-{v:012d}" for v in range(first, first + ROWS_PER_FILE)]),
            "ts": pa.array(
                [T0 + dt.timedelta(seconds=v) for v in range(first, first + ROWS_PER_FILE)],
                pa.timestamp("us", tz="UTC"),
            ),
        },
        schema=SCHEMA,
    )


def _bounds(i: int) -> tuple[int, int]:
    return i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE - 1


def mere_stats(i: int) -> dict[str, Any]:
    lo, hi = _bounds(i)

    def ts(v: int) -> str:
        return (T0 + dt.timedelta(seconds=v)).strftime("%Y-%m-%d %H:%M:%S.%f") + "Z"

    return {
        "numRecords": ROWS_PER_FILE,
        "minValues": {"id": lo, "value": lo * 0.5, "label": f"label-{lo:012d}", "ts": ts(lo)},
        "maxValues": {"id": hi, "value": hi * 0.5, "label": f"label-{hi:012d}", "ts": ts(hi)},
        "nullCount": {"id": 0, "value": 0, "label": 0, "ts": 0},
    }


def delta_stats(i: int) -> str:
    lo, hi = _bounds(i)

    def ts(v: int) -> str:
        return (T0 + dt.timedelta(seconds=v)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    return json.dumps(
        {
            "numRecords": ROWS_PER_FILE,
            "minValues": {"id": lo, "value": lo * 0.5, "label": f"label-{lo:012d}", "ts": ts(lo)},
            "maxValues": {"id": hi, "value": hi * 0.5, "label": f"label-{hi:012d}", "ts": ts(hi)},
            "nullCount": {"id": 0, "value": 0, "label": 0, "ts": 0},
        },
        separators=(",", ":"),
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


# --- mere, from docs/format.md ------------------------------------------------------------


def mere_info(version: int, operation: str, read: int | None, blind: bool) -> dict[str, Any]:
    return {
        "commitInfo": {
            "commitId": uuid.uuid4().hex,
            "timestamp": commit_ms(version),
            "readVersion": read,
            "isolation": "write_serializable",
            "operation": operation,
            "operationParameters": {},
            "operationMetrics": {},
            "engine": "benchmarks/scale.py",
            "isBlindAppend": blind,
        }
    }


def mere_add(i: int, size: int, version: int) -> dict[str, Any]:
    return {
        "add": {
            "tableId": TABLE_ID,
            "path": file_name(i),
            "size": size,
            "rows": ROWS_PER_FILE,
            "partitionValues": {},
            "stats": mere_stats(i),
            "modificationTime": commit_ms(version),
            "dataChange": True,
        }
    }


def build_mere(path: Path, shape: Shape, layout: int) -> dict[str, Any]:
    """Write the database's log (and the one real data file) under ``path``."""
    t0 = time.perf_counter()
    log = path / "_log"
    table_dir = path / "tables" / TABLE_ID
    table_dir.mkdir(parents=True)
    log.mkdir(parents=True)
    sizes = {shape.target: _write_parquet(table_dir / file_name(shape.target), shape.target)}
    database = {"id": uuid.uuid4().hex, "properties": {"checkpointInterval": "100"}}
    database["createdTime"] = commit_ms(0)
    metadata = {
        "id": TABLE_ID,
        "name": "t",
        "schema": MERE_SCHEMA_JSON,
        "partitionColumns": [],
        "properties": {},
        "createdTime": commit_ms(1),
    }

    def put(version: int, lines: list[dict[str, Any]]) -> None:
        text = "".join(_dumps(line) + "\n" for line in lines)
        (log / f"{version:020d}.json").write_text(text)

    put(
        0,
        [
            mere_info(0, "CREATE DATABASE", None, False),
            {"protocol": {"formatVersion": 1}},
            {"database": database},
        ],
    )
    put(1, [mere_info(1, "CREATE TABLE", 0, False), {"metadata": metadata}])
    live: dict[int, int] = {}  # file number -> version added
    version = 1
    checkpoint_version = -1
    progress = c.Progress(f"mere {shape.name}", len(shape.batches))
    for k, (added, removed) in enumerate(shape.commits_list()):
        version += 1
        lines = [mere_info(version, "APPEND", version - 1, not removed)]
        for i in added:
            lines.append(mere_add(i, sizes.get(i, FAKE_SIZE), version))
            live[i] = version
        for i in removed:
            del live[i]
            lines.append(
                {
                    "remove": {
                        "tableId": TABLE_ID,
                        "path": file_name(i),
                        "deletionTimestamp": commit_ms(version),
                        "dataChange": True,
                        "size": sizes.get(i, FAKE_SIZE),
                        "rows": ROWS_PER_FILE,
                    }
                }
            )
        put(version, lines)
        if k + 1 == shape.before:
            checkpoint_version = version
            files = sorted(live.items())
            write_mere_checkpoint(log, version, database, metadata, files, sizes, layout)
        progress.update(k + 1)
    (log / "_latest").write_text(_dumps({"version": version}))
    (log / "_last_checkpoint").write_text(_dumps({"version": checkpoint_version}))
    return {
        "seconds": time.perf_counter() - t0,
        "latest": version,
        "checkpoint": checkpoint_version,
        "live_files": len(live),
    }


def write_mere_checkpoint(
    log: Path,
    version: int,
    database: dict[str, Any],
    metadata: dict[str, Any],
    files: list[tuple[int, int]],
    sizes: dict[int, int],
    layout: int,
) -> None:
    meta = {
        "mere.version": str(version),
        "mere.timestamp": str(commit_ms(version)),
        "mere.formatVersion": "1",
    }
    if layout == 1:
        _mere_checkpoint_v1(log, version, database, metadata, files, sizes, meta)
    else:
        _mere_checkpoint_v2(log, version, database, metadata, files, sizes, meta)


def _payload_rows(database: dict[str, Any], metadata: dict[str, Any]) -> dict[str, list[Any]]:
    return {
        "kind": ["protocol", "database", "metadata"],
        "table_id": [None, None, TABLE_ID],
        "payload": [_dumps({"formatVersion": 1}), _dumps(database), _dumps(metadata)],
    }


V1_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("table_id", pa.string()),
        pa.field("path", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("modification_time", pa.int64()),
        pa.field("partition_values", pa.string()),
        pa.field("stats", pa.string()),
        pa.field("payload", pa.string()),
    ]
)


def _mere_checkpoint_v1(
    log: Path,
    version: int,
    database: dict[str, Any],
    metadata: dict[str, Any],
    files: list[tuple[int, int]],
    sizes: dict[int, int],
    meta: dict[str, str],
) -> None:
    """format.md §4.1: one Parquet file, one row per live action, statistics as JSON text."""
    head = _payload_rows(database, metadata)
    n = len(files)
    cols: dict[str, list[Any]] = {
        "kind": head["kind"] + ["add"] * n,
        "table_id": head["table_id"] + [TABLE_ID] * n,
        "path": [None] * 3 + [file_name(i) for i, _ in files],
        "size": [None] * 3 + [sizes.get(i, FAKE_SIZE) for i, _ in files],
        "rows": [None] * 3 + [ROWS_PER_FILE] * n,
        "modification_time": [None] * 3 + [commit_ms(v) for _, v in files],
        "partition_values": [None] * 3 + ["{}"] * n,
        "stats": [None] * 3 + [_dumps(mere_stats(i)) for i, _ in files],
        "payload": head["payload"] + [None] * n,
    }
    table = pa.Table.from_pydict(cols, schema=V1_SCHEMA).replace_schema_metadata(meta)
    pq.write_table(table, log / f"{version:020d}.checkpoint.parquet", compression="zstd")


def _mere_checkpoint_v2(
    log: Path,
    version: int,
    database: dict[str, Any],
    metadata: dict[str, Any],
    files: list[tuple[int, int]],
    sizes: dict[int, int],
    meta: dict[str, str],
) -> None:
    """format.md §4.2: a manifest naming parts of at most 100,000 files, statistics as columns."""
    part_files = 100_000
    writer = uuid.uuid4().hex
    head = _payload_rows(database, metadata)
    parts: list[tuple[str, int, int]] = []
    for n, start in enumerate(range(0, len(files), part_files)):
        chunk = files[start : start + part_files]
        name = f"{version:020d}.checkpoint.{writer}.{n:05d}.parquet"
        numbers = pa.array([i for i, _ in chunk], pa.int64())
        lo = pc.multiply(numbers, ROWS_PER_FILE)
        hi = pc.add(lo, ROWS_PER_FILE - 1)
        ts_lo = pc.add(
            pa.scalar(T0, pa.timestamp("us", tz="UTC")),
            pc.cast(pc.multiply(lo, 1_000_000), pa.duration("us")),
        )
        ts_hi = pc.add(
            pa.scalar(T0, pa.timestamp("us", tz="UTC")),
            pc.cast(pc.multiply(hi, 1_000_000), pa.duration("us")),
        )
        zeros = pa.array([0] * len(chunk), pa.int64())
        table = pa.table(
            {
                "path": pa.array([file_name(i) for i, _ in chunk], pa.string()),
                "size": pa.array([sizes.get(i, FAKE_SIZE) for i, _ in chunk], pa.int64()),
                "rows": pa.array([ROWS_PER_FILE] * len(chunk), pa.int64()),
                "modification_time": pa.array([commit_ms(v) for _, v in chunk], pa.int64()),
                "data_change": pa.array([True] * len(chunk), pa.bool_()),
                "num_records": pa.array([ROWS_PER_FILE] * len(chunk), pa.int64()),
                "min:id": lo,
                "max:id": hi,
                "nulls:id": zeros,
                "min:value": pc.multiply(pc.cast(lo, pa.float64()), 0.5),
                "max:value": pc.multiply(pc.cast(hi, pa.float64()), 0.5),
                "nulls:value": zeros,
                "nans:value": zeros,
                "min:label": pa.array([f"label-{v:012d}" for v in lo.to_pylist()]),
                "max:label": pa.array([f"label-{v:012d}" for v in hi.to_pylist()]),
                "nulls:label": zeros,
                "min:ts": ts_lo,
                "max:ts": ts_hi,
                "nulls:ts": zeros,
            }
        ).replace_schema_metadata({"mere.tableId": TABLE_ID})
        pq.write_table(table, log / name, compression="zstd", use_dictionary=False)
        parts.append((name, (log / name).stat().st_size, len(chunk)))
    rows = len(parts)
    cols: dict[str, list[Any]] = {
        "kind": head["kind"] + ["part"] * rows,
        "table_id": head["table_id"] + [TABLE_ID] * rows,
        "path": [None] * 3 + [p[0] for p in parts],
        "size": [None] * 3 + [p[1] for p in parts],
        "rows": [None] * 3 + [p[2] for p in parts],
        "modification_time": [None] * (3 + rows),
        "partition_values": [None] * (3 + rows),
        "stats": [None] * (3 + rows),
        "payload": head["payload"] + [None] * rows,
    }
    manifest = pa.Table.from_pydict(cols, schema=V1_SCHEMA).replace_schema_metadata(
        {**meta, "mere.checkpointFormat": "2"}
    )
    pq.write_table(manifest, log / f"{version:020d}.checkpoint.parquet", compression="zstd")


def _write_parquet(path: Path, i: int, names: dict[str, str] | None = None) -> int:
    data = file_data(i)
    if names:
        data = data.rename_columns([names.get(n, n) for n in data.column_names])
    pq.write_table(data, path, compression="zstd")
    return path.stat().st_size


# --- Delta, from PROTOCOL.md --------------------------------------------------------------


def build_delta(path: Path, shape: Shape) -> dict[str, Any]:
    """Write the Delta log directly; delta-rs writes its checkpoint before the tail."""
    t0 = time.perf_counter()
    log = path / "_delta_log"
    log.mkdir(parents=True)
    sizes = {shape.target: _write_parquet(path / file_name(shape.target), shape.target)}

    def put(version: int, lines: list[dict[str, Any]]) -> None:
        (log / f"{version:020d}.json").write_text("".join(_dumps(x) + "\n" for x in lines))

    def info(version: int, operation: str) -> dict[str, Any]:
        return {
            "commitInfo": {
                "timestamp": commit_ms(version),
                "operation": operation,
                "operationParameters": {"mode": "Append"},
                "clientVersion": "benchmarks/scale.py",
            }
        }

    put(
        0,
        [
            info(0, "CREATE TABLE"),
            {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
            {
                "metaData": {
                    "id": DELTA_TABLE_ID,
                    "format": {"provider": "parquet", "options": {}},
                    "schemaString": DELTA_SCHEMA_STRING,
                    "partitionColumns": [],
                    "configuration": {},
                    "createdTime": commit_ms(0),
                }
            },
        ],
    )
    version = 0
    checkpoint: dict[str, Any] = {}
    progress = c.Progress(f"delta {shape.name}", len(shape.batches))
    for k, (added, removed) in enumerate(shape.commits_list()):
        version += 1
        lines = [info(version, "WRITE")]
        for i in added:
            lines.append(
                {
                    "add": {
                        "path": file_name(i),
                        "partitionValues": {},
                        "size": sizes.get(i, FAKE_SIZE),
                        "modificationTime": commit_ms(version),
                        "dataChange": True,
                        "stats": delta_stats(i),
                    }
                }
            )
        for i in removed:
            lines.append(
                {
                    "remove": {
                        "path": file_name(i),
                        "deletionTimestamp": commit_ms(version),
                        "dataChange": True,
                        "extendedFileMetadata": True,
                        "partitionValues": {},
                        "size": sizes.get(i, FAKE_SIZE),
                    }
                }
            )
        put(version, lines)
        if k + 1 == shape.before:
            print(f"  delta {shape.name}: create_checkpoint at {version} ...", flush=True)
            checkpoint = spawn("delta", "build_checkpoint", path)
            checkpoint["version"] = version
        progress.update(k + 1)
    return {"seconds": time.perf_counter() - t0, "latest": version, "checkpoint": checkpoint}


# --- measuring, in fresh processes ----------------------------------------------------------


def _rss_mib(field: str = "VmRSS") -> float:
    """This process's resident set (``VmHWM``: its peak), MiB, from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child(engine: str, op: str, path: str, version: int | None, key: int | None) -> dict[str, Any]:
    """Runs in a fresh process: one operation, timed after the imports."""
    import pyarrow.compute  # noqa: F401 - imported before the clock, as the libraries are

    if engine == "mere":
        import mere
    else:
        from deltalake import DeltaTable
    base = _rss_mib()
    detail: dict[str, Any] = {}
    t0 = time.perf_counter()
    if engine == "mere":
        db = mere.connect(path, create=False)
        if op in ("open", "time_travel"):
            described = db.snapshot(version=version).table("t").describe()
            detail = {"version": described["version"], "files": described["files"]}
        elif op == "lookup":
            found = db.table("t").scan(filter=f"id = {key}")
            detail = {"rows": found.num_rows}
        elif op == "vacuum":
            result = db.vacuum(dt.timedelta(hours=1), dry_run=True)
            detail = {"result": repr(result)[:200]}
        elif op == "checkpoint":
            detail = {"version": db.checkpoint()}
    else:
        if op == "build_checkpoint":
            DeltaTable(path).create_checkpoint()
        elif op in ("open", "time_travel"):
            table = DeltaTable(path, version=version)
            detail = {"version": table.version(), "files": table.get_add_actions().num_rows}
        elif op == "lookup":
            from deltalake import QueryBuilder

            query = QueryBuilder().register("t", DeltaTable(path))
            found = query.execute(f"SELECT * FROM t WHERE id = {key}").read_all()
            detail = {"rows": found.num_rows}
        elif op == "vacuum":
            removed = DeltaTable(path).vacuum(
                retention_hours=1, dry_run=True, enforce_retention_duration=False
            )
            detail = {"files": len(removed)}
        elif op == "checkpoint":
            table = DeltaTable(path)
            table.create_checkpoint()
            detail = {"version": table.version()}
    seconds = time.perf_counter() - t0
    peak = _rss_mib("VmHWM")
    return {"seconds": seconds, "peak_rss_mib": peak, "base_rss_mib": base, **detail}


def spawn(engine: str, op: str, path: Path, **kw: Any) -> dict[str, Any]:
    cmd = [sys.executable, str(BENCH), "--child", engine, op, str(path)]
    for name, value in kw.items():
        if value is not None:
            cmd += [f"--{name}", str(value)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[7:])
            result["exit_code"] = proc.returncode  # deltalake may abort at exit (134)
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"error": " | ".join(tail) or f"exit code {proc.returncode}"}


def _undo_checkpoint(engine: str, path: Path, latest: int, hint: bytes | None) -> None:
    """Remove the checkpoint the ``checkpoint`` operation wrote, so the next run writes it again."""
    log = path / ("_log" if engine == "mere" else "_delta_log")
    for item in log.glob(f"{latest:020d}.checkpoint*"):
        item.unlink()
    name = "_last_checkpoint"
    if hint is not None:
        (log / name).write_bytes(hint)


def measure(
    engine: str, path: Path, shape: Shape, latest: int, ops: list[str], runs: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op in ops:
        kw: dict[str, Any] = {}
        if op == "time_travel":
            kw["version"] = latest - TAIL // 2
        if op == "lookup":
            kw["key"] = shape.key
        samples = []
        for _ in range(runs):
            hint_file = path / ("_log" if engine == "mere" else "_delta_log") / "_last_checkpoint"
            hint = hint_file.read_bytes() if hint_file.exists() else None
            sample = spawn(engine, op, path, **kw)
            if op == "checkpoint":
                _undo_checkpoint(engine, path, latest, hint)
            samples.append(sample)
            if "error" in sample:
                break
        good = [s for s in samples if "error" not in s]
        if not good:
            out[op] = {"error": samples[-1]["error"]}
            print(f"  {engine} {shape.name} {op}: ERROR {samples[-1]['error']}", flush=True)
            continue
        best = sorted(good, key=lambda s: s["seconds"])[len(good) // 2]
        out[op] = {**best, "runs_s": [round(s["seconds"], 4) for s in good]}
        extra = {k: v for k, v in best.items() if k in ("files", "rows", "version")}
        print(
            f"  {engine:5} {shape.name:14} {op:11} {best['seconds']:8.3f} s  "
            f"peak {best['peak_rss_mib']:7.0f} MiB  {extra}",
            flush=True,
        )
    return out


def default_layout() -> int:
    """The newest mere checkpoint layout the mere under test reads (2 once §4.2 exists)."""
    try:
        from mere.log import checkpoint

        return int(getattr(checkpoint, "CHECKPOINT_FORMAT", 1))
    except ImportError:
        return 1


def ensure(workdir: Path, engine: str, shape: Shape, layout: int, rebuild: bool) -> dict[str, Any]:
    name = f"{engine}-{shape.name}" + (f"-ckpt{layout}" if engine == "mere" else "")
    path = workdir / name
    done = workdir / f"{name}.done"
    if done.exists() and path.exists() and not rebuild:
        info: dict[str, Any] = json.loads(done.read_text())
        return {**info, "path": path}
    if path.exists():
        shutil.rmtree(path)
    done.unlink(missing_ok=True)
    print(f"building {path} ...", flush=True)
    info = build_mere(path, shape, layout) if engine == "mere" else build_delta(path, shape)
    done.write_text(json.dumps(info))
    return {**info, "path": path}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="live files")
    parser.add_argument("--commits", type=int, default=100_000, help="0: no commits-C database")
    parser.add_argument("--engines", default="mere,delta")
    parser.add_argument("--ops", default=",".join(OPS))
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per figure")
    parser.add_argument("--big-runs", type=int, default=1, help="runs for 1M files")
    parser.add_argument("--checkpoint-layout", type=int, default=None)
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--workdir", default="/tmp/mere-bench/scale")
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/scale.json)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--version", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--key", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        engine, op, path = args.child
        print("RESULT " + json.dumps(child(engine, op, path, args.version, args.key)), flush=True)
        sys.stdout.flush()
        os._exit(0)  # skip interpreter teardown (deltalake may abort there)

    c.print_machine()
    layout = args.checkpoint_layout or default_layout()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    shapes = [Shape.files(int(n)) for n in args.sizes.split(",") if n]
    if args.commits:
        shapes.append(Shape.commits(args.commits))
    engines = [e for e in args.engines.split(",") if e]
    ops = [o for o in args.ops.split(",") if o]
    results: list[dict[str, Any]] = []
    for shape in shapes:
        for engine in engines:
            built = ensure(workdir, engine, shape, layout, args.rebuild)
            runs = args.big_runs if shape.live_files >= 1_000_000 else args.runs
            figures = measure(engine, built["path"], shape, built["latest"], ops, runs)
            results.append(
                {
                    "engine": engine,
                    "shape": shape.name,
                    "live_files": shape.live_files,
                    "checkpoint_layout": layout if engine == "mere" else None,
                    "build": {k: v for k, v in built.items() if k != "path"},
                    "figures": figures,
                }
            )
    print()
    print(f"seconds (peak RSS MiB), median of {args.runs} fresh processes; mere layout {layout}")
    headers = ["engine", "database", *ops]
    rows = []
    for r in results:
        cells = []
        for op in ops:
            f = r["figures"].get(op, {})
            cells.append(
                "error" if "error" in f else f"{f['seconds']:.3f} ({f['peak_rss_mib']:.0f})"
            )
        rows.append([r["engine"], r["shape"], *cells])
    print(c.format_table(headers, rows))
    out = c.write_results(
        "scale",
        {"label": args.label, "mere_checkpoint_layout": layout, "results": results},
        args.output,
    )
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
