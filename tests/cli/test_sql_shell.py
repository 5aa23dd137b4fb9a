"""`mere sql`: the interactive shell through a pseudo-terminal, and scripts with -c / -f.

The shell runs as a real process under ``pexpect`` (every wait bounded); scripts
run as real processes for their exit status, and in-process (click's runner) for
the rest. The database is the README's shop: customers and orders.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pytest
from click.testing import CliRunner

import mere
from mere.cli import cli

pytest.importorskip("duckdb")
pexpect = pytest.importorskip("pexpect")

SCRIPT = Path(sys.executable).with_name("mere")
#: A generous bound on every wait for the shell (imports are slow on a loaded machine).
WAIT = 90

SETUP = """
CREATE TABLE customers (cid BIGINT NOT NULL, name VARCHAR, last_order DATE);
CREATE TABLE orders (oid BIGINT NOT NULL, cid BIGINT NOT NULL, amount DECIMAL(10, 2), day DATE,
                     CONSTRAINT positive CHECK (amount > 0)) PARTITIONED BY (day);
INSERT INTO customers VALUES (1, 'Ann', NULL), (2, 'Bob', NULL);
"""

needs_script = pytest.mark.skipif(not SCRIPT.exists(), reason="the mere console script is missing")


@pytest.fixture
def shop(tmp_path: Path) -> Path:
    path = tmp_path / "shop"
    mere.connect(str(path)).sql(SETUP)
    return path


def state(path: Path) -> tuple[list[tuple[int, int]], list[tuple[int, date | None]]]:
    """(orders as (oid, cid), customers as (cid, last_order)), both sorted."""
    db = mere.connect(str(path), create=False)
    orders = db.snapshot().table("orders").scan(["oid", "cid"]).to_pylist()
    customers = db.snapshot().table("customers").scan(["cid", "last_order"]).to_pylist()
    return (
        sorted((r["oid"], r["cid"]) for r in orders),
        sorted((r["cid"], r["last_order"]) for r in customers),
    )


UNCHANGED = ([], [(1, None), (2, None)])


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., pexpect.spawn]]:
    """Start ``mere sql ARGS`` in a pseudo-terminal; every shell is killed at the end."""
    children: list[pexpect.spawn] = []

    def start(*args: str) -> pexpect.spawn:
        env = dict(os.environ, TERM="dumb", HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "st"))
        env.pop("MERE_SQL_HISTORY", None)
        child = pexpect.spawn(
            str(SCRIPT),
            ["sql", *args],
            env=env,
            encoding="utf-8",
            timeout=WAIT,
            dimensions=(50, 160),
        )
        children.append(child)
        return child

    yield start
    for child in children:
        child.close(force=True)


def typed(child: pexpect.spawn, line: str, prompt: str) -> list[str]:
    """Send a line, wait for ``prompt``; the output lines in between (after the echo)."""
    child.sendline(line)
    child.expect_exact(prompt)
    return [part.strip() for part in child.before.splitlines()][1:]


@needs_script
def test_a_session_with_a_transaction_an_error_a_rollback_and_a_commit(
    shop: Path, tmp_path: Path, spawn: Callable[..., pexpect.spawn]
) -> None:
    child = spawn(str(shop))
    child.expect_exact("\\q to quit.")
    child.expect_exact("mere=> ")
    assert typed(child, "BEGIN;", "mere*> ") == ["BEGIN"]
    assert typed(child, "INSERT INTO orders VALUES (10, 1, 12.50,", "mere*-> ") == []
    assert typed(child, "DATE '2024-05-01');", "mere*> ") == ["INSERT 1"]
    # The second statement fails: one error line, and only it is undone.
    out = typed(child, "UPDATE customers SET last_order = 'soon' WHERE cid = 1;", "mere*> ")
    assert len(out) == 1 and out[0].startswith("error: ") and "still open" in out[0], out
    listing = "\n".join(typed(child, "\\dt", "mere*> "))
    assert "tables in this transaction" in listing and "orders" in listing
    assert typed(child, "ROLLBACK;", "mere=> ") == ["ROLLBACK"]
    assert state(shop) == UNCHANGED

    # The seed scenario: an order and the customer's last order date, in one commit.
    typed(child, "BEGIN; INSERT INTO orders VALUES (10, 1, 12.50, DATE '2024-05-01');", "mere*> ")
    update = "UPDATE customers SET last_order = DATE '2024-05-01' WHERE cid = 1;"
    assert typed(child, update, "mere*> ") == ["UPDATE 1"]
    assert state(shop) == UNCHANGED  # not committed yet
    assert typed(child, "COMMIT;", "mere=> ") == ["COMMIT"]
    committed = ([(10, 1)], [(1, date(2024, 5, 1)), (2, None)])
    assert state(shop) == committed
    query = "SELECT name, last_order FROM customers ORDER BY cid;"
    rows = "\n".join(typed(child, query, "mere=> "))
    assert "Ann" in rows and "2024-05-01" in rows and "(2 rows)" in rows

    # Ctrl-C drops the statement being typed; an error outside a transaction goes on too.
    typed(child, "SELECT 'never finished", "mere-> ")
    child.sendcontrol("c")
    child.expect_exact("mere=> ")
    out = typed(child, "SELECT nope FROM nowhere;", "mere=> ")
    assert len(out) == 1 and out[0].startswith("error: ") and "Traceback" not in out[0]
    assert any("\\dt" in line for line in typed(child, "\\?", "mere=> "))

    # Ctrl-D inside a transaction rolls it back and says so.
    assert typed(child, "BEGIN; DELETE FROM orders;", "mere*> ") == ["BEGIN", "DELETE 1"]
    child.sendeof()
    child.expect_exact("the open transaction was rolled back")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert state(shop) == committed
    history = (tmp_path / "st" / "mere" / "sql_history").read_text()
    assert update in history
    assert "INSERT INTO orders VALUES (10, 1, 12.50, DATE '2024-05-01');" in history  # joined


@needs_script
def test_a_read_only_session_at_a_version_refuses_writes(
    shop: Path, spawn: Callable[..., pexpect.spawn]
) -> None:
    child = spawn(str(shop), "--version", "2")  # customers and orders, no rows
    child.expect_exact("(read-only)")
    child.expect_exact("mere@2=> ")
    out = typed(child, "DELETE FROM customers;", "mere@2=> ")
    assert len(out) == 1 and "read-only at version 2" in out[0], out
    assert "(0 rows)" in typed(child, "SELECT * FROM customers;", "mere@2=> ")
    child.sendline("\\q")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert state(shop) == UNCHANGED


def run_mere(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], input=stdin, capture_output=True, text=True, timeout=WAIT, check=False
    )


FAILING_ORDER = """BEGIN;
INSERT INTO orders VALUES (11, 2, 5.00, DATE '2024-05-02');
UPDATE customers SET last_order = 'soon' WHERE cid = 2;
COMMIT;"""


@needs_script
def test_c_stops_at_the_first_error_with_status_1_and_changes_nothing(shop: Path) -> None:
    done = run_mere("sql", str(shop), "-c", FAILING_ORDER)
    assert done.returncode == 1
    assert done.stdout.split() == ["BEGIN", "INSERT", "1"]
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("the transaction was rolled back")
    assert state(shop) == UNCHANGED


def invoke(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_f_runs_a_file_with_json_rows_and_status_0(shop: Path, tmp_path: Path) -> None:
    script = tmp_path / "order.sql"
    script.write_text(
        FAILING_ORDER.replace("'soon'", "DATE '2024-05-02'")
        + "\nSELECT cid, last_order FROM customers ORDER BY cid;"
    )
    code, out, err = invoke("sql", str(shop), "-f", str(script), "--json")
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        {"count": 1},
        {"count": 1},
        {"cid": 1, "last_order": None},
        {"cid": 2, "last_order": "2024-05-02"},
    ]
    assert state(shop) == ([(11, 2)], [(1, None), (2, date(2024, 5, 2))])


def test_a_script_ending_inside_begin_is_rolled_back_with_status_1(shop: Path) -> None:
    code, out, err = invoke(
        "sql", str(shop), stdin="BEGIN; INSERT INTO orders VALUES (1, 1, 1, DATE '2024-01-01');"
    )  # stdin that is not a terminal is a script
    assert (code, out.split()) == (1, ["BEGIN", "INSERT", "1"])
    assert "ended inside a transaction" in err
    assert state(shop) == UNCHANGED


def test_json_prints_rows_as_json_lines_and_nothing_for_ddl(shop: Path) -> None:
    code, out, err = invoke(
        "--json",
        "sql",
        str(shop),
        "-c",
        "CREATE TABLE t (x INT); SELECT cid, name FROM customers ORDER BY cid; BEGIN; COMMIT",
    )
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == [
        {"cid": 1, "name": "Ann"},
        {"cid": 2, "name": "Bob"},
    ]


def test_columns_of_one_name_keep_their_values_in_json_and_tables(shop: Path) -> None:
    """A JSON object cannot repeat a key: a repeated name is told apart by a suffix."""
    query = "SELECT 1 AS a, 2 AS a, 3 AS a_1, 'x' AS b"
    code, out, err = invoke("sql", str(shop), "--json", "-c", query)
    assert code == 0, err
    assert json.loads(out) == {"a": 1, "a_2": 2, "a_1": 3, "b": "x"}
    code, out, err = invoke("sql", str(shop), "-c", query)
    assert code == 0, err
    [values] = [line for line in out.splitlines() if "│" in line]
    assert values.replace("│", " ").split() == ["1", "2", "3", "x"]


def test_human_output_shows_tables_and_tags(shop: Path) -> None:
    code, out, err = invoke(
        "sql", str(shop), "-c", "DROP TABLE IF EXISTS nothing; SELECT count(*) AS n FROM orders"
    )
    assert code == 0, err
    assert out.splitlines()[0] == "DROP TABLE"
    assert "┃ n ┃" in out and "(1 row)" in out


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["-c", "SELECT 1", "-f", "-"], 2, "not both"),
        (["-c", "SELECT 1", "--version", "1", "--timestamp", "2024-01-01"], 2, "not both"),
        (["-c", "UPDATE customers SET name = 'x'", "--version", "3"], 1, "read-only"),
        (["-c", "VACUUM"], 1, "VACUUM statements are not supported"),
        (["-c", "SELECT 'open"], 1, "cannot read the SQL text"),
    ],
)
def test_bad_input_is_one_error_and_changes_nothing(
    shop: Path, args: list[str], status: int, message: str
) -> None:
    code, _, err = invoke("sql", str(shop), *args)
    assert code == status and message in err, err
    assert state(shop) == UNCHANGED


def test_a_missing_database_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    code, _, err = invoke("sql", str(tmp_path / "nothing"), "-c", "SELECT 1")
    assert code == 1 and "no mere database" in err
    assert not (tmp_path / "nothing").exists()
