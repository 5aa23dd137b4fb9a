"""The maintenance commands of the mere CLI, in JSON and human output, and progress bars."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from maintain_helpers import EVENTS, events, ids_of, read_delta

import mere
from mere.cli import cli
from mere.maintain import progress as progress_module


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def ok_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    path = tmp_path / "lake"
    db = mere.connect(path)
    db.create_table("events", EVENTS, partition_by=["part"])
    for b in range(4):
        db.table("events").append(events(range(b * 4, b * 4 + 4)))
    return path


def test_compact_and_checkpoint(lake: Path) -> None:
    got = ok_json("compact", str(lake), "events", "--target-size", "64MiB", "--sort-by", "id")
    assert got["files_removed"] == 8 and got["files_added"] == 2 and got["version"] == 6
    assert mere.connect(lake, create=False).history(1)[0]["parameters"]["sortBy"] == ["id"]
    assert ok_json("checkpoint", str(lake)) == {"version": 6}
    human = run("compact", str(lake), "events")
    assert human.exit_code == 0 and "nothing to compact" in human.stdout
    bad = run("compact", str(lake), "events", "--sort-by", "id", "--zorder-by", "id")
    assert bad.exit_code == 2
    assert run("compact", str(lake), "events", "--target-size", "lots").exit_code == 2


def test_vacuum_and_expire(lake: Path) -> None:
    refused = run("vacuum", str(lake), "--retention", "0")
    assert refused.exit_code == 1
    assert refused.stderr.startswith("error: refusing to vacuum with a retention of 0:00:00")
    mere.connect(lake).table("events").delete("id < 2")
    dry = ok_json("vacuum", str(lake), "--retention", "0", "--force", "--dry-run")
    assert dry["dry_run"] and dry["files_deleted"] == 2 and len(dry["keys"]) == 2
    assert (lake / dry["keys"][0]).exists()
    human = run("vacuum", str(lake), "--retention", "0s", "--force", "--dry-run")
    assert "would delete" in human.stdout and dry["keys"][0] in human.stdout
    done = ok_json("vacuum", str(lake), "--retention=0", "--force")
    assert done["keys"] == dry["keys"] and not (lake / dry["keys"][0]).exists()
    assert ok_json("vacuum", str(lake))["files_deleted"] == 0  # default: 7 days
    assert run("vacuum", str(lake), "--retention", "soon").exit_code == 2

    expired = ok_json("expire", str(lake), "--retention", "0", "--force")
    assert expired["oldest_version"] == 6 and expired["commits_deleted"] == 6
    human = run("expire", str(lake), "--retention", "0", "--force")
    assert human.exit_code == 0 and "keeping versions 6..6" in human.stdout
    history = ok_json("history", str(lake))
    assert [e["version"] for e in history] == [6]
    gone = run("scan", str(lake), "events", "--version", "2")
    assert gone.exit_code == 1 and "oldest readable version is 6" in gone.stderr


def test_restore(lake: Path) -> None:
    got = ok_json("restore", str(lake), "--version", "2")
    assert got["restored_version"] == 2 and got["version"] == 6
    assert got["tables_restored"] == ["events"] and got["files_removed"] == 6
    assert ids_of(mere.connect(lake, create=False).table("events")) == list(range(4))
    again = run("restore", str(lake), "--version", "2")
    assert again.exit_code == 0 and "nothing to restore" in again.stdout
    human = run("restore", str(lake), "--version", "5", "--table", "events")
    assert human.exit_code == 0 and "restored version 5 as version 7" in human.stdout
    assert run("restore", str(lake)).exit_code == 2
    missing = run("restore", str(lake), "--version", "99")
    assert missing.exit_code == 1 and "version 99 does not exist" in missing.stderr


def test_export(lake: Path, tmp_path: Path) -> None:
    got = ok_json("export", str(lake), str(tmp_path / "copy"), "--version", "3")
    assert got["source_version"] == 3 and got["tables"] == ["events"] and got["rows"] == 8
    assert ids_of(mere.connect(tmp_path / "copy", create=False).table("events")) == list(range(8))
    delta = ok_json(
        "export", str(lake), str(tmp_path / "delta"), "--format", "delta", "--table", "events"
    )
    assert delta["table"] == "events" and delta["files"] == 8
    read = read_delta(tmp_path / "delta")[str(tmp_path / "delta")]
    assert sorted(int(r["id"]) for r in read["rows"]) == list(range(16))
    assert run("export", str(lake), str(tmp_path / "d2"), "--format", "delta").exit_code == 2
    minimal = run("export", str(lake), str(tmp_path / "m"), "--mode", "minimal")
    assert minimal.exit_code == 1 and "minimal" in minimal.stderr
    human = run("export", str(lake), str(tmp_path / "copy2"))
    assert human.exit_code == 0 and "exported version 5" in human.stdout
    assert run("export", str(tmp_path / "nowhere"), str(tmp_path / "x")).exit_code == 1


def test_progress_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    steps: list[int] = []
    with progress_module.progress("quiet", 3) as advance:
        advance(1)
        steps.append(1)
    assert capsys.readouterr().err == "" and steps == [1]
    monkeypatch.setattr(progress_module, "stderr_is_terminal", lambda: True)
    with progress_module.progress("loud", 2) as advance:
        advance(2)
    assert capsys.readouterr().out == ""  # never on stdout
