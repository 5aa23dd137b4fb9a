"""Vacuum and check on a database with many tags: the cost of what live tags keep.

Builds (once, reused) a database per tag count K: K appends to one table, each
followed by a tag, so tag i keeps i + 1 files. Then times ``vacuum(dry_run=True)``
and ``check()`` on a fresh connection (CPU and wall seconds, best of ``--repeat``).

Both verbs must learn every live tag's files. They used to rebuild the state at
each tagged version separately (a checkpoint open and a replay each, every file
as an object: K x state size); they now walk the tagged versions in ascending
order, each state replayed on from the one before.

    nice .venv/bin/python benchmarks/vacuum_tags.py --tags 100 200 400

Run it with another checkout's ``src`` first on ``PYTHONPATH`` to compare two
versions on the same databases (``--dir`` keeps them between runs).
"""

from __future__ import annotations

import argparse
import shutil
import time
from datetime import timedelta
from pathlib import Path

import mere


def build(path: Path, tags: int) -> None:
    """A database with ``tags`` appends, each followed by a tag (skipped when built)."""
    done = path / "BUILT"
    if done.exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    db = mere.connect(str(path))
    db.sql("CREATE TABLE t (id BIGINT, v DOUBLE)")
    for i in range(tags):
        db.table("t").append([{"id": i, "v": 1.0}])
        db.tag(f"day{i}")
    done.write_text("")


def timed(fn: object, repeat: int) -> tuple[float, float]:
    """(best CPU seconds, best wall seconds) of ``repeat`` calls of ``fn``."""
    cpu, wall = [], []
    for _ in range(repeat):
        c, w = time.process_time(), time.perf_counter()
        fn()  # type: ignore[operator]
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return min(cpu), min(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tags", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/mere-bench-vacuum-tags"))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"{'tags':>6} {'verb':<16} {'cpu s':>8} {'wall s':>8}")
    for tags in args.tags:
        path = args.dir / f"tags-{tags}"
        build(path, tags)
        for name in ("vacuum dry-run", "check"):

            def run(name: str = name, path: Path = path) -> None:
                db = mere.connect(str(path))  # a fresh connection: nothing cached
                if name == "check":
                    db.check()
                else:
                    db.vacuum(timedelta(days=7), dry_run=True)

            cpu, wall = timed(run, args.repeat)
            print(f"{tags:>6} {name:<16} {cpu:>8.2f} {wall:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
