"""Values Python cannot hold (dates past year 9999, DuckDB's infinity) and errors while printing.

``mere scan`` and ``mere sql`` print them as Arrow's / DuckDB's text; an error
met while printing a result is one ``error: ...`` line, and the shell goes on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

import mere
from mere.cli import cli
from mere.cli import sql as sql_mod
from mere.cli.output import column_values

pytest.importorskip("duckdb")

FAR = 3_000_000  # days after 1970-01-01: 10183-09-21, as DuckDB and Arrow print it


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


@pytest.fixture
def far(tmp_path: Path) -> str:
    db = mere.connect(str(tmp_path / "far"))
    db.create_table("t", pa.schema([("d", pa.date32())]))
    db.table("t").append(pa.table({"d": pa.array([FAR, 0, None], pa.date32())}))
    return db.uri


def test_column_values_out_of_pythons_range_are_arrow_text() -> None:
    days = pa.array([FAR, 0, None, 2**31 - 1, -(2**31 - 1)], pa.date32())
    assert column_values(days) == ["10183-09-21", "1970-01-01", None, "infinity", "-infinity"]
    stamps = pa.array([2**63 - 1, -(2**63 - 1)], pa.int64()).cast(pa.timestamp("us"))
    assert column_values(stamps) == ["infinity", "-infinity"]


def test_scan_prints_dates_past_9999(far: str) -> None:
    done = run("scan", far, "t", "--json")
    assert done.exit_code == 0, (done.output, done.exception)
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert sorted(rows, key=lambda r: str(r["d"])) == [
        {"d": "10183-09-21"},
        {"d": "1970-01-01"},
        {"d": None},
    ]
    done = run("scan", far, "t")
    assert done.exit_code == 0, (done.output, done.exception)
    assert "10183-09-21" in done.stdout and "3 rows" in done.stdout


def test_sql_prints_dates_past_9999_and_infinity(far: str) -> None:
    done = run("sql", far, "-c", "SELECT * FROM t WHERE d IS NOT NULL ORDER BY d")
    assert done.exit_code == 0, (done.output, done.exception)
    assert "10183-09-21" in done.stdout
    done = run("sql", far, "-c", "SELECT 'infinity'::DATE AS d, '-infinity'::TIMESTAMP AS t")
    assert done.exit_code == 0, (done.output, done.exception)
    assert "infinity" in done.stdout and "-infinity" in done.stdout
    done = run("sql", far, "--json", "-c", "SELECT 'infinity'::DATE AS d")
    assert done.exit_code == 0, (done.output, done.exception)
    assert json.loads(done.stdout) == {"d": "infinity"}


def _failing_show(statement: Any, result: Any, *, as_json: bool) -> None:
    if statement.kind == "query":
        raise OverflowError("date value out of range")
    sql_mod.click.echo(statement.keyword)


def test_an_error_printing_a_result_is_one_line_and_the_shell_goes_on(
    far: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sql_mod, "show_result", _failing_show)
    from mere.sql.session import Session

    db = mere.connect(far, create=False)
    target = sql_mod._Live(db, Session(db, on_error="statement"))
    sql_mod.run_typed(target, "BEGIN; INSERT INTO t VALUES (DATE '2024-01-01');", as_json=False)
    sql_mod.run_typed(target, "SELECT * FROM t; SELECT 1;", as_json=False)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "date value out of range" in err[0]
    assert "1 more statement not run" in err[0]
    assert target.in_transaction()  # the open transaction is kept
    sql_mod.run_typed(target, "COMMIT;", as_json=False)
    assert db.snapshot().table("t").scan().num_rows == 4


def test_an_error_printing_a_script_result_is_one_line_with_status_1(
    far: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sql_mod, "show_result", _failing_show)
    done = run("sql", far, "-c", "BEGIN; INSERT INTO t VALUES (DATE '2024-01-01'); SELECT 1;")
    assert done.exit_code == 1
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    assert "rolled back" in done.stderr and "Traceback" not in done.output
    db = mere.connect(far, create=False)
    assert db.snapshot().table("t").scan().num_rows == 3
