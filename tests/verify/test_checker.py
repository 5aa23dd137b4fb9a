"""The checker finds each anomaly class in small hand-built histories, and nothing in clean ones.

Each test describes a log (``build_truth``: which transaction each version
names and what state it left each key in) and what the clients recorded
(``Txn``), and asserts which anomaly classes the checker reports. The logs
of G0 and G1c cannot come from mere -- its log order makes every ww and wr
edge point forward -- so those tests describe broken logs on purpose: they
test the cycle search, not mere.
"""

from __future__ import annotations

from typing import Any

import pytest

from mere.verify import check, forbidden, strongest_level
from mere.verify.checker import ADYA, ANOMALIES, CheckResult
from mere.verify.history import History, Txn
from mere.verify.truth import LogTruth, build_truth
from mere.verify.workloads import Workload

LIST = Workload("list-append", tables=1, keys=3)
REGISTER = Workload("register", tables=1, keys=3)
T = LIST.table_names[0]
R = REGISTER.table_names[0]
X, Y, Z = (T, 0), (T, 1), (T, 2)
SETUP = (1, "p0:0", {})


def r(key: tuple[str, int], value: list[int] | None) -> dict[str, Any]:
    return {"f": "r", "t": key[0], "k": key[1], "v": value}


def a(key: tuple[str, int], value: int) -> dict[str, Any]:
    return {"f": "append", "t": key[0], "k": key[1], "v": value}


def w(key: tuple[str, int], value: int) -> dict[str, Any]:
    return {"f": "w", "t": key[0], "k": key[1], "v": value}


def txn(
    process: int,
    ops: list[dict[str, Any]],
    *,
    type: str = "ok",
    read_version: int | None = 1,
    version: int | None = None,
    isolation: str = "serializable",
    n: int = 0,
) -> Txn:
    return Txn(
        process=process,
        n=n,
        type=type,  # type: ignore[arg-type]
        ops=ops,
        start=float(process),
        end=float(process) + 0.5,
        read_version=read_version,
        version=version,
        isolation=isolation,
    )


def run_check(
    truth: LogTruth, txns: list[Txn], isolation: str = "serializable", workload: Workload = LIST
) -> CheckResult:
    return check(History(txns), truth, workload, isolation)


def found(result: CheckResult) -> set[str]:
    return {k for k, v in result.counts.items() if v}


# --- clean histories --------------------------------------------------------------------


def test_a_serial_history_is_valid_and_serializable() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {Y: (2,)})], LIST.keys_of())
    txns = [
        txn(1, [r(X, []), a(X, 1)], version=2),
        txn(2, [r(X, [1]), a(Y, 2)], read_version=2, version=3),
        txn(3, [r(X, [1]), r(Y, [2])], read_version=3, version=3),  # read-only
        txn(4, [a(Z, 9)], type="fail"),
    ]
    result = run_check(truth, txns)
    assert found(result) == set()
    assert result.valid
    assert result.strongest == "serializable"
    # setup->p1 (X empty), p1->p2 (X), p1->p3 (X), p2->p3 (Y)
    assert result.graph["wr"] == 4


def test_own_writes_are_seen_and_subtracted() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1, 2)})], LIST.keys_of())
    txns = [txn(1, [a(X, 1), r(X, [1]), a(X, 2), r(X, [2, 1])], version=2)]
    assert found(run_check(truth, txns)) == set()


def test_an_indeterminate_transaction_is_resolved_from_the_log() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)})], LIST.keys_of())
    txns = [
        txn(1, [a(X, 1)], type="info"),  # landed: committed
        txn(2, [a(Y, 5)], type="info"),  # never landed: aborted
        txn(3, [r(X, [1]), r(Y, [])], read_version=2, version=2),
    ]
    result = run_check(truth, txns)
    assert found(result) == set()
    assert result.outcomes["info-committed"] == 1
    assert result.outcomes["info-aborted"] == 1


# --- each anomaly class -----------------------------------------------------------------


def test_g0_write_cycle() -> None:
    # A broken log: p1's and p2's writes to X and Y interleave in opposite orders.
    truth = build_truth(
        [
            SETUP,
            (2, "p1:0", {X: (1,)}),
            (2, "p2:0", {Y: (2,)}),
            (3, "p2:0", {X: (1, 3)}),
            (3, "p1:0", {Y: (2, 4)}),
        ],
        LIST.keys_of(),
    )
    txns = [txn(1, [a(X, 1), a(Y, 4)], version=2), txn(2, [a(Y, 2), a(X, 3)], version=2)]
    result = run_check(truth, txns)
    assert "G0" in found(result)
    cycle = result.anomalies["G0"][0].cycle
    assert cycle is not None and {step["type"] for step in cycle} == {"ww"}
    assert not result.valid
    assert result.strongest == "none"


def test_g1a_aborted_read() -> None:
    truth = build_truth([SETUP, (2, "p2:0", {Y: (7,)})], LIST.keys_of())
    txns = [
        txn(1, [a(X, 5)], type="fail"),
        txn(2, [r(X, [5]), a(Y, 7)], version=2),
    ]
    result = run_check(truth, txns)
    assert found(result) == {"G1a"}
    assert result.anomalies["G1a"][0].txns == ["p1:0", "p2:0"]
    assert result.strongest == "read-uncommitted"


def test_g1a_of_an_indeterminate_transaction_that_did_not_land() -> None:
    truth = build_truth([SETUP, (2, "p2:0", {Y: (7,)})], LIST.keys_of())
    txns = [txn(1, [a(X, 5)], type="info"), txn(2, [r(X, [5]), a(Y, 7)], version=2)]
    assert found(run_check(truth, txns)) == {"G1a"}


def test_g1b_intermediate_read_of_part_of_an_append() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (5, 6)}), (3, "p2:0", {Y: (7,)})], LIST.keys_of())
    txns = [
        txn(1, [a(X, 5), a(X, 6)], version=2),
        txn(2, [r(X, [5]), a(Y, 7)], read_version=2, version=3),
    ]
    result = run_check(truth, txns)
    assert found(result) == {"G1b"}


def test_g1b_intermediate_read_of_a_register() -> None:
    rx, ry = (R, 0), (R, 1)
    truth = build_truth(
        [(1, "p0:0", {rx: (100,), ry: (101,)}), (2, "p1:0", {rx: (6,)}), (3, "p2:0", {ry: (7,)})],
        REGISTER.keys_of(),
        ordered=False,
    )
    txns = [
        txn(1, [w(rx, 5), w(rx, 6)], version=2),
        txn(2, [r(rx, [5]), w(ry, 7)], read_version=2, version=3),
    ]
    result = run_check(truth, txns, workload=REGISTER)
    assert found(result) == {"G1b"}


def test_g1c_circular_information_flow() -> None:
    # Each transaction read what the other wrote: a broken log (a read from the future).
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {Y: (2,)})], LIST.keys_of())
    txns = [
        txn(1, [a(X, 1), r(Y, [2])], version=2),
        txn(2, [a(Y, 2), r(X, [1])], version=3),
    ]
    result = run_check(truth, txns)
    assert "G1c" in found(result)
    assert "G0" not in found(result)
    cycle = result.anomalies["G1c"][0].cycle
    assert cycle is not None and "wr" in {step["type"] for step in cycle}
    assert "snapshot-violation" in found(result)  # a read from the future
    assert result.strongest == "read-uncommitted"


def test_g_single_lost_update() -> None:
    # Both read X empty at version 1 and appended to it: read skew / lost update.
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {X: (1, 2)})], LIST.keys_of())
    txns = [
        txn(1, [r(X, []), a(X, 1)], version=2),
        txn(2, [r(X, []), a(X, 2)], version=3),
    ]
    result = run_check(truth, txns, "serializable")
    assert {"G-single", "rw-conflict-missed"} <= found(result)
    assert "G2" not in found(result)
    rw = [s for s in result.anomalies["G-single"][0].cycle or [] if s["type"] == "rw"]
    assert len(rw) == 1
    assert result.strongest == "read-committed"
    assert not result.valid
    # Allowed at snapshot (mere's snapshot level lets concurrent appends both commit).
    assert run_check(truth, txns, "snapshot").valid


def test_g2_write_skew() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {Y: (1,)}), (3, "p2:0", {X: (2,)})], LIST.keys_of())
    txns = [
        txn(1, [r(X, []), a(Y, 1)], version=2),
        txn(2, [r(Y, []), a(X, 2)], version=3),
    ]
    result = run_check(truth, txns, "serializable")
    assert "G2" in found(result)
    assert "G-single" not in found(result)
    cycle = result.anomalies["G2"][0].cycle
    assert cycle is not None and [s["type"] for s in cycle].count("rw") == 2
    assert result.strongest == "snapshot-isolation"
    assert not result.valid
    snapshot = run_check(truth, txns, "snapshot")
    assert snapshot.valid and snapshot.strongest == "snapshot-isolation"


def test_write_serializable_allows_a_blind_append_under_a_read_only() -> None:
    # p2's read of X was overtaken by p1's append: fine if p1 was a blind append.
    commits = [SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {Y: (2,)})]
    txns = [txn(1, [a(X, 1)], version=2), txn(2, [r(X, []), a(Y, 2)], version=3)]
    blind = build_truth(commits, LIST.keys_of(), blind=[2])
    assert run_check(blind, txns, "write_serializable").valid
    assert not run_check(blind, txns, "serializable").valid
    not_blind = build_truth(commits, LIST.keys_of())
    result = run_check(not_blind, txns, "write_serializable")
    assert found(result) == {"rw-conflict-missed"}
    assert not result.valid


def test_lost_acknowledged_commit() -> None:
    truth = build_truth([SETUP], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1)], version=2)])
    assert found(result) == {"lost"}
    assert not result.valid


def test_lost_append_inside_a_commit() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)})], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1), a(Y, 2)], version=2)])
    assert found(result) == {"lost"}
    assert "[2]" in result.anomalies["lost"][0].explanation


def test_duplicated_value() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1, 1)})], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1)], version=2)])
    assert "duplicate" in found(result)


def test_duplicated_commit() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)}), (3, "p1:0", {})], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1)], version=2)])
    assert found(result) == {"duplicate"}


def test_failed_transaction_that_committed() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)})], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1)], type="fail")])
    assert found(result) == {"failed-committed"}


def test_wrong_version_and_unclaimed_write() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,), Y: (3,)})], LIST.keys_of())
    result = run_check(truth, [txn(1, [a(X, 1)], version=5)])
    assert found(result) == {"wrong-version", "unclaimed"}


def test_stale_read_is_a_snapshot_violation() -> None:
    truth = build_truth([SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {Y: (2,)})], LIST.keys_of())
    txns = [
        txn(1, [a(X, 1)], version=2),
        txn(2, [r(X, []), a(Y, 2)], read_version=2, version=3),  # X held [1] at 2
    ]
    result = run_check(truth, txns, "snapshot")
    assert found(result) == {"snapshot-violation"}
    assert not result.valid


def test_read_of_a_state_that_never_existed() -> None:
    truth = build_truth(
        [SETUP, (2, "p1:0", {X: (1,)}), (3, "p2:0", {X: (1, 2)}), (4, "p3:0", {Y: (3,)})],
        LIST.keys_of(),
    )
    txns = [
        txn(1, [a(X, 1)], version=2),
        txn(2, [a(X, 2)], read_version=2, version=3),
        txn(3, [r(X, [2]), a(Y, 3)], read_version=3, version=4),  # 2 without 1
    ]
    assert found(run_check(truth, txns)) == {"incompatible-order"}


def test_bank_total() -> None:
    bank = Workload("bank", tables=2, keys=1)
    truth = build_truth([(1, "p0:0", {})], bank.keys_of(), ordered=False)
    truth.bad_totals[1] = 150
    (t0, t1) = bank.table_names
    audit = [
        {"f": "r", "t": t0, "k": 0, "v": [], "bal": [100], "audit": True},
        {"f": "r", "t": t1, "k": 0, "v": [], "bal": [60], "audit": True},
    ]
    result = run_check(truth, [txn(1, audit, version=1)], workload=bank)
    assert found(result) == {"bank-total"}
    assert result.counts["bank-total"] == 2  # the version, and the audit


# --- levels ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kinds", "level"),
    [
        ((), "serializable"),
        (("G2",), "snapshot-isolation"),
        (("G2", "G-single"), "read-committed"),
        (("G1b",), "read-uncommitted"),
        (("G0",), "none"),
        (("lost",), "none"),
    ],
)
def test_strongest_level(kinds: tuple[str, ...], level: str) -> None:
    assert strongest_level(kinds) == level


def test_forbidden_sets() -> None:
    assert forbidden("serializable") == frozenset(ANOMALIES)
    assert set(ADYA) - forbidden("snapshot") == {"G-single", "G2"}
    assert forbidden("write_serializable") - forbidden("snapshot") == {"rw-conflict-missed"}
    with pytest.raises(ValueError):
        forbidden("read_committed")


def test_history_round_trips_through_json() -> None:
    history = History([txn(1, [a(X, 1)], version=2)])
    again = History.from_json(history.to_json())
    assert again.txns == history.txns


def test_duplicate_key() -> None:
    upsert = Workload("upsert", tables=1, keys=1)
    truth = build_truth([(1, "p0:0", {})], upsert.keys_of(), ordered=False)
    truth.duplicate_keys[1] = ["verify_ups0/0"]
    result = run_check(truth, [], workload=upsert)
    assert found(result) == {"duplicate-key"}
