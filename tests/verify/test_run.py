"""Real verify runs: client processes against a local store, with and without faults.

At ``serializable`` no anomaly may ever appear, faults or not. At
``snapshot``, a write-skew-prone workload (few keys, reads then appends)
must show what the weaker level allows -- G-single or G2 -- and the verdict
must still be valid, since mere's snapshot level allows them. Finally, real
histories edited to lie (a deliberately broken client) must be caught.
"""

from __future__ import annotations

import copy
import io
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from mere.cli.main import cli
from mere.storage import open_store
from mere.verify import RunConfig, RunResult, VerifyError, check, read_truth, run
from mere.verify.history import History, Txn
from mere.verify.report import summary

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals"),
]

CLIENT_FAULTS = ("latency", "error-before", "error-after", "exists-after")


def recheck(result: RunResult, history: History) -> set[str]:
    """Check an (edited) history against the run's log again; the anomaly classes found."""
    store = open_store(result.config.uri)
    try:
        truth = read_truth(store, result.config.make_workload())
    finally:
        store.close()
    found = check(history, truth, result.config.make_workload(), result.config.isolation)
    return {k for k, v in found.counts.items() if v}


def skew_prone_runs(
    shared_dir: Path, name: str, seeds: int, **config: Any
) -> Iterator[tuple[RunResult, set[str]]]:
    """Runs of a write-skew-prone workload (few keys, reads then appends), one a seed.

    Yields each run and the anomaly classes its check found; a test stops
    drawing once it has seen what it looks for (write skew needs a collision).
    """
    for seed in range(seeds):
        result = run(
            RunConfig(
                uri=str(shared_dir / f"{name}{seed}"),
                processes=4,
                transactions=150,
                tables=1,
                keys=2,
                seed=seed,
                **config,
            )
        )
        yield result, {k for k, v in result.result.counts.items() if v}


def first_showing(
    runs: Iterator[tuple[RunResult, set[str]]], wanted: Callable[[set[str]], object]
) -> tuple[RunResult, set[str]]:
    """The first of ``runs`` whose anomaly classes are ``wanted``, else the last one."""
    last = None
    for last in runs:
        if wanted(last[1]):
            break
    assert last is not None, "no run"
    return last


@pytest.fixture(scope="module")
def serializable_run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """One clean serializable run, shared by the tests that edit its history."""
    uri = str(tmp_path_factory.mktemp("verify") / "db")
    return run(RunConfig(uri=uri, processes=3, transactions=120, keys=4, seed=7))


def test_serializable_run_through_the_command_is_valid(shared_dir: Path) -> None:
    report = shared_dir / "report.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mere.verify",
            str(shared_dir / "db"),
            *("--processes", "4", "--transactions", "300", "--isolation", "serializable"),
            *("--report", str(report), "--seed", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VALID" in done.stdout
    data = json.loads(report.read_text())
    assert data["valid"] is True
    assert data["transactions"] == 300
    assert data["check"]["outcomes"]["ok"] > 100
    assert not any(data["check"]["counts"].values()), data["check"]["anomalies"]
    assert data["check"]["strongest_consistent_level"] == "serializable"
    assert data["check"]["graph"]["rw"] > 0  # the workload does collide


def test_serializable_run_with_every_fault_is_valid(shared_dir: Path) -> None:
    result = run(
        RunConfig(
            uri=str(shared_dir / "db"),
            processes=4,
            transactions=300,
            faults=(*CLIENT_FAULTS, "kill", "stale-hint"),
            seed=2,
        )
    )
    check_result = result.result
    assert result.valid, check_result.to_json()["anomalies"]
    assert not check_result.counts
    fired = result.faults
    for kind in ("delay", "error_before", "error_after", "exists_after", "kill", "stale-hint"):
        assert fired.get(kind, 0) > 0, fired
    assert check_result.outcomes["info"] >= 1  # killed clients leave indeterminate transactions
    assert (
        check_result.outcomes.get("info-committed", 0)
        + check_result.outcomes.get("info-aborted", 0)
        == check_result.outcomes["info"]
    )


@pytest.mark.parametrize("workload", ["register", "bank", "upsert"])
def test_register_and_bank_runs_with_faults_are_valid(shared_dir: Path, workload: str) -> None:
    result = run(
        RunConfig(
            uri=str(shared_dir / workload),
            workload=workload,
            processes=3,
            transactions=120,
            keys=3,
            faults=("error-after", "exists-after", "kill"),
            seed=3,
        )
    )
    assert result.valid, result.result.to_json()["anomalies"]
    assert not result.result.counts


def test_snapshot_isolation_shows_write_skew(shared_dir: Path) -> None:
    """Few keys, reads then appends: at snapshot the cycles serializable forbids appear."""
    for result, seen in skew_prone_runs(shared_dir, "db", 3, isolation="snapshot"):
        assert result.valid  # allowed at snapshot
        if seen:
            break
    assert seen and seen <= {"G-single", "G2"}, seen
    assert result.result.strongest in ("read-committed", "snapshot-isolation")
    assert not any(k in result.result.forbidden_found for k in seen)


# --- a deliberately broken client: real histories, edited ---------------------------------------


def _committed_reads(history: History) -> list[tuple[Txn, dict[str, object]]]:
    return [
        (t, op)
        for t in history.txns
        if t.type == "ok"
        for op in t.ops
        if op["f"] == "r" and op["v"]
    ]


def test_an_edited_history_is_caught(serializable_run: RunResult) -> None:
    assert serializable_run.valid
    assert recheck(serializable_run, serializable_run.history) == set()

    # A read that missed a value: stale or inconsistent.
    history = copy.deepcopy(serializable_run.history)
    _, op = _committed_reads(history)[-1]
    op["v"] = list(op["v"])[:-1]  # type: ignore[call-overload]
    assert recheck(serializable_run, history) & {
        "snapshot-violation",
        "incompatible-order",
        "G-single",
        "G2",
        "rw-conflict-missed",
    }

    # A read of a value only a failed transaction wrote: G1a.
    history = copy.deepcopy(serializable_run.history)
    failed = next(t for t in history.txns if t.type == "fail" and t.writes)
    _, op = _committed_reads(history)[0]
    op["v"] = [*op["v"], failed.writes[0]["v"]]  # type: ignore[misc]
    assert "G1a" in recheck(serializable_run, history)

    # A client told "committed" whose commit is nowhere: lost.
    history = copy.deepcopy(serializable_run.history)
    failed = next(t for t in history.txns if t.type == "fail" and t.writes)
    failed.type = "ok"
    failed.version = 10**6
    assert recheck(serializable_run, history) == {"lost"}

    # A client told the wrong version.
    history = copy.deepcopy(serializable_run.history)
    writer = next(t for t in history.txns if t.type == "ok" and t.writes)
    assert writer.version is not None
    writer.version += 1
    assert recheck(serializable_run, history) == {"wrong-version"}


def test_the_command_exits_3_on_a_forbidden_anomaly(
    serializable_run: RunResult, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = copy.deepcopy(serializable_run)
    writer = next(t for t in bad.history.txns if t.type == "ok" and t.writes)
    writer.type = "fail"  # told it failed, but it committed
    store = open_store(bad.config.uri)
    truth = read_truth(store, bad.config.make_workload())
    store.close()
    bad.result = check(bad.history, truth, bad.config.make_workload(), "serializable")
    monkeypatch.setattr("mere.cli.verify.run", lambda config, progress: bad)
    report = tmp_path / "r.json"
    out = CliRunner().invoke(cli, ["verify", str(tmp_path / "x"), "--report", str(report)])
    assert out.exit_code == 3, out.output
    assert "INVALID" in out.output and "failed-committed" in out.output
    assert json.loads(report.read_text())["check"]["forbidden_found"] == ["failed-committed"]


# --- refusals ------------------------------------------------------------------------------------


def test_memory_store_is_refused() -> None:
    out = CliRunner().invoke(cli, ["verify", "memory://x", "--transactions", "5"])
    assert out.exit_code == 1
    assert "memory://" in out.output and "process" in out.output
    with pytest.raises(VerifyError, match="memory"):
        run(RunConfig(uri="memory://y", transactions=5))


def test_an_existing_database_is_refused(serializable_run: RunResult) -> None:
    out = CliRunner().invoke(cli, ["verify", serializable_run.config.uri, "--transactions", "5"])
    assert out.exit_code == 1
    assert "already exists" in out.output


def test_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["verify", str(tmp_path / "a"), "--faults", "nope"])
    assert out.exit_code == 2 and "unknown fault" in out.output
    out = runner.invoke(
        cli, ["verify", str(tmp_path / "a"), "--duration", "1", "--transactions", "3"]
    )
    assert out.exit_code == 2


# --- a deliberately broken build: conflict detection switched off --------------------------------


def test_a_build_without_conflict_detection_is_caught(shared_dir: Path) -> None:
    """The test-only switch turns conflict detection off; serializable must then fail.

    Few keys, reads then appends: exactly the write skew the serializable
    conflict rules prevent. With the rules off, the checker has to find
    G-single or G2 (or the conflict it should have raised) and the verdict
    must be invalid.
    """
    broken = skew_prone_runs(
        shared_dir,
        "broken",
        3,
        isolation="serializable",
        unsafe_disable_conflict_detection=True,
    )
    result, found = first_showing(broken, lambda found: found & {"G-single", "G2"})
    assert found & {"G-single", "G2"}, found
    assert not result.valid
    assert set(result.result.forbidden_found) & {"G-single", "G2"}
    assert result.result.outcomes.get("fail", 0) == 0  # nothing was refused: the build is broken
    assert "BROKEN BUILD" in _rendered(result)


def test_the_switch_reaches_the_command_and_is_reported(
    shared_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MERE_UNSAFE_DISABLE_CONFLICT_DETECTION", "1")
    out = CliRunner().invoke(
        cli,
        [
            "verify",
            str(shared_dir / "db"),
            *("--processes", "4", "--transactions", "200", "--tables", "1", "--keys", "2"),
            *("--seed", "3", "--json"),
        ],
    )
    data = json.loads(out.output)
    assert data["config"]["unsafe_disable_conflict_detection"] is True
    assert out.exit_code == 3, out.output
    assert set(data["check"]["forbidden_found"]) & {"G-single", "G2", "rw-conflict-missed"}


def _rendered(result: RunResult) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary(result))
    return console.export_text()


def test_upserts_without_conflict_detection_duplicate_keys(shared_dir: Path) -> None:
    """The checker sees duplicate keys when the key conflict rule is off (a broken build)."""
    broken = skew_prone_runs(
        shared_dir,
        "keys",
        4,
        workload="upsert",
        isolation="snapshot",
        unsafe_disable_conflict_detection=True,
    )
    result, found = first_showing(broken, lambda found: "duplicate-key" in found)
    assert "duplicate-key" in found, found
    assert not result.valid
