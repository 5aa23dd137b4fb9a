"""Client history files: pairing invocations with completions, surviving a SIGKILL mid-write."""

from __future__ import annotations

import json
from pathlib import Path

from mere.verify.history import HistoryWriter, app_id, assemble, parse_app_id

READ = {"f": "r", "t": "verify_la0", "k": 1, "v": None}
APPEND = {"f": "append", "t": "verify_la0", "k": 2, "v": 10000001}


def test_a_killed_transaction_is_indeterminate_and_a_torn_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "p00001.jsonl"
    out = HistoryWriter(path)
    out.write({"kind": "invoke", "process": 1, "n": 0, "ops": [READ, APPEND], "time": 1.0})
    out.write(
        {
            "kind": "complete",
            "process": 1,
            "n": 0,
            "type": "ok",
            "ops": [{**READ, "v": [5]}, APPEND],
            "read_version": 3,
            "version": 4,
            "time": 1.5,
            "faults": {"delay": 2},
        }
    )
    out.write({"kind": "invoke", "process": 1, "n": 1, "ops": [READ, APPEND], "time": 2.0})
    out.close()
    with path.open("a") as f:
        f.write(json.dumps({"kind": "complete", "process": 1, "n": 1})[:20])  # killed mid-write
    history = assemble([path])
    first, second = history.txns
    assert (first.type, first.version, first.read_version) == ("ok", 4, 3)
    assert first.ops[0]["v"] == [5]
    assert (second.type, second.error, second.end) == ("info", "killed", None)
    assert second.ops[0]["v"] is None  # never known
    assert second.writes == [APPEND]  # what it may have written
    assert history.faults == {"delay": 2}


def test_app_ids_round_trip() -> None:
    assert parse_app_id(app_id(17)) == 17
    assert parse_app_id("verify/px") is None
    assert parse_app_id("pipeline") is None
