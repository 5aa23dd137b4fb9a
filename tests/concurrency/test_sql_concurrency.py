"""Two processes running ``BEGIN ... COMMIT`` SQL scripts get the conflicts the Python API gives.

Each child opens a transaction (through a SQL session, or through ``db.transaction()``
for the reference), runs its statements, then waits at a file barrier until the other
child has run its statements too; child 0 then commits, and child 1 commits once child
0's outcome is known. So both transactions read the same version, overlap for certain,
and commit in a known order; no timing is assumed. Per scenario, the
outcomes (which child committed, the error class of the one that did not) and the
final table must be the same through SQL as through the Python API.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.sql.session import Session

pytest.importorskip("duckdb")

WAIT = 60.0
SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.string()), ("v", pa.int64())])

#: scenario -> per child: (SQL statements, the same through the Python API)
SCENARIOS: dict[str, list[tuple[list[str], list[tuple[str, str, Any]]]]] = {
    "same row updated twice": [
        (["UPDATE t SET v = v + 1 WHERE id = 1"], [("update", "id = 1", {"v": "v + 1"})]),
        (["UPDATE t SET v = v + 10 WHERE id = 1"], [("update", "id = 1", {"v": "v + 10"})]),
    ],
    "rows in different partitions": [
        (["UPDATE t SET v = v + 1 WHERE grp = 'a'"], [("update", "grp = 'a'", {"v": "v + 1"})]),
        (["DELETE FROM t WHERE grp = 'b'"], [("delete", "grp = 'b'", None)]),
    ],
    "an insert a delete would have seen": [
        (
            ["INSERT INTO t VALUES (9, 'a', 500)"],
            [("append", "", {"id": [9], "grp": ["a"], "v": [500]})],
        ),
        (["DELETE FROM t WHERE v > 100"], [("delete", "v > 100", None)]),
    ],
}


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {WAIT:.0f} s")
        time.sleep(0.01)


def child(db_path: str, scenario: str, me: int, how: str, folder: str) -> None:
    """Run this child's statements in one serializable transaction; commit after the barrier.

    Child 1 commits only after child 0 has finished, so child 0 always commits first.
    """
    here = Path(folder)
    statements, calls = SCENARIOS[scenario][me]
    db = mere.connect(db_path, create=False)
    outcome: dict[str, Any] = {}
    try:
        if how == "sql":
            session = Session(db)
            session.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
            for text in statements:
                session.execute(text)
            (here / f"ready-{me}").touch()
            _wait_for(here / f"ready-{1 - me}")
            if me == 1:
                _wait_for(here / "outcome-0.json")
            session.execute("COMMIT")
        else:
            tx = db.transaction(isolation="serializable")
            for verb, where, arg in calls:
                table = tx.table("t")
                if verb == "update":
                    table.update(where, arg)
                elif verb == "delete":
                    table.delete(where)
                else:
                    table.append(pa.table(arg, schema=SCHEMA))
            (here / f"ready-{me}").touch()
            _wait_for(here / f"ready-{1 - me}")
            if me == 1:
                _wait_for(here / "outcome-0.json")
            tx.commit()
        outcome["committed"] = True
    except mere.ConflictError as exc:
        outcome = {"committed": False, "error": type(exc).__name__}
    temporary = here / f"outcome-{me}.tmp"
    temporary.write_text(json.dumps(outcome))
    temporary.rename(here / f"outcome-{me}.json")  # whole, or not there


def _run(processes: Any, db_path: Path, scenario: str, how: str, folder: Path) -> dict[str, Any]:
    db = mere.connect(db_path)
    db.create_table("t", SCHEMA, partition_by=["grp"])
    db.table("t").append(
        pa.table({"id": [1, 2, 3, 4], "grp": ["a", "a", "b", "b"], "v": [1, 2, 200, 4]})
    )
    folder.mkdir()
    children = [
        processes.start(child, str(db_path), scenario, me, how, str(folder)) for me in (0, 1)
    ]
    processes.join(children)
    outcomes = [json.loads((folder / f"outcome-{me}.json").read_text()) for me in (0, 1)]
    final = mere.connect(db_path, create=False).table("t").scan().sort_by("id").to_pylist()
    return {"outcomes": outcomes, "final": final}


@pytest.mark.slow
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_sql_transactions_conflict_as_the_python_api_does(
    processes: Any, tmp_path: Path, scenario: str
) -> None:
    through_sql = _run(processes, tmp_path / "sql-db", scenario, "sql", tmp_path / "sql")
    through_api = _run(processes, tmp_path / "api-db", scenario, "api", tmp_path / "api")
    assert through_sql == through_api
    # The overlap is real: child 1, committing second, loses unless the rows are apart.
    committed = [o["committed"] for o in through_sql["outcomes"]]
    assert committed == [True, scenario == "rows in different partitions"], through_sql
