"""Proof tooling: run concurrent workloads against a database and check the history.

``mere verify URI`` (or ``python -m mere.verify URI``) starts client
processes that run random transactions against a fresh database at ``URI``,
records every transaction with its invocation and completion, optionally
injects faults (storage errors, ambiguous commits, latency, killed clients,
stale hints), and then checks the history against the log: lost and
duplicated writes, and the Adya anomalies as Jepsen's Elle names them (G0,
G1a, G1b, G1c, G-single, G2). See :mod:`mere.verify.checker`.
"""

from mere.verify.checker import (
    ADYA,
    ANOMALIES,
    DESCRIPTIONS,
    ISOLATION_LEVELS,
    Anomaly,
    CheckResult,
    check,
    forbidden,
    strongest_level,
)
from mere.verify.history import History, Txn
from mere.verify.runner import RunConfig, RunResult, VerifyError, run
from mere.verify.truth import LogTruth, read_truth
from mere.verify.workloads import WORKLOADS, Workload

__all__ = [
    "ADYA",
    "ANOMALIES",
    "DESCRIPTIONS",
    "ISOLATION_LEVELS",
    "WORKLOADS",
    "Anomaly",
    "CheckResult",
    "History",
    "LogTruth",
    "RunConfig",
    "RunResult",
    "Txn",
    "VerifyError",
    "Workload",
    "check",
    "forbidden",
    "read_truth",
    "run",
    "strongest_level",
]
