"""``mere check URI [--repair] [--json]``: one line per finding, exit status 0 clean / 1 found."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

import mere
from mere.cli import cli
from mere.log.keys import CHECKPOINT_HINT, commit_key

LATEST = 4  # version 1 creates t, 2..4 append x = 0..2


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def uri(db_uri: str) -> str:
    db = mere.connect(db_uri)
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(LATEST - 1):
        db.table("t").append([{"x": i}])
    return db_uri


def store_of(uri: str) -> mere.Database:
    return mere.connect(uri, create=False)


def test_a_clean_database_exits_0(uri: str) -> None:
    done = run("check", uri)
    assert done.exit_code == 0, done.output
    assert done.output.splitlines() == [
        f"clean: versions 0..{LATEST}: {LATEST + 1} commits, 0 checkpoints, 3 data files"
    ]


def test_a_clean_database_as_json(uri: str) -> None:
    for args in (("check", uri, "--json"), ("--json", "check", uri)):
        done = run(*args)
        assert done.exit_code == 0, done.output
        data = json.loads(done.output)
        assert data["clean"] is True and data["findings"] == []
        assert data["latest_version"] == LATEST and data["files_checked"] == 3


def test_findings_are_one_line_each_and_exit_1(uri: str) -> None:
    db = store_of(uri)
    db.log.write_latest_hint(LATEST)  # not below the gap: that would be one more finding
    db.store.delete(commit_key(2))
    db.store.put(CHECKPOINT_HINT, b"garbage")
    done = run("check", uri)
    assert done.exit_code == 1
    lines = done.output.splitlines()
    assert len(lines) == 4, done.output  # GAP, UNREADABLE, BAD_HINT, summary
    assert lines[0].startswith(f"GAP {commit_key(2)}: the commit of version 2 is missing")
    assert "a gap in the log" in lines[0]
    assert lines[1].startswith(f"UNREADABLE {commit_key(LATEST)}: ")
    assert lines[2].startswith(f"BAD_HINT {CHECKPOINT_HINT}: is not a valid hint")
    assert lines[3].startswith("3 findings in versions 0..4")


def test_findings_as_json(uri: str) -> None:
    db = store_of(uri)
    data = db.store.get(commit_key(3))
    db.store.delete(commit_key(3))
    db.store.put_if_absent(commit_key(3), data[:-2])
    done = run("check", uri, "--json")
    assert done.exit_code == 1
    result = json.loads(done.output)
    assert result["clean"] is False
    assert [f["kind"] for f in result["findings"]] == ["CORRUPT_COMMIT", "UNREADABLE"]
    corrupt = result["findings"][0]
    assert corrupt["key"] == commit_key(3) and corrupt["version"] == 3
    assert "truncated" in corrupt["message"]
    assert corrupt["repairable"] is False and corrupt["repaired"] is False


def test_repair_removes_a_missing_file_by_a_forward_commit(uri: str) -> None:
    db = store_of(uri)
    table = db.latest_state().table_by_name("t")
    assert table is not None
    victim = table.meta.prefix + sorted(table.files)[0]
    db.store.delete(victim)

    found = run("check", uri)
    assert found.exit_code == 1
    assert found.output.splitlines()[0].startswith(f"MISSING_FILE {victim}: ")

    repaired = run("check", uri, "--repair", "--json")
    assert repaired.exit_code == 1  # something was found, even though it was repaired
    result = json.loads(repaired.output)
    assert result["repair_version"] == LATEST + 1
    assert result["findings"][0]["repaired"] is True

    assert run("check", uri).exit_code == 0
    after = store_of(uri)
    assert after.version == LATEST + 1
    assert after.history(limit=1)[0]["operation"] == "REPAIR"
    assert after.table("t").scan().num_rows == LATEST - 2
    scan = run("scan", uri, "t", "--json")
    assert scan.exit_code == 0 and len(scan.output.splitlines()) == LATEST - 2


def test_repair_text_output_says_what_it_did(uri: str) -> None:
    store_of(uri).checkpoint()
    store_of(uri).store.put(CHECKPOINT_HINT, b'{"version": 50}')
    done = run("check", uri, "--repair")
    assert done.exit_code == 1
    first, summary = done.output.splitlines()
    assert first == (
        f"BAD_HINT {CHECKPOINT_HINT}: names version 50, beyond the latest version {LATEST} "
        f"[repaired: rewrote it to version {LATEST}]"
    )
    assert summary.endswith("; 1 repaired")
    assert run("check", uri).exit_code == 0


def test_no_database_is_an_error(tmp_path: object) -> None:
    done = CliRunner().invoke(cli, ["check", f"{tmp_path}/nothing"])
    assert done.exit_code == 1
    assert "no mere database" in done.output


def test_help_lists_check() -> None:
    done = run("--help")
    assert "check" in done.output
    assert "--repair" in run("check", "--help").output
