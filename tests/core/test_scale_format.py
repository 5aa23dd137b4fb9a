"""docs/format.md and the decoder agree on optional fields and their defaults (§2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mere.errors import CorruptLog
from mere.log.actions import AddFile, CommitInfo, DatabaseMeta, RemoveFile, TableMeta, decode_commit

TID = "ab" * 16
KEY = "_log/00000000000000000005.json"
SCHEMA = {"fields": [{"name": "x", "type": "int64", "nullable": True}]}


def decode(*lines: dict[str, Any]) -> tuple[CommitInfo, tuple[Any, ...]]:
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    commit = decode_commit(KEY, 5, data)
    return commit.info, commit.actions


MINIMAL_INFO = {
    "commitId": "any id at all",
    "timestamp": 1,
    "isolation": "snapshot",
    "operation": "X",
}


@pytest.mark.parametrize("absent", [True, False])
def test_optional_fields_take_their_defaults(absent: bool) -> None:
    """Absent and null mean the same: the default format.md gives."""

    def optional(**fields: Any) -> dict[str, Any]:
        return {} if absent else {k: None for k in fields}

    info, actions = decode(
        {
            "commitInfo": {
                **MINIMAL_INFO,
                **optional(
                    readVersion=0,
                    operationParameters=0,
                    operationMetrics=0,
                    engine=0,
                    isBlindAppend=0,
                ),
            }
        },
        {"database": {"id": "not hex, and fine", "createdTime": 1, **optional(properties=0)}},
        {
            "metadata": {
                "id": TID,
                "name": "t",
                "schema": SCHEMA,
                "partitionColumns": [],
                "createdTime": 1,
                **optional(properties=0),
            }
        },
        {
            "add": {
                "tableId": TID,
                "path": "a.parquet",
                "size": 1,
                "rows": 1,
                "modificationTime": 1,
                **optional(partitionValues=0, stats=0, dataChange=0),
            }
        },
        {
            "remove": {
                "tableId": TID,
                "path": "b.parquet",
                "deletionTimestamp": 1,
                **optional(dataChange=0, size=0, rows=0),
            }
        },
    )
    assert info == CommitInfo("any id at all", 1, None, "snapshot", "X", {}, {}, "", False)
    database, meta, add, remove = actions
    assert database == DatabaseMeta("not hex, and fine", {}, 1)
    assert isinstance(meta, TableMeta) and meta.properties == {}
    assert add == AddFile(TID, "a.parquet", 1, 1, {}, None, 1, True)
    assert remove == RemoveFile(TID, "b.parquet", 1, True, None, None)


@pytest.mark.parametrize(
    ("action", "field"),
    [
        ("commitInfo", "commitId"),
        ("commitInfo", "timestamp"),
        ("commitInfo", "isolation"),
        ("commitInfo", "operation"),
        ("add", "modificationTime"),
        ("add", "size"),
        ("remove", "deletionTimestamp"),
    ],
)
def test_required_fields_are_required(action: str, field: str) -> None:
    bodies = {
        "commitInfo": dict(MINIMAL_INFO),
        "add": {"tableId": TID, "path": "a", "size": 1, "rows": 1, "modificationTime": 1},
        "remove": {"tableId": TID, "path": "a", "deletionTimestamp": 1},
    }
    bodies[action][field] = None
    lines: list[dict[str, Any]] = [{"commitInfo": bodies["commitInfo"]}]
    if action != "commitInfo":
        lines.append({action: bodies[action]})
    with pytest.raises(CorruptLog):
        decode(*lines)


def test_unknown_fields_are_ignored_unknown_actions_are_not() -> None:
    info, _ = decode({"commitInfo": {**MINIMAL_INFO, "futureField": [1, 2]}})
    assert info.commit_id == "any id at all"
    with pytest.raises(CorruptLog):
        decode({"commitInfo": MINIMAL_INFO}, {"futureAction": {}})
