"""Control characters in stored strings are escaped in human output, kept in JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import mere
from mere.cli import cli
from mere.cli import main as cli_main

pytest.importorskip("duckdb")

TITLE = "\x1b]0;pwned\x07x\ny\tz"  # an OSC sequence retitling the terminal, a newline, a tab
SHOWN = "\\x1b]0;pwned\\x07x\\ny\\tz"


@pytest.fixture
def uri(tmp_path: Path) -> str:
    db = mere.connect(str(tmp_path / "esc"))
    db.create_table("t", pa.schema([("s", pa.string())]))
    db.table("t").append(pa.table({"s": [TITLE]}))
    return db.uri


def out(*args: str) -> str:
    done = CliRunner().invoke(cli, list(args))
    assert done.exit_code == 0, (done.output, done.exception)
    return done.stdout


@pytest.mark.parametrize("terminal", [False, True])
def test_scan_and_sql_tables_escape_control_characters(
    uri: str, terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_main, "_stdout_is_terminal", lambda: terminal)
    for text in (out("scan", uri, "t"), out("sql", uri, "-c", "SELECT * FROM t")):
        assert "\x1b" not in text and "\x07" not in text and "\t" not in text
        assert SHOWN in text
    alias = out("sql", uri, "-c", 'SELECT 1 AS "a\x1b[2Jb"')  # a column name from SQL
    assert "\x1b" not in alias and "a\\x1b[2Jb" in alias


def test_json_keeps_the_value(uri: str) -> None:
    assert json.loads(out("scan", uri, "t", "--json")) == {"s": TITLE}
    assert json.loads(out("sql", uri, "--json", "-c", "SELECT * FROM t")) == {"s": TITLE}


def test_describe_escapes_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Property keys and values, and the type text that holds nested field names, were
    printed raw by `mere describe` and the shell's \\d."""
    from mere.cli.sql_output import show_table

    db = mere.connect(str(tmp_path / "props"))
    nested = pa.struct([("a\x1b[2J", pa.int64())])
    db.create_table("t", pa.schema([("s", nested)]), properties={"note\x1b]0;T": "v\x1b[2J"})
    described = out("describe", db.uri, "t")
    assert "\x1b" not in described
    assert "v\\x1b[2J" in described and "a\\x1b[2J" in described
    show_table(db.table("t").describe(), as_json=False)
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "a\\x1b[2J" in shown
