"""Helpers shared by the benchmark scripts: statistics, tables, JSON results, machine facts."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"

#: The schema of the baseline measurements in shared/notes (Spark, deltalake, pyarrow).
BASELINE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("customer_id", pa.int64()),
        pa.field("amount", pa.float64()),
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("country", pa.string()),
        pa.field("note", pa.string()),
    ]
)


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * p / 100.0
    lo = int(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ms(seconds: float) -> float:
    return seconds * 1000.0


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    import numpy

    info: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "pyarrow": pa.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        import mere

        info["mere"] = mere.__version__
    except ImportError:  # pragma: no cover - the scripts import mere anyway
        pass
    info.update(_git_info())
    try:
        # Other work on the machine skews every figure: record how busy it was.
        info["loadavg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["ram_gib"] = round(kb / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def _git_info() -> dict[str, Any]:
    """The commit measured, and whether src/ had uncommitted changes (read-only git calls)."""
    import subprocess

    root = BENCH_DIR.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return {}
    return {"git_head": head, "src_uncommitted_changes": bool(dirty)} if head else {}


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, numbers right-aligned."""

    def cell(v: Any) -> str:
        if isinstance(v, float):
            if v != v:  # NaN
                return "-"
            if abs(v) >= 100:
                return f"{v:,.0f}"
            if abs(v) >= 10:
                return f"{v:.1f}"
            return f"{v:.3f}" if abs(v) < 1 else f"{v:.2f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)

    text = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(isinstance(row[i], int | float) for row in rows if i < len(row))
        for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.rjust(widths[i]) if numeric[i] and rows else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in text)])


def write_results(name: str, payload: dict[str, Any], path: str | None = None) -> Path:
    """Write ``payload`` (plus machine facts) as JSON to ``benchmarks/results/<name>.json``."""
    out = Path(path) if path else RESULTS_DIR / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    body = {"benchmark": name, "machine": machine_info(), **payload}
    out.write_text(json.dumps(body, indent=2, default=str) + "\n")
    return out


class Progress:
    """Prints a progress line at most every ``every`` seconds."""

    def __init__(self, label: str, total: int, every: float = 5.0) -> None:
        self.label = label
        self.total = total
        self.every = every
        self.start = time.perf_counter()
        self._last = self.start

    def update(self, done: int) -> None:
        now = time.perf_counter()
        if now - self._last >= self.every or done == self.total:
            self._last = now
            rate = done / max(now - self.start, 1e-9)
            print(
                f"  {self.label}: {done:,}/{self.total:,} ({now - self.start:.1f} s, "
                f"{rate:,.0f}/s)",
                flush=True,
            )


def print_machine() -> None:
    """One line on what runs this benchmark and how busy the machine is."""
    info = machine_info()
    print(
        f"{info['date']}  Python {info['python']}  pyarrow {info['pyarrow']}  "
        f"{info['cpus']} CPUs  load average {info.get('loadavg_1_5_15')}",
        flush=True,
    )


def run_worker(script: Path, kind: str, path: Path, **kw: Any) -> dict[str, Any]:
    """Run ``script --worker kind --path path --key value...`` and return its RESULT line.

    Workers print ``RESULT <json>`` before exiting, so a crash at interpreter
    exit (deltalake can abort with code 134 there) is recorded, not fatal.
    """
    cmd = [sys.executable, str(script), "--worker", kind, "--path", str(path)]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    result = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            result = json.loads(line[7:])
        else:
            print(line, end="", flush=True)
    rc = proc.wait()
    if result is None:
        raise RuntimeError(f"{kind} failed (exit code {rc})")
    result["exit_code"] = rc  # 134 from deltalake at shutdown is recorded, not fatal
    return result
