"""A verify client: one OS process running transactions and recording them.

The parent starts clients from a fork server (or with ``spawn``), never by
forking itself, so a client shares nothing with the parent or its siblings
but the object store; it takes the parent's environment from its spec, since
a fork server started earlier holds an older one. Each client connects through a
:class:`~mere.storage.FaultyStore` carrying the faults the run asked for,
runs transactions until its quota or the deadline, and appends every
invocation and completion to its own history file (see
:mod:`mere.verify.history`).

How a transaction ends is recorded the way Jepsen does:

* ``ok``: ``commit()`` returned a version (read-only transactions commit
  nothing and report their read version);
* ``fail``: definitely not committed -- a ConflictError, or any other error
  from which mere deletes the transaction's files (it claims the outcome is
  definite, and the checker holds it to that);
* ``info``: :class:`~mere.errors.CommitOutcomeUnknown`, or the process was
  killed (no completion record at all).
"""

from __future__ import annotations

import logging
import os
import random
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mere.database import Database, connect
from mere.errors import CommitOutcomeUnknown, ConflictError, MereError
from mere.storage import Fault, FaultyStore, ObjectStore, open_store
from mere.txn.conflicts import UNSAFE_DISABLE_SWITCH
from mere.verify.history import HistoryWriter, MicroOp, app_id
from mere.verify.workloads import ValueSource, Workload

#: Client-side fault kinds, injected by a FaultyStore around each client's store.
CLIENT_FAULTS = ("latency", "error-before", "error-after", "exists-after")
#: Parent-side fault kinds: ``kill`` and ``stale-hint`` act on the clients and the log;
#: ``http`` puts a fault-injecting proxy between the clients and a cloud store's endpoint.
PARENT_FAULTS = ("kill", "stale-hint", "http")
FAULTS = CLIENT_FAULTS + PARENT_FAULTS


@dataclass(frozen=True)
class ClientSpec:
    """Everything a client process needs (it must pickle: it crosses a spawn)."""

    uri: str
    workload: Workload
    isolation: str
    process: int
    seed: int
    history: str
    quota: int | None  # transactions to run, or None to run until the deadline
    deadline: float | None  # time.time() at which to stop
    faults: tuple[str, ...] = field(default_factory=tuple)
    unsafe_disable_conflict_detection: bool = False  # test-only: a broken mere, for the checker
    #: The parent's environment (cloud credentials...): a fork server's child inherits the
    #: server's, which dates from whenever the server started.
    environ: dict[str, str] | None = None


def client_faults(kinds: tuple[str, ...]) -> list[Fault]:
    """The FaultyStore rules for the client-side fault kinds asked for.

    Probabilities are per store call; a transaction makes a few dozen calls,
    so with ``error-before`` some transactions fail on a read, a data file
    write or a commit, and ``exists-after`` / ``error-after`` on commit files
    exercise the resolution of ambiguous puts by reading the commit back.
    """
    rules: list[Fault] = []
    if "exists-after" in kinds:
        rules.append(Fault("put_if_absent", "exists_after", match=r"^_log/\d+\.json$",
                           times=None, probability=0.15))  # fmt: skip
    if "error-after" in kinds:
        rules.append(Fault("put_if_absent", "error_after", match=r"^_log/\d+\.json$",
                           times=None, probability=0.1))  # fmt: skip
        rules.append(Fault("*", "error_after", times=None, probability=0.003))
    if "error-before" in kinds:
        rules.append(Fault("*", "error_before", times=None, probability=0.005))
    if "latency" in kinds:
        rules.append(Fault("*", "delay", times=None, probability=0.05, delay=0.003))
    return rules


def open_client_store(uri: str, kinds: tuple[str, ...], seed: int) -> ObjectStore:
    store = open_store(uri)
    rules = client_faults(kinds)
    return FaultyStore(store, rules, seed=seed) if rules else store


def _connect(store: ObjectStore, attempts: int = 20) -> Database:
    """Connect, retrying injected storage errors (connecting reads the log too)."""
    for attempt in range(attempts):
        try:
            return connect(store, create=False)
        except MereError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.01)
    raise AssertionError("unreachable")


def run_transaction(
    db: Database, workload: Workload, isolation: str, plan: list[MicroOp], process: int, n: int
) -> dict[str, Any]:
    """Run one planned transaction; return its completion record."""
    record: dict[str, Any] = {"kind": "complete", "process": process, "n": n, "ops": []}
    try:
        tx = db.transaction(isolation=isolation)  # type: ignore[arg-type]
    except Exception as exc:  # nothing began: definitely not committed
        record.update(type="fail", error=type(exc).__name__)
        return record
    record["read_version"] = tx.read_version
    try:
        done = workload.execute(tx, plan)
        record["ops"] = done
        if any(op["f"] != "r" for op in done):
            tx.set_app_transaction(app_id(process), n)
        record["version"] = tx.commit()
        record["type"] = "ok"
    except CommitOutcomeUnknown as exc:
        record.update(type="info", error=type(exc).__name__)
    except ConflictError as exc:
        record.update(type="fail", error=type(exc).__name__)
    except Exception as exc:  # mere deletes the files: it claims the outcome is definite
        tx.abort()
        record.update(type="fail", error=type(exc).__name__)
    if not record["ops"]:
        record["ops"] = [op for op in plan if op["f"] != "r"]
    return record


def client_main(spec: ClientSpec) -> None:
    """Entry point of a client process (module level, so ``spawn`` can import it)."""
    if spec.environ is not None:
        os.environ.clear()
        os.environ.update(spec.environ)
    if spec.faults:  # warnings about injected faults (orphans left behind) are expected
        logging.getLogger("mere").setLevel(logging.ERROR)
    if spec.unsafe_disable_conflict_detection:
        os.environ[UNSAFE_DISABLE_SWITCH] = "1"
    rng = random.Random(f"{spec.seed}/client/{spec.process}")
    values = ValueSource(spec.process)
    store = open_client_store(spec.uri, spec.faults, spec.seed * 7919 + spec.process)
    out = HistoryWriter(Path(spec.history))
    try:
        db = _connect(store)
        n = 0
        known = 0  # the latest version this client has seen: picks list-append's keys
        while (spec.quota is None or n < spec.quota) and (
            spec.deadline is None or time.time() < spec.deadline
        ):
            plan = spec.workload.plan(rng, values, known)
            out.write(
                {
                    "kind": "invoke",
                    "process": spec.process,
                    "n": n,
                    "ops": plan,
                    "time": time.time(),
                    "isolation": spec.isolation,
                }
            )
            record = run_transaction(db, spec.workload, spec.isolation, plan, spec.process, n)
            record["time"] = time.time()
            known = max(known, record.get("read_version") or 0, record.get("version") or 0)
            fired: Counter[str] = store.fired if isinstance(store, FaultyStore) else Counter()
            record["faults"] = dict(fired)
            out.write(record)
            n += 1
    except BaseException as exc:
        traceback.print_exc()
        if not isinstance(exc, KeyboardInterrupt):
            out.write(
                {"kind": "crash", "process": spec.process, "error": traceback.format_exc()[-2000:]}
            )
        raise
    finally:
        out.close()
