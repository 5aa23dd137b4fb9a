"""One-row statements on a table of many files: the cost of what a statement touches.

Builds (once, reused) ``files-N`` databases with ``benchmarks/scale.py``'s
builder: one table of N live files from a checkpoint plus a 50-commit tail,
where only the one data file the key lives in exists. Then runs each statement
in a fresh process on a copy of the database (imports before the clock) and
prints wall seconds, CPU seconds and peak RSS (``VmHWM``):

* ``scan``: ``db.table("t").scan(filter="id = K")``, the plain point lookup;
* ``tx scan``: the same inside ``db.transaction()``;
* ``delete``, ``update``: ``delete("id = K")``, ``update("id = K", ...)``;
* ``merge``: ten source rows from K on, matched rows updated;
* ``sql``: ``db.sql("SELECT * FROM t WHERE id = K")``.

A statement should cost about what the point lookup costs, whatever N is.

    nice .venv/bin/python benchmarks/dml_at_scale.py --sizes 10000 100000

``--src DIR`` runs the statements with another checkout's ``src`` first on
``PYTHONPATH`` (the databases stay the same), to compare two versions side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATEMENTS = ["scan", "tx scan", "delete", "update", "merge", "sql"]


def run_one(statement: str, path: str, key: int) -> dict[str, object]:
    """Run ``statement`` on the database at ``path`` (in this process) and measure it."""
    import pyarrow as pa

    import mere

    wall, cpu = time.perf_counter(), time.process_time()
    db = mere.connect(path, create=False)
    table = db.table("t")
    if statement == "scan":
        rows = table.scan(filter=f"id = {key}").num_rows
    elif statement == "tx scan":
        with db.transaction() as tx:
            rows = tx.table("t").scan(filter=f"id = {key}").num_rows
    elif statement == "delete":
        rows = table.delete(f"id = {key}")
    elif statement == "update":
        rows = table.update(f"id = {key}", {"value": "value + 1"})
    elif statement == "merge":
        ids = pa.array(range(key, key + 10), pa.int64())
        source = pa.table({"id": ids, "value": [2.0] * 10})
        merger = table.merge(source, on="t.id = s.id").when_matched_update({"value": "s.value"})
        rows = merger.execute().num_target_rows_updated
    else:
        rows = db.sql(f"SELECT * FROM t WHERE id = {key}").num_rows
    peak = next(
        int(line.split()[1]) // 1024
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("VmHWM")
    )
    return {
        "rows": rows,
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "peak_mib": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mere-bench-dml-at-scale"))
    parser.add_argument("--src", type=Path, help="another checkout's src directory")
    parser.add_argument("--child", nargs=3, metavar=("STATEMENT", "PATH", "KEY"))
    args = parser.parse_args()
    if args.child:
        statement, path, key = args.child
        print("RESULT " + json.dumps(run_one(statement, path, int(key))), flush=True)
        return

    sys.path.insert(0, str(HERE))
    import scale

    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = f"{args.src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    print(f"{'files':>8} {'statement':<9} {'rows':>4} {'wall s':>7} {'cpu s':>6} {'peak MiB':>8}")
    for size in args.sizes:
        shape = scale.Shape.files(size)
        base = args.dir / f"files-{size}"
        if not (base / "BUILT").exists():
            shutil.rmtree(base, ignore_errors=True)
            scale.build_mere(base, shape, scale.default_layout())
            (base / "BUILT").write_text("")
        for statement in STATEMENTS:
            copy = args.dir / "work"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            command = [sys.executable, __file__, "--child", statement, str(copy), str(shape.key)]
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
            lines = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if not lines:
                print(f"{size:>8} {statement:<9} failed: {done.stderr.strip()[-300:]}")
                continue
            r = json.loads(lines[-1].removeprefix("RESULT "))
            print(
                f"{size:>8} {statement:<9} {r['rows']:>4} {r['wall']:>7.2f} {r['cpu']:>6.2f} "
                f"{r['peak_mib']:>8}",
                flush=True,
            )
        shutil.rmtree(args.dir / "work", ignore_errors=True)


if __name__ == "__main__":
    main()
