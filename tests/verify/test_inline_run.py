"""Verify runs with inlined data files (docs/format.md §2.5) and the flushes that move them.

With ``--inline-limit`` the clients' small appends carry their Parquet bytes
in the log, and a checkpointing client flushes a table's inlined files to
ordinary data files in a ``dataChange=false`` commit that no verify client
claims. The checker must accept such a commit when it moves rows without
changing any key (keeping list-append's order), and flag one that changes a
row as an unclaimed change.
"""

from __future__ import annotations

import io
import json
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import mere
from mere.cli.main import cli
from mere.data.writer import new_data_file_path
from mere.log.inlined import decode_inlined
from mere.maintain.inline import flush_inlined, inlined_bytes
from mere.storage import open_store
from mere.verify import RunConfig, RunResult, check, read_truth, run
from mere.verify.workloads import Workload

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals")

FAULTS = ("latency", "error-before", "error-after", "exists-after", "kill", "stale-hint")


def inlined_adds(uri: str) -> int:
    """How many adds of the log carry their bytes inline."""
    store = open_store(uri)
    try:
        keys = [m.key for m in store.list("_log/") if m.key.endswith(".json")]
        return sum(store.get(k).count(b'"inline":') for k in keys)
    finally:
        store.close()


def recheck(result: RunResult) -> set[str]:
    """The anomaly classes the run's history shows against the log as it is now."""
    store = open_store(result.config.uri)
    try:
        truth = read_truth(store, result.config.make_workload())
    finally:
        store.close()
    found = check(result.history, truth, result.config.make_workload(), result.config.isolation)
    return {k for k, v in found.counts.items() if v}


@pytest.mark.slow
def test_an_inlining_run_with_every_fault_flushes_and_is_valid(shared_dir: Path) -> None:
    uri = str(shared_dir / "db")
    result = run(
        RunConfig(
            uri=uri,
            processes=4,
            # Long enough for a kill (the first comes 0.5-1.5 s in): 200 took
            # 1.1 s once commits got cheaper, and a CI run saw no kill.
            transactions=600,
            faults=FAULTS,
            inline_limit=65536,
            inline_flush_bytes=4096,
            seed=5,
        )
    )
    assert result.valid, result.result.to_json()["anomalies"]
    assert not result.result.counts
    assert result.faults.get("kill", 0) > 0 and result.faults.get("exists_after", 0) > 0
    assert result.rearranged_versions, "no flush of inlined files happened during the run"
    assert inlined_adds(uri) > 50
    db = mere.connect(uri, create=False)
    assert db.latest_state().protocol.format_version == 4
    assert db.properties["inlineLimit"] == "65536"
    assert db.properties["checkpointInterval"] == "10"
    for version in result.rearranged_versions:
        (entry,) = [e for e in db.history() if e["version"] == version]
        assert entry["operation"] == "FLUSH INLINED", entry

    # A flush after the run moves every inlined file left: the same history still checks.
    # (When the run's last commit was itself a flush that moved them all, nothing is left.)
    left = inlined_bytes(db.latest_state())
    flushed = flush_inlined(db, 0)
    if left:
        assert flushed is not None
    else:
        assert flushed is None and result.rearranged_versions[-1] == db.version
        flushed = db.version
    assert recheck(result) == set()
    store = open_store(uri)
    try:
        assert flushed in read_truth(store, result.config.make_workload()).rearranged
    finally:
        store.close()

    # A "flush" that changes a row is a change no transaction made.
    db.set_properties({"inlineLimit": "65536"})  # (a no-op commit: the log moves on)
    db.table("verify_la0").append([{"k": 10**6, "v": 1}])
    tx = db.begin("snapshot")
    (table,) = [t for t in tx.read_state.tables.values() if t.meta.name == "verify_la0"]
    (add,) = [a for a in table.live.values() if a.inline is not None]  # the one just appended
    assert add.inline is not None
    changed = decode_inlined(add.inline).set_column(1, "v", pa.array([2], pa.int64()))
    sink = io.BytesIO()
    pq.write_table(changed, sink)
    data = sink.getvalue()
    bad = replace(add, path=new_data_file_path({}), inline=data, size=len(data))
    tx.stage.replace_files(table.meta.id, [add], [bad], owned=False)
    tx.commit()
    assert recheck(result) == {"unclaimed"}


def test_a_flush_keeps_the_append_order_of_a_key(tmp_path: Path) -> None:
    """A flush moves inlined rows after the stored ones, where they already were."""
    workload = Workload("list-append", tables=1, keys=1)
    db = mere.connect(tmp_path / "db")
    db.set_properties({"inlineLimit": "65536"})
    workload.setup(db)
    name = workload.table_names[0]
    for n, inline in enumerate(["0", "65536", "65536"], start=1):
        db.set_properties({"inlineLimit": inline})
        with db.transaction() as tx:
            tx.table(name).append([{"k": 0, "v": n}])
            tx.set_app_transaction("verify/p1", n)
    (table,) = db.latest_state().tables.values()
    assert [a.inline is None for a in table.live.values()] == [True, False, False]
    flushed = flush_inlined(db, 0)
    assert flushed is not None
    assert db.table(name).scan().column("v").to_pylist() == [1, 2, 3]
    truth = read_truth(db.store, workload)
    assert truth.rearranged == [flushed]
    assert truth.unclaimed_versions == []
    assert truth.state_at((name, 0), flushed) == (1, 2, 3)


def test_the_command_turns_inlining_on(shared_dir: Path) -> None:
    uri = str(shared_dir / "db")
    out = CliRunner().invoke(
        cli,
        [
            "verify",
            uri,
            *("--processes", "2", "--transactions", "40", "--seed", "1", "--json"),
            *("--inline-limit", "4096", "--inline-flush-bytes", "2048"),
            *("--checkpoint-interval", "5"),
        ],
    )
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["config"]["inline_limit"] == 4096
    assert data["config"]["checkpoint_interval"] == 5
    assert data["rearranged_versions"]
    properties = mere.connect(uri, create=False).properties
    assert properties["inlineLimit"] == "4096"
    assert properties["inlineFlushBytes"] == "2048"
    assert properties["checkpointInterval"] == "5"
    assert inlined_adds(uri) > 10


def test_inlining_options_are_checked(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["verify", str(tmp_path / "a"), "--inline-limit", "2000000"])
    assert out.exit_code == 2 and "--inline-limit" in out.output
    out = runner.invoke(cli, ["verify", str(tmp_path / "a"), "--checkpoint-interval", "0"])
    assert out.exit_code == 2
    assert not (tmp_path / "a").exists()
