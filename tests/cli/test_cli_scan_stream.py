"""`mere scan` into a pipe: rows are printed as they are read, a closed pipe stops it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.cli import cli
from mere.snapshot.snapshot import TableSnapshot

SCRIPT = Path(sys.executable).with_name("mere")
WAIT = 90
ROWS = 3000
SCHEMA = pa.schema([pa.field("i", pa.int64(), nullable=False), pa.field("s", pa.string())])


@pytest.fixture
def big(tmp_path: Path) -> mere.Database:
    db = mere.connect(str(tmp_path / "big"))
    db.create_table("t", SCHEMA)
    db.table("t").append(
        pa.table({"i": range(ROWS), "s": [f"v{i % 7}" if i % 5 else None for i in range(ROWS)]})
    )
    return db


@pytest.mark.parametrize("as_json", [False, True])
def test_rows_are_printed_before_the_next_batch_is_read(
    big: mere.Database,
    as_json: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    printed: list[str] = []

    def scan_batches(self: TableSnapshot, *args: Any, **kwargs: Any) -> pa.RecordBatchReader:
        def batches() -> Iterator[pa.RecordBatch]:
            yield pa.record_batch({"i": [1, 2], "s": ["first", None]}, schema=SCHEMA)
            printed.append(capsys.readouterr().out)  # what is out before the next batch
            yield pa.record_batch({"i": [3], "s": ["second"]}, schema=SCHEMA)

        return pa.RecordBatchReader.from_batches(SCHEMA, batches())

    monkeypatch.setattr(TableSnapshot, "scan_batches", scan_batches)
    cli.main(["scan", big.uri, "t", *(["--json"] if as_json else [])], standalone_mode=False)
    rest = capsys.readouterr().out
    assert "first" in printed[0] and "second" not in printed[0]
    assert "second" in rest


def table_rows(text: str) -> list[list[str]]:
    """The rows of piped `mere scan` output: after the title and header, before the count."""
    lines = text.splitlines()
    assert lines[0] == "t at version 2" and lines[1].split() == ["i", "s"]
    assert lines[-1] == f"({ROWS} rows)"
    return [line.split() for line in lines[2:-1]]


@pytest.mark.skipif(not SCRIPT.exists(), reason="the mere console script is missing")
@pytest.mark.parametrize("as_json", [False, True])
def test_piped_into_head_it_stops_and_prints_every_row_otherwise(
    big: mere.Database, as_json: bool
) -> None:
    args = [str(SCRIPT), "scan", big.uri, "t", *(["--json"] if as_json else [])]
    scan = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert scan.stdout is not None and scan.stderr is not None
    head = subprocess.Popen(["head", "-n", "5"], stdin=scan.stdout, stdout=subprocess.PIPE)
    scan.stdout.close()  # head alone reads it now
    try:
        out, _ = head.communicate(timeout=WAIT)
        scan.wait(timeout=WAIT)
        err = scan.stderr.read()
    finally:
        for process in (scan, head):
            process.kill()
            process.wait(timeout=WAIT)
        scan.stderr.close()
    assert len(out.splitlines()) == 5
    assert scan.returncode in (0, 1), err  # 1: stopped by the closed pipe, as every command
    assert err == b""

    done = subprocess.run(args, capture_output=True, text=True, timeout=WAIT, check=False)
    assert done.returncode == 0 and done.stderr == ""
    expected = big.snapshot().table("t").scan().to_pylist()
    if as_json:
        assert [json.loads(line) for line in done.stdout.splitlines()] == expected
    else:
        assert table_rows(done.stdout) == [
            [str(r["i"]), "null" if r["s"] is None else r["s"]] for r in expected
        ]
