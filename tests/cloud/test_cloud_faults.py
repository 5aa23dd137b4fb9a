"""mere's commits through a fault-injecting proxy in front of moto and Azurite.

Each scenario runs concurrent appends (3 writer threads, 5 appends each, one
connection per writer) while the proxy injects one kind of fault, then clears
the faults and checks the whole history against what every writer was told
(``cloud_history.check_history``): no acknowledged commit lost, none applied
twice, dense versions, no silent overwrite, definite failures invisible, and
unknown outcomes reported as ``CommitOutcomeUnknown`` with nothing deleted
(the final scan reads every live data file).

The faults that fired and the retries they caused are printed per scenario
(run with ``-s`` to see them).
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest
from cloud_history import Outcomes, check_history
from cloud_servers import Cloud

import mere
from mere.errors import MereError
from mere.verify.http_proxy import Fault, FaultProxy

WRITERS = 3
APPENDS = 5
SCHEMA = pa.schema([pa.field("value", pa.string(), nullable=False)])
ALL = frozenset({"GET", "PUT", "HEAD", "DELETE"})


def scenarios(cloud: Cloud) -> dict[str, list[Fault]]:
    """Fault rules per scenario; probabilities are per request."""
    busy = cloud.busy_code
    return {
        # The write landed, then the connection died: only a read-back can tell.
        "drop_after_put": [Fault("drop_after", probability=0.2)],
        # The write landed, then the server said 500.
        "error_after_put": [Fault("error_after", status=500, probability=0.2)],
        # Throttled before anything happened, on every kind of request.
        "busy_before": [Fault("error_before", methods=ALL, status=503, code=busy, probability=0.2)],
        # S3's "a concurrent conditional request raced": not "exists", retry.
        "conflict_409": [
            Fault("error_before", status=409, code="ConditionalRequestConflict", probability=0.25)
        ],
        "reset_before": [Fault("reset_before", methods=ALL, probability=0.1)],
        # Everything at once, with delays and failing GETs: read-backs can fail too.
        "mixed": [
            Fault("drop_after", probability=0.1),
            Fault("error_after", status=500, probability=0.05),
            Fault("error_before", methods=ALL, status=503, code=busy, probability=0.05),
            Fault("error_before", methods=frozenset({"GET"}), status=500, probability=0.1),
            Fault("reset_before", methods=ALL, probability=0.03),
            Fault("delay", methods=ALL, probability=0.2, delay=0.02),
        ],
    }


#: Scenarios whose faults never let a request land: nothing may fail.
NOT_APPLIED = {"busy_before", "conflict_409", "reset_before"}

SCENARIOS = [
    "drop_after_put",
    "error_after_put",
    "busy_before",
    "conflict_409",
    "reset_before",
    "mixed",
]


def _writer(
    cloud: Cloud, endpoint: str, prefix: str, writer: int, outcomes: Outcomes, errors: list[str]
) -> None:
    store = cloud.store(endpoint, prefix=prefix)
    db = mere.connect(store, create=False)
    table = db.table("t")
    for seq in range(APPENDS):
        value = f"w{writer}-{seq}"
        try:
            version = table.append([{"value": value}])
        except mere.CommitOutcomeUnknown:
            outcomes.unknown.add(value)
        except MereError as exc:
            outcomes.failed.add(value)
            errors.append(f"{value}: {type(exc).__name__}: {exc}")
        else:
            outcomes.acked[value] = version


def run_scenario(cloud: Cloud, proxy: FaultProxy, faults: list[Fault]) -> dict[str, Any]:
    prefix = f"faults-{cloud.name}-{id(faults):x}"
    setup = cloud.store(prefix=prefix)
    mere.connect(setup, checkpoint_interval=5).create_table("t", SCHEMA)
    for fault in faults:
        proxy.add(fault)
    per_writer = [Outcomes.empty() for _ in range(WRITERS)]
    errors: list[str] = []
    threads = [
        threading.Thread(
            target=_writer, args=(cloud, proxy.endpoint, prefix, w, per_writer[w], errors)
        )
        for w in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a writer hung"
    proxy.clear()
    outcomes = Outcomes.empty()
    for one in per_writer:
        outcomes.merge(one)
    assert len(outcomes.acked) + len(outcomes.unknown) + len(outcomes.failed) == WRITERS * APPENDS
    report = check_history(cloud.store(prefix=prefix), "t", "value", outcomes)
    report["fired"] = {f"{kind}@{on}": n for (kind, on), n in sorted(proxy.fired_on.items())}
    report["errors"] = [error[:160] for error in errors]
    return report


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_commits_under_faults(
    cloud: Cloud, proxy: FaultProxy, scenario: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run_scenario(cloud, proxy, scenarios(cloud)[scenario])
    with capsys.disabled():
        print(f"\n[{cloud.name}/{scenario}] {report}")
    assert sum(report["fired"].values()) > 0, "no fault fired: the scenario tested nothing"
    assert report["acked"] > 0, report
    if scenario in NOT_APPLIED:
        # Faults that reject a request before it is applied are always retried
        # away: every commit must get through.
        assert report["acked"] == WRITERS * APPENDS, report
