"""The mere CLI's commands, in human and JSON output, on every store backend."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

import mere
from mere.cli import cli
from mere.cli import main as cli_main  # the module

ORDERS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("price", pa.decimal128(10, 2)),
    ]
)
CUSTOMERS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])

FIRST = pa.table(
    {
        "id": [1, 2, 3],
        "country": ["FR", "DE", "FR"],
        "amount": [10.5, None, 30.0],
        "day": [dt.date(2024, 1, 31), dt.date(2024, 2, 1), None],
        "at": [dt.datetime(2024, 1, 31, 10, 30, tzinfo=dt.UTC), None, None],
        "price": [Decimal("12.30"), Decimal("0.05"), None],
    },
    schema=ORDERS,
)
SECOND = pa.table(
    {
        "id": [4],
        "country": ["[bold]GB[/bold]"],  # must be shown literally, not as rich markup
        "amount": [40.0],
        "day": [dt.date(2024, 3, 1)],
        "at": [None],
        "price": [Decimal("99.99")],
    },
    schema=ORDERS,
)

FIRST_ROWS = [
    {
        "id": 1,
        "country": "FR",
        "amount": 10.5,
        "day": "2024-01-31",
        "at": "2024-01-31T10:30:00+00:00",
        "price": "12.30",
    },
    {"id": 2, "country": "DE", "amount": None, "day": "2024-02-01", "at": None, "price": "0.05"},
    {"id": 3, "country": "FR", "amount": 30.0, "day": None, "at": None, "price": None},
]
SECOND_ROWS = [
    {
        "id": 4,
        "country": "[bold]GB[/bold]",
        "amount": 40.0,
        "day": "2024-03-01",
        "at": None,
        "price": "99.99",
    }
]


@pytest.fixture
def lake(db: mere.Database) -> mere.Database:
    """v1 create orders, v2 append 3 rows, v3 create customers, v4 append to both."""
    db.create_table("orders", ORDERS, properties={"owner": "sales"})
    db.table("orders").append(FIRST)
    db.create_table("customers", CUSTOMERS)
    with db.transaction() as tx:
        tx.table("orders").append(SECOND)
        tx.table("customers").append(
            pa.table({"id": [1, 2], "name": ["Ada", "Bob"]}, schema=CUSTOMERS)
        )
    assert db.version == 4
    return db


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stderr == ""
    return result.stdout


def ok_json(*args: str) -> object:
    return json.loads(ok(*args))


def json_lines(*args: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in ok(*args).splitlines()]


def by_id(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return sorted(rows, key=lambda r: r["id"])  # type: ignore[arg-type, return-value]


# --- version ---------------------------------------------------------------------


def test_version(lake: mere.Database) -> None:
    snap = lake.snapshot()
    assert ok_json("version", lake.uri, "--json") == {
        "version": 4,
        "timestamp": snap.timestamp.isoformat(),
    }
    out = ok("version", lake.uri)
    assert "version 4" in out
    assert snap.timestamp.isoformat() in out
    assert "\x1b[" not in out  # no colour codes when stdout is not a terminal


def test_json_flag_works_before_the_command_too(lake: mere.Database) -> None:
    assert ok_json("--json", "version", lake.uri) == ok_json("version", lake.uri, "--json")


# --- tables ----------------------------------------------------------------------


def test_tables(lake: mere.Database) -> None:
    snap = lake.snapshot()
    expected = []
    for name in ("customers", "orders"):
        info = snap.table(name).describe()
        expected.append(
            {
                "name": name,
                "rows": info["rows"],
                "files": info["files"],
                "size_bytes": info["size_bytes"],
            }
        )
    got = ok_json("tables", lake.uri, "--json")
    assert got == {"version": 4, "timestamp": snap.timestamp.isoformat(), "tables": expected}
    assert [t["rows"] for t in expected] == [2, 4]
    assert all(t["files"] >= 1 and t["size_bytes"] > 0 for t in expected)

    out = ok("tables", lake.uri)
    assert "tables at version 4" in out
    assert "customers" in out and "orders" in out


def test_tables_time_travel(lake: mere.Database) -> None:
    got = ok_json("tables", lake.uri, "--version", "2", "--json")
    assert got["version"] == 2  # type: ignore[index]
    assert [(t["name"], t["rows"]) for t in got["tables"]] == [("orders", 3)]  # type: ignore[index]

    assert ok_json("tables", lake.uri, "--version", "0", "--json")["tables"] == []  # type: ignore[index]
    assert "no tables at version 0" in ok("tables", lake.uri, "--version", "0")


# --- describe --------------------------------------------------------------------


def test_describe(lake: mere.Database) -> None:
    info = ok_json("describe", lake.uri, "orders", "--json")
    assert info == lake.snapshot().table("orders").describe()
    assert info["schema"] == [  # type: ignore[index]
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "country", "type": "string", "nullable": True},
        {"name": "amount", "type": "double", "nullable": True},
        {"name": "day", "type": "date32[day]", "nullable": True},
        {"name": "at", "type": "timestamp[us, tz=UTC]", "nullable": True},
        {"name": "price", "type": "decimal128(10, 2)", "nullable": True},
    ]
    assert info["properties"] == {"owner": "sales"}  # type: ignore[index]
    assert (info["rows"], info["version"]) == (4, 4)  # type: ignore[index]

    out = ok("describe", lake.uri, "orders")
    for text in ("orders", "schema", "country", "decimal128(10, 2)", "owner", "sales"):
        assert text in out


def test_describe_time_travel(lake: mere.Database) -> None:
    info = ok_json("describe", lake.uri, "orders", "--version", "2", "--json")
    assert (info["version"], info["rows"]) == (2, 3)  # type: ignore[index]
    assert "customers" not in ok("tables", lake.uri, "--version", "2")


def test_describe_partitioned(db: mere.Database) -> None:
    db.create_table("events", CUSTOMERS, partition_by=["name"])
    info = ok_json("describe", db.uri, "events", "--json")
    assert info["partition_by"] == ["name"]  # type: ignore[index]
    out = ok("describe", db.uri, "events")
    assert "(partition)" in out


# --- history ---------------------------------------------------------------------


def test_history(lake: mere.Database) -> None:
    entries = ok_json("history", lake.uri, "--json")
    assert isinstance(entries, list)
    assert [e["version"] for e in entries] == [4, 3, 2, 1, 0]
    core = lake.history()
    assert [e["timestamp"] for e in entries] == [e["timestamp"] for e in core]
    assert [e["operation"] for e in entries] == [e["operation"] for e in core]
    newest = entries[0]
    assert newest["tables"] == ["customers", "orders"]
    assert (newest["rows_added"], newest["rows_removed"]) == (3, 0)
    assert newest["isolation"] == core[0]["isolation"]
    assert newest["commit_id"] == core[0]["commit_id"]
    assert (entries[2]["tables"], entries[2]["rows_added"]) == (["orders"], 3)
    assert (entries[4]["tables"], entries[4]["rows_added"]) == ([], 0)

    assert [e["version"] for e in ok_json("history", lake.uri, "--limit", "2", "--json")] == [4, 3]  # type: ignore[union-attr]

    out = ok("history", lake.uri)
    assert "history" in out
    for entry in core:
        assert entry["operation"] in out


# --- scan ------------------------------------------------------------------------


def test_scan_json_exact_values(lake: mere.Database) -> None:
    assert by_id(json_lines("scan", lake.uri, "orders", "--json")) == FIRST_ROWS + SECOND_ROWS


def test_scan_columns_filter_limit(lake: mere.Database) -> None:
    rows = json_lines("scan", lake.uri, "orders", "--columns", "price, id", "--json")
    assert all(list(r) == ["price", "id"] for r in rows)
    assert by_id(rows) == [{"price": r["price"], "id": r["id"]} for r in FIRST_ROWS + SECOND_ROWS]

    rows = json_lines("scan", lake.uri, "orders", "--filter", "country = 'FR'", "--json")
    assert by_id(rows) == [FIRST_ROWS[0], FIRST_ROWS[2]]

    rows = json_lines("scan", lake.uri, "orders", "--filter", "amount > 20", "--json")
    assert sorted(r["id"] for r in rows) == [3, 4]  # type: ignore[type-var]

    assert len(json_lines("scan", lake.uri, "orders", "--limit", "2", "--json")) == 2
    assert len(json_lines("scan", lake.uri, "orders", "--limit", "0", "--json")) == 4
    assert json_lines("scan", lake.uri, "orders", "--filter", "id > 100", "--json") == []


def test_scan_of_a_column_named_twice_keeps_each_value_under_its_header(
    lake: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = json_lines("scan", lake.uri, "orders", "--columns", "id,ID,country", "--json")
    assert by_id(rows)[0] == {"id": 1, "id_1": 1, "country": "FR"}
    args = ("scan", lake.uri, "orders", "--columns", "id,id,country", "--filter", "id = 1")
    assert ok(*args).splitlines()[1:3] == ["id  id  country", " 1   1  FR"]  # piped: plain
    monkeypatch.setattr(cli_main, "_stdout_is_terminal", lambda: True)
    [values] = [line for line in ok(*args).splitlines() if "│" in line]
    assert values.replace("│", " ").split() == ["1", "1", "FR"]


def test_scan_time_travel(lake: mere.Database) -> None:
    rows = json_lines("scan", lake.uri, "orders", "--version", "2", "--json")
    assert by_id(rows) == FIRST_ROWS

    at_v2 = next(e["timestamp"] for e in lake.history() if e["version"] == 2)
    rows = json_lines("scan", lake.uri, "orders", "--timestamp", at_v2, "--json")
    assert by_id(rows) == FIRST_ROWS
    # A naive timestamp is read as UTC.
    naive = dt.datetime.fromisoformat(at_v2).replace(tzinfo=None).isoformat()
    assert by_id(json_lines("scan", lake.uri, "orders", "--timestamp", naive, "--json")) == (
        FIRST_ROWS
    )


def test_scan_human(lake: mere.Database) -> None:
    out = ok("scan", lake.uri, "orders")
    assert "orders at version 4" in out
    assert "[bold]GB[/bold]" in out  # data is never read as markup
    for text in ("country", "2024-01-31", "12.30", "99.99", "null", "4 rows"):
        assert text in out
    assert "\x1b[" not in out

    out = ok("scan", lake.uri, "orders", "--version", "2", "--columns", "id,country")
    assert "3 rows" in out and "GB" not in out and "price" not in out

    out = ok("scan", lake.uri, "orders", "--limit", "1")
    assert "first 1 row; more match" in out


def test_scan_defaults_to_20_rows_on_a_terminal(
    db: mere.Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    db.create_table("t", CUSTOMERS)
    db.table("t").append(pa.table({"id": list(range(25)), "name": ["x"] * 25}, schema=CUSTOMERS))
    assert len(json_lines("scan", db.uri, "t", "--json")) == 25  # piped: every row
    monkeypatch.setattr(cli_main, "_stdout_is_terminal", lambda: True)
    assert "first 20 rows; more match" in ok("scan", db.uri, "t")
    assert len(json_lines("scan", db.uri, "t", "--json")) == 20
    assert "25 rows" in ok("scan", db.uri, "t", "--limit", "0")


# --- help ------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["version", "tables", "describe", "history", "scan"])
def test_every_command_documents_itself(command: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "--json" in result.stdout
    assert "JSON" in result.stdout


def test_group_help_and_package_version() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for command in ("version", "tables", "describe", "history", "scan", "--json"):
        assert command in result.stdout
    result = run("-V")
    assert result.exit_code == 0
    assert mere.__version__ in result.stdout
