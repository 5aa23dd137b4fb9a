"""Helpers shared by the maintenance tests (imported by the test modules and their children)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

import mere

EVENTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.string()),
        pa.field("amount", pa.float64()),
    ]
)


def events(ids: Iterable[int], parts: tuple[str, ...] = ("a", "b")) -> pa.Table:
    """Rows with the given ids, spread over ``parts``, some amounts null."""
    ids = list(ids)
    return pa.table(
        {
            "id": ids,
            "part": [parts[i % len(parts)] for i in ids],
            "amount": [None if i % 3 == 0 else i * 1.5 for i in ids],
        },
        schema=EVENTS,
    )


def ids_of(table: mere.TableSnapshot | mere.Table) -> list[int]:
    return sorted(table.scan(["id"]).column("id").to_pylist())


def wait_a_little() -> None:
    """Make the next commit's timestamp (ms) and file times differ from the previous ones."""
    time.sleep(0.02)


_DELTA_READER = """
import json, sys
import deltalake
out = {}
for path in sys.argv[1:]:
    table = deltalake.DeltaTable(path)
    data = table.to_pyarrow_table()
    out[path] = {
        "version": table.version(),
        "partition_columns": table.metadata().partition_columns,
        "schema": [[f.name, str(f.type)] for f in data.schema],
        "rows": [{k: (None if v is None else str(v)) for k, v in row.items()}
                 for row in data.to_pylist()],
        "files": len(table.file_uris()),
    }
sys.stdout.write(json.dumps(out))
sys.stdout.flush()
"""


def read_delta(*paths: Path) -> dict[str, Any]:
    """Read Delta tables with the ``deltalake`` package in a subprocess (it can abort at exit).

    Returns, per path, its version, partition columns, Arrow schema and rows
    (every value as ``str``), and its file count.
    """
    done = subprocess.run(
        [sys.executable, "-c", _DELTA_READER, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout, f"deltalake reader failed ({done.returncode}): {done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return {str(Path(k)): v for k, v in result.items()}
