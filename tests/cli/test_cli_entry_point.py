"""The installed ``mere`` console script, run as a real process on a local database."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import mere

SCRIPT = Path(sys.executable).with_name("mere")


def mere_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.skipif(not SCRIPT.exists(), reason="the mere console script is not installed")
def test_console_script(tmp_path: Path) -> None:
    path = tmp_path / "lake"
    db = mere.connect(str(path))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    db.create_table("people", schema)
    db.table("people").append(pa.table({"id": [1, 2], "name": ["Ada", None]}, schema=schema))

    done = mere_cli("tables", str(path), "--json")
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert (got["version"], [(t["name"], t["rows"]) for t in got["tables"]]) == (
        2,
        [("people", 2)],
    )

    done = mere_cli("--json", "scan", str(path), "people")
    assert done.returncode == 0, done.stderr
    rows = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda r: r["id"])
    assert rows == [{"id": 1, "name": "Ada"}, {"id": 2, "name": None}]

    done = mere_cli("scan", path.as_uri(), "people")
    assert done.returncode == 0, done.stderr
    assert "Ada" in done.stdout and "\x1b[" not in done.stdout

    done = mere_cli("describe", str(path), "nobody")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == ["error: table 'nobody' does not exist at version 2"]
