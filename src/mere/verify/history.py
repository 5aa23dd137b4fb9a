"""The history of a verify run: every transaction's invocation and completion.

Each client process appends JSON lines to its own file as it goes, so that a
client killed with SIGKILL leaves everything it did up to the moment it died:

* ``{"kind": "invoke", ...}`` before a transaction starts, with the planned
  micro-operations (the values it will write are chosen up front, so a
  transaction that never completes still says what it might have written);
* ``{"kind": "complete", ...}`` when it ends, with what each micro-operation
  returned, the read version, the commit version or the error class, and the
  fault counters of the client's store so far.

A transaction whose completion is missing (its client was killed), or that
ended in :class:`~mere.errors.CommitOutcomeUnknown`, is *info*: its outcome is
indeterminate, as in Jepsen, and the checker resolves it from the log.

Micro-operations are dicts: ``{"f": "r" | "append" | "w" | "d", "t": table,
"k": key, "v": value}`` (``"bal"`` carries balances for the bank workload).
For reads ``v`` is the list of values the key held (``null`` until executed).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

#: ok: committed (the client was told a version); fail: definitely not committed;
#: info: indeterminate (killed, or CommitOutcomeUnknown).
OpType = Literal["ok", "fail", "info"]
MicroOp = dict[str, Any]


@dataclass
class Txn:
    """One transaction of the history, as the client saw it."""

    process: int
    n: int
    type: OpType
    ops: list[MicroOp]
    start: float
    end: float | None = None
    read_version: int | None = None
    version: int | None = None
    error: str | None = None
    isolation: str = "serializable"

    @property
    def id(self) -> str:
        """``p<process>:<n>``; its commit records app transaction ``verify/p<process>``, ``n``."""
        return f"p{self.process}:{self.n}"

    @property
    def writes(self) -> list[MicroOp]:
        return [op for op in self.ops if op["f"] != "r"]

    @property
    def reads(self) -> list[MicroOp]:
        return [op for op in self.ops if op["f"] == "r"]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["id"] = self.id
        return out

    @staticmethod
    def from_json(obj: dict[str, Any]) -> Txn:
        fields = {k: v for k, v in obj.items() if k in Txn.__dataclass_fields__}
        return Txn(**fields)


@dataclass
class History:
    """Every transaction of a run, and what the clients' stores injected."""

    txns: list[Txn]
    faults: Counter[str] = field(default_factory=Counter)
    #: Client processes that died of an exception: "p<process>: <traceback tail>".
    crashes: list[str] = field(default_factory=list)

    def by_id(self) -> dict[str, Txn]:
        return {t.id: t for t in self.txns}

    def counts(self) -> dict[str, int]:
        return dict(Counter(t.type for t in self.txns))

    def to_json(self) -> dict[str, Any]:
        return {"txns": [t.to_json() for t in self.txns], "faults": dict(self.faults)}

    @staticmethod
    def from_json(obj: dict[str, Any]) -> History:
        return History([Txn.from_json(t) for t in obj["txns"]], Counter(obj.get("faults", {})))


def app_id(process: int) -> str:
    """The application transaction id a client records in each of its commits."""
    return f"verify/p{process}"


def parse_app_id(value: str) -> int | None:
    """The process of a verify app id, or None for any other app id."""
    if not value.startswith("verify/p"):
        return None
    try:
        return int(value[len("verify/p") :])
    except ValueError:
        return None


class HistoryWriter:
    """Appends a client's records to its file, flushed line by line (SIGKILL-safe)."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one client file; a torn last line (the client died mid-write) is skipped."""
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break
            try:
                yield json.loads(line)
            except ValueError:
                break


def assemble(paths: Iterable[Path]) -> History:
    """Merge client files into a history: pair invocations with completions.

    An invocation without a completion becomes an *info* transaction holding
    the planned micro-operations (reads without values).
    """
    txns: list[Txn] = []
    faults: Counter[str] = Counter()
    crashes: list[str] = []
    for path in sorted(paths):
        invoked: dict[int, dict[str, Any]] = {}
        completed: dict[int, dict[str, Any]] = {}
        last_faults: dict[str, int] = {}
        for record in read_records(path):
            if record["kind"] == "invoke":
                invoked[record["n"]] = record
            elif record["kind"] == "complete":
                completed[record["n"]] = record
                last_faults = record.get("faults", last_faults)
            elif record["kind"] == "crash":
                crashes.append(f"p{record['process']}: {record['error'].strip()}")
        faults.update(last_faults)
        for n, inv in invoked.items():
            done = completed.get(n)
            if done is None:
                txns.append(
                    Txn(
                        process=inv["process"],
                        n=n,
                        type="info",
                        ops=[{**op, "v": None} if op["f"] == "r" else op for op in inv["ops"]],
                        start=inv["time"],
                        error="killed",
                        isolation=inv.get("isolation", "serializable"),
                    )
                )
            else:
                txns.append(
                    Txn(
                        process=inv["process"],
                        n=n,
                        type=done["type"],
                        ops=done["ops"],
                        start=inv["time"],
                        end=done["time"],
                        read_version=done.get("read_version"),
                        version=done.get("version"),
                        error=done.get("error"),
                        isolation=inv.get("isolation", "serializable"),
                    )
                )
    txns.sort(key=lambda t: (t.start, t.process, t.n))
    return History(txns, faults, crashes)
