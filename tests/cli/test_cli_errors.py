"""CLI failures: one ``error:`` line on stderr and exit 1; usage errors exit 2."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

import mere
from mere.cli import cli

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])


@pytest.fixture
def small(db: mere.Database) -> mere.Database:
    db.create_table("t", SCHEMA)
    db.table("t").append(pa.table({"id": [1, 2], "name": ["a", "b"]}, schema=SCHEMA))
    return db


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def assert_error(result: Result, *needles: str) -> str:
    """Exit 1, nothing on stdout, exactly one ``error:`` line on stderr, no traceback."""
    assert result.exit_code == 1, (result.output, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_bad_filter(small: mere.Database, json_flag: list[str]) -> None:
    assert_error(run("scan", small.uri, "t", "--filter", "id >>> (", *json_flag))
    assert_error(run("scan", small.uri, "t", "--filter", "nope = 1", *json_flag), "nope")


def test_unknown_column(small: mere.Database) -> None:
    assert_error(run("scan", small.uri, "t", "--columns", "id,nope"), "nope")


@pytest.mark.parametrize("command", ["describe", "scan"])
def test_unknown_table(small: mere.Database, command: str) -> None:
    assert_error(run(command, small.uri, "missing"), "'missing' does not exist")
    assert_error(run(command, small.uri, "t", "--version", "0"), "'t' does not exist at version 0")


@pytest.mark.parametrize("command", [["version"], ["tables"], ["history"], ["scan", "x"]])
def test_missing_local_database_is_not_created(tmp_path: Path, command: list[str]) -> None:
    where = tmp_path / "typo"
    uri = str(where)
    line = assert_error(run(command[0], uri, *command[1:]), "no mere database at")
    assert where.as_uri() in line
    assert not where.exists()
    # An existing directory without a database is not turned into one either.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_error(run(command[0], empty.as_uri(), *command[1:]), "no mere database at")
    assert list(empty.iterdir()) == []


def test_missing_memory_database() -> None:
    assert_error(run("tables", "memory://never-created-by-the-cli"), "no mere database")


def test_unsupported_scheme() -> None:
    assert_error(run("tables", "s3://"), "s3://")
    assert_error(run("tables", "ftp://host/lake"), "ftp")


def test_version_that_does_not_exist(small: mere.Database) -> None:
    assert_error(run("tables", small.uri, "--version", "99"), "version 99 does not exist")
    assert_error(run("scan", small.uri, "t", "--timestamp", "2000-01-01"), "no version")


@pytest.mark.parametrize(
    "args",
    [
        ["scan", "URI", "t", "--version", "1", "--timestamp", "2024-01-01"],
        ["scan", "URI", "t", "--timestamp", "yesterday"],
        ["scan", "URI", "t", "--version", "-1"],
        ["scan", "URI", "t", "--limit", "-5"],
        ["scan", "URI", "t", "--limit", "99999999999999999999999"],
        ["vacuum", "URI", "--retention", "99999999999999w"],
        ["scan", "URI", "t", "--columns", " , "],
        ["history", "URI", "--limit", "0"],
        ["describe", "URI"],
        ["frobnicate", "URI"],
    ],
)
def test_usage_errors_exit_2(small: mere.Database, args: list[str]) -> None:
    result = run(*[small.uri if a == "URI" else a for a in args])
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
