"""`mere sql`: script input that cannot be read as SQL text is one error line, status 1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import mere
from mere.cli import cli

pytest.importorskip("duckdb")

SCRIPT = Path(sys.executable).with_name("mere")
BAD = b"SELECT '\xff';"


@pytest.fixture
def empty(tmp_path: Path) -> str:
    return mere.connect(str(tmp_path / "db")).uri


def one_error(done: Result | subprocess.CompletedProcess[str], *texts: str) -> None:
    code = done.exit_code if isinstance(done, Result) else done.returncode
    assert code == 1, (done.stdout, done.stderr)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr
    for text in texts:
        assert text in lines[0]


def test_input_that_is_not_utf8_is_one_error_naming_the_byte(empty: str, tmp_path: Path) -> None:
    where = "not valid UTF-8 (byte 0xff at offset 8)"
    one_error(CliRunner().invoke(cli, ["sql", empty], input=BAD), where)
    path = tmp_path / "bad.sql"
    path.write_bytes(BAD)
    one_error(CliRunner().invoke(cli, ["sql", empty, "-f", str(path)]), str(path), where)
    # An argument that is not UTF-8 reaches Python with its bytes as lone surrogates.
    arg = BAD.decode("utf-8", "surrogateescape")
    one_error(CliRunner().invoke(cli, ["sql", empty, "-c", arg]), "-c SQL", where)
    one_error(CliRunner().invoke(cli, ["sql", empty, "-c", "SELECT '\ud800'"]), "UTF-8")
    good = CliRunner().invoke(cli, ["sql", empty, "--json", "-c", "SELECT 'é' AS e"])
    assert good.exit_code == 0 and good.stdout == '{"e":"é"}\n'


@pytest.mark.skipif(not SCRIPT.exists(), reason="the mere console script is missing")
@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX shell closes stdin")
def test_a_closed_stdin_is_one_error(empty: str) -> None:
    done = subprocess.run(
        ["/bin/sh", "-c", 'exec "$0" sql "$1" <&-', str(SCRIPT), empty],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    one_error(done, "stdin is closed")
