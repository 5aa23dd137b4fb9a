"""The checker: a history plus the log's truth in, anomalies and a verdict out.

1. **Outcomes.** Every transaction is resolved against the log: one whose app
   transaction (``verify/p<process>``, version ``n``) is in some commit is
   committed there, whatever the client was told; an *info* transaction
   (killed, or ``CommitOutcomeUnknown``) is resolved that way, as in Jepsen.
   A client told "committed at V" whose commit is absent is a **lost** write;
   one told "failed" whose commit is present is **failed-committed**; told the
   wrong version, **wrong-version**; a commit present twice, **duplicate**.
2. **Writes.** Each committed transaction's writes must be exactly what its
   commit changed: an acknowledged append or write missing from the state at
   its version is **lost**; a value present twice (list-append) or in two
   keys is **duplicate**; a change nobody claimed is **unclaimed**.
3. **Reads.** Each read of a committed transaction (minus its own writes,
   which it must see: else **internal**) is matched with the state of the
   key it returned. A read matching no state is diagnosed: a value of a
   transaction that did not commit is **G1a** (aborted read); a value a
   transaction overwrote before committing, or part of a transaction's
   appends, is **G1b** (intermediate read); anything else is
   **incompatible-order**. A read that is not the state at the
   transaction's read version is a **snapshot-violation** (every mere level
   reads one snapshot).
4. **Graph.** Nodes are committed transactions. The version order of each key
   is the log's: ``ww`` edges join consecutive writers of a key; a read of the
   state a writer installed gives a ``wr`` edge from it; and an ``rw``
   (anti-dependency) edge from the reader to the writer of the next state.
   Cycles are classified as Elle does: only ``ww`` edges **G0**; ``ww`` and
   ``wr`` edges **G1c**; exactly one ``rw`` edge **G-single**; more **G2**.
5. **Conflict rules** (mere-specific, docs/format.md §9): an ``rw`` edge from
   a committed transaction R to a writer W that committed *before* R in the
   log means W overtook what R read. At ``serializable`` R must then have
   aborted; at ``write_serializable`` too unless W was a blind append. Such
   an edge is **rw-conflict-missed**.
6. **Bank**: the total balance at every version, and in every audit read, is
   the initial total; else **bank-total**.
7. **Upsert**: no version holds a key of a keyed table twice; else
   **duplicate-key** (forbidden at every level).

The verdict is "valid" when no anomaly the requested isolation level
forbids was found (:func:`forbidden`). Separately, the strongest Adya level
the history is consistent with is reported.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mere.verify.history import History, MicroOp, Txn
from mere.verify.truth import Key, LogTruth, key_name
from mere.verify.workloads import Workload

ADYA = ("G0", "G1a", "G1b", "G1c", "G-single", "G2")
INTEGRITY = (
    "lost",
    "duplicate",
    "unclaimed",
    "failed-committed",
    "wrong-version",
    "internal",
    "incompatible-order",
    "snapshot-violation",
    "bank-total",
    "duplicate-key",
    "rw-conflict-missed",
)
ANOMALIES = ADYA + INTEGRITY

DESCRIPTIONS = {
    "G0": "write cycle (only write-write dependencies)",
    "G1a": "aborted read: a committed transaction read a value of one that did not commit",
    "G1b": "intermediate read: a committed transaction read a value overwritten in its writer",
    "G1c": "circular information flow (write-write and write-read dependencies)",
    "G-single": "read skew: a cycle with exactly one anti-dependency (rw) edge",
    "G2": "write skew: a cycle with two or more anti-dependency (rw) edges",
    "lost": "an acknowledged write is absent from the log",
    "duplicate": "a write or commit appears more than once",
    "unclaimed": "the log holds a change no transaction made",
    "failed-committed": "a transaction told it failed is committed in the log",
    "wrong-version": "a transaction was told a commit version that is not its commit",
    "internal": "a transaction did not see its own earlier writes",
    "incompatible-order": "a read matches no state the key ever had",
    "snapshot-violation": "a read is not the state at the transaction's read version",
    "bank-total": "the bank's total balance changed",
    "duplicate-key": "a version holds a primary key value twice",
    "rw-conflict-missed": "a commit overtook a read that the isolation level required to abort",
}

#: Isolation levels a run can ask for (mere's) and the Adya levels reported.
ISOLATION_LEVELS = ("snapshot", "write_serializable", "serializable")
ADYA_LEVELS = ("serializable", "snapshot-isolation", "read-committed", "read-uncommitted", "none")

_ALWAYS = frozenset(ANOMALIES) - {"G-single", "G2", "rw-conflict-missed"}

#: Attempts at finding a cycle of a given shape in one strongly connected component.
_MAX_SEARCHES = 2000
#: Examples kept per anomaly class in a report.
MAX_EXAMPLES = 20


def forbidden(isolation: str) -> frozenset[str]:
    """The anomaly classes a mere isolation level forbids.

    Every level forbids G0 and G1 and every integrity violation: all of them
    read one snapshot and publish commits atomically. ``snapshot`` allows
    G-single and G2: its only conflicts are two commits removing the same
    file, so two concurrent appends to one key both commit -- in the
    key-as-object model of list-append, a lost update (G-single). Delta Lake's
    snapshot level behaves the same. ``write_serializable`` forbids a commit
    overtaking a read unless it is a blind append; ``serializable`` forbids
    every cycle.
    """
    if isolation == "snapshot":
        return _ALWAYS
    if isolation == "write_serializable":
        return _ALWAYS | {"rw-conflict-missed"}
    if isolation == "serializable":
        return frozenset(ANOMALIES)
    raise ValueError(f"isolation must be one of {ISOLATION_LEVELS}, not {isolation!r}")


@dataclass
class Anomaly:
    """One instance of an anomaly class, with the transactions involved and why."""

    kind: str
    txns: list[str]
    explanation: str
    keys: list[str] = field(default_factory=list)
    cycle: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "txns": self.txns,
            "explanation": self.explanation,
            "keys": self.keys,
        }
        if self.cycle is not None:
            out["cycle"] = self.cycle
        return out


@dataclass
class CheckResult:
    """The checker's findings for one history."""

    workload: str
    isolation: str
    anomalies: dict[str, list[Anomaly]]
    counts: dict[str, int]
    outcomes: dict[str, int]
    errors: dict[str, int]
    latest_version: int
    graph: dict[str, int]
    strongest: str

    @property
    def forbidden_found(self) -> list[str]:
        """The anomaly classes found that the requested isolation level forbids."""
        banned = forbidden(self.isolation)
        return [k for k in ANOMALIES if self.counts.get(k) and k in banned]

    @property
    def valid(self) -> bool:
        return not self.forbidden_found

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "workload": self.workload,
            "isolation": self.isolation,
            "strongest_consistent_level": self.strongest,
            "forbidden_found": self.forbidden_found,
            "counts": {k: self.counts.get(k, 0) for k in ANOMALIES},
            "anomalies": {
                k: [a.to_json() for a in v[:MAX_EXAMPLES]] for k, v in self.anomalies.items() if v
            },
            "outcomes": self.outcomes,
            "errors": self.errors,
            "latest_version": self.latest_version,
            "graph": self.graph,
        }


def strongest_level(kinds: Iterable[str]) -> str:
    """The strongest Adya level a history with these anomaly classes is consistent with.

    Integrity violations (a lost or duplicated write, a read of something
    that never existed) are consistent with no level.
    """
    found = set(kinds)
    if "G0" in found or found & (set(INTEGRITY) - {"rw-conflict-missed", "snapshot-violation"}):
        return "none"
    if found & {"G1a", "G1b", "G1c"}:
        return "read-uncommitted"
    if "G-single" in found:
        return "read-committed"
    if "G2" in found:
        return "snapshot-isolation"
    return "serializable"


class _Graph:
    """Dependency edges between committed transactions: a -> b -> {type: key}."""

    def __init__(self) -> None:
        self.edges: dict[str, dict[str, dict[str, str]]] = {}

    def add(self, a: str, b: str, kind: str, key: Key) -> None:
        if a == b:
            return
        self.edges.setdefault(a, {}).setdefault(b, {}).setdefault(kind, key_name(key))
        self.edges.setdefault(b, {})

    def successors(self, a: str, kinds: frozenset[str], within: set[str]) -> list[str]:
        return [
            b for b, ts in self.edges.get(a, {}).items() if b in within and not kinds.isdisjoint(ts)
        ]

    def count(self, kind: str) -> int:
        return sum(kind in ts for out in self.edges.values() for ts in out.values())


_WW = frozenset({"ww"})
_WWR = frozenset({"ww", "wr"})
_ALL = frozenset({"ww", "wr", "rw"})


class Checker:
    """Checks one history against the log's truth (see the module docstring)."""

    def __init__(
        self, history: History, truth: LogTruth, workload: Workload, isolation: str
    ) -> None:
        forbidden(isolation)  # validates it
        self.history = history
        self.truth = truth
        self.workload = workload
        self.isolation = isolation
        self.anomalies: dict[str, list[Anomaly]] = {k: [] for k in ANOMALIES}
        self.txns: dict[str, Txn] = {}
        self.position: dict[str, float] = {}  # committed txn -> place in the serial order
        self.outcome: dict[str, str] = {}  # txn -> committed | aborted
        self.graph = _Graph()
        self.outcomes: Counter[str] = Counter()

    def found(self, kind: str, txns: list[str], explanation: str, keys: Iterable[str] = ()) -> None:
        self.anomalies[kind].append(Anomaly(kind, txns, explanation, list(keys)))

    # --- 1. outcomes -----------------------------------------------------------------

    def resolve(self) -> None:
        truth = self.truth
        setup = Txn(process=0, n=0, type="ok", ops=[], start=0.0, version=truth.setup_version)
        if truth.setup_version is not None:
            self.txns[setup.id] = setup
            self.position[setup.id] = truth.setup_version
            self.outcome[setup.id] = "committed"
        for t in self.history.txns:
            if t.id in self.txns:
                self.found("duplicate", [t.id], "two history records share this id")
                continue
            self.txns[t.id] = t
            self.outcomes[t.type] += 1
            versions = truth.txn_versions.get(t.id, [])
            if len(versions) > 1:
                self.found("duplicate", [t.id], f"committed at versions {versions}")
            if versions:
                v = versions[0]
                self.outcome[t.id] = "committed"
                self.position[t.id] = v
                if t.type == "ok" and t.version != v:
                    self.found(
                        "wrong-version", [t.id], f"told version {t.version}, committed at {v}"
                    )
                elif t.type == "fail":
                    self.found(
                        "failed-committed",
                        [t.id],
                        f"failed with {t.error} but its commit is version {v}",
                    )
                elif t.type == "info":
                    self.outcomes["info-committed"] += 1
            elif t.type == "ok" and t.writes:
                self.outcome[t.id] = "aborted"
                self.found(
                    "lost",
                    [t.id],
                    f"acknowledged as committed at version {t.version}; no commit records it",
                )
            elif t.type == "ok":
                self.outcome[t.id] = "committed"  # read-only: serialized after its snapshot
                self.position[t.id] = (t.read_version if t.read_version is not None else 0) + 0.5
            else:
                self.outcome[t.id] = "aborted"
                if t.type == "info":
                    self.outcomes["info-aborted"] += 1
        for tid, versions in truth.txn_versions.items():
            if tid not in self.txns:
                self.found("unclaimed", [tid], f"versions {versions} name a transaction never run")
        for v in truth.unclaimed_versions:
            self.found(
                "unclaimed",
                [],
                f"version {v} changed the workload's tables without a verify app id",
            )
        for value, keys in truth.duplicated.items():
            writer = truth.value_origin.get(value, (None,))[0]
            self.found(
                "duplicate",
                [writer] if writer else [],
                f"value {value} appears more than once ({', '.join(keys)})",
                keys,
            )

    # --- 2. writes --------------------------------------------------------------------

    def check_writes(self) -> None:
        truth = self.truth
        for tid, t in self.txns.items():
            if self.outcome.get(tid) != "committed" or not t.writes or tid == "p0:0":
                continue
            v = int(self.position[tid])
            changes = truth.changes.get(v, {})
            claimed: set[Key] = set()
            if self.workload.ordered:
                appended: dict[Key, list[int]] = {}
                for op in t.writes:
                    appended.setdefault((op["t"], op["k"]), []).append(op["v"])
                for key, values in appended.items():
                    claimed.add(key)
                    old, new = changes.get(key, ((), ()))
                    if key not in changes:
                        got: tuple[int, ...] = ()
                    elif new[: len(old)] == old:
                        got = new[len(old) :]
                    else:
                        self.found(
                            "unclaimed",
                            [tid],
                            f"version {v} rewrote {key_name(key)}",
                            [key_name(key)],
                        )
                        continue
                    missing = [x for x in values if x not in got]
                    if missing:
                        self.found(
                            "lost",
                            [tid],
                            f"appends {missing} to {key_name(key)} are not in version {v}",
                            [key_name(key)],
                        )
                    extra = [x for x in got if x not in values]
                    if extra:
                        self.found(
                            "unclaimed",
                            [tid],
                            f"version {v} appended {extra} to {key_name(key)}, not by {tid}",
                            [key_name(key)],
                        )
            else:
                last: dict[Key, MicroOp] = {}
                own: dict[Key, set[int]] = {}
                for op in t.writes:
                    key = (op["t"], op["k"])
                    last[key] = op
                    if op["f"] == "w":
                        own.setdefault(key, set()).add(op["v"])
                for key, op in last.items():
                    claimed.add(key)
                    after = truth.state_at(key, v)
                    if op["f"] == "w" and (op["v"] not in after or key not in changes):
                        self.found(
                            "lost",
                            [tid],
                            f"write {key_name(key)} = {op['v']} is not in version {v} "
                            f"(the key holds {list(after)})",
                            [key_name(key)],
                        )
                    elif op["f"] == "d":
                        # A delete removes the rows its snapshot shows (and its own);
                        # rows appended concurrently are not its business.
                        seen = set(own.get(key, ()))
                        if t.read_version is not None:
                            seen |= set(truth.state_at(key, t.read_version))
                        survivors = sorted(seen & set(after))
                        if survivors:
                            self.found(
                                "lost",
                                [tid],
                                f"delete of {key_name(key)} at version {v} left {survivors}",
                                [key_name(key)],
                            )
            for key in changes:
                if key not in claimed:
                    self.found(
                        "unclaimed",
                        [tid],
                        f"version {v} changed {key_name(key)}, which {tid} did not write",
                        [key_name(key)],
                    )

    # --- 3. reads -----------------------------------------------------------------------

    def check_reads(self) -> None:
        truth = self.truth
        planned: dict[int, str] = {}
        final: dict[tuple[str, Key], int | None] = {}  # a txn's last value written per key
        for tid, t in self.txns.items():
            for op in t.writes:
                if op["f"] in ("append", "w"):
                    planned[op["v"]] = tid
                final[(tid, (op["t"], op["k"]))] = op["v"] if op["f"] == "w" else None
        for tid, t in self.txns.items():
            if self.outcome.get(tid) != "committed":
                continue
            own_appends: dict[Key, list[int]] = {}
            own_last: dict[Key, MicroOp] = {}
            audit_total = 0
            audit_keys = 0
            for op in t.ops:
                key: Key = (op["t"], op["k"])
                if op["f"] == "append":
                    own_appends.setdefault(key, []).append(op["v"])
                    continue
                if op["f"] in ("w", "d"):
                    own_last[key] = op
                    continue
                if op["v"] is None:
                    continue  # never executed (the client was killed)
                read: list[int] = list(op["v"])
                if op.get("audit") and op.get("bal") is not None:
                    audit_total += sum(op["bal"])
                    audit_keys += 1
                if key in own_last:
                    mine = own_last[key]
                    expect = [mine["v"]] if mine["f"] == "w" else []
                    if sorted(set(read)) != expect:  # an update sets every row of the key
                        self.found(
                            "internal",
                            [tid],
                            f"read {key_name(key)} = {read} after writing {expect}",
                            [key_name(key)],
                        )
                    continue
                own = set(own_appends.get(key, ()))
                if sorted(x for x in read if x in own) != sorted(own):
                    self.found(
                        "internal",
                        [tid],
                        f"read {key_name(key)} = {read} without all its own appends {sorted(own)}",
                        [key_name(key)],
                    )
                external = sorted(x for x in read if x not in own)
                self._place_read(t, key, external, planned, final)
            if (
                self.workload.name == "bank"
                and audit_keys == len(self.workload.keys_of())
                and audit_total != self.workload.initial_total()
            ):
                self.found(
                    "bank-total",
                    [tid],
                    f"an audit read a total of {audit_total}, not {self.workload.initial_total()}",
                )
        for version, keys in sorted(truth.duplicate_keys.items()):
            self.found(
                "duplicate-key",
                [truth.commit_txn.get(version, "?")],
                f"version {version} holds primary key(s) {', '.join(keys[:5])} more than once",
                keys[:5],
            )
        for version, total in sorted(truth.bad_totals.items()):
            self.found(
                "bank-total",
                [truth.commit_txn.get(version, "?")],
                f"the total balance at version {version} is {total}, "
                f"not {self.workload.initial_total()}",
            )

    def _place_read(
        self,
        t: Txn,
        key: Key,
        external: list[int],
        planned: dict[int, str],
        final: dict[tuple[str, Key], int | None],
    ) -> None:
        """Match a read with a state of the key, and add its wr and rw edges."""
        truth = self.truth
        history = truth.versions.get(key, [])
        candidates = [i for i, kv in enumerate(history) if sorted(kv.state) == external]
        name = key_name(key)
        if not candidates:
            self._diagnose(t, key, external, planned, final)
            return
        at = truth.index_at(key, t.read_version) if t.read_version is not None else len(history)
        below = [i for i in candidates if i <= at]
        i = max(below) if below else min(candidates)
        expected = sorted(history[at].state) if 0 <= at < len(history) else []
        if t.read_version is not None and i != at and expected != external:
            self.found(
                "snapshot-violation",
                [t.id],
                f"read {name} = {external} at read version {t.read_version}, where it held "
                f"{expected} (the read is the state of version {history[i].version})",
                [name],
            )
        writer = history[i].writer
        if writer is not None and writer in self.position:
            self.graph.add(writer, t.id, "wr", key)
        if i + 1 < len(history):
            nxt = history[i + 1].writer
            if nxt is not None and nxt in self.position and nxt != t.id:
                self.graph.add(t.id, nxt, "rw", key)

    def _diagnose(
        self,
        t: Txn,
        key: Key,
        external: list[int],
        planned: dict[int, str],
        final: dict[tuple[str, Key], int | None],
    ) -> None:
        """Say why a read matches no state of its key: G1a, G1b or incompatible-order."""
        truth = self.truth
        name = key_name(key)
        for x in external:
            if x in truth.value_origin:
                continue
            writer = planned.get(x)
            if writer is None:
                continue
            if self.outcome.get(writer) != "committed":
                self.found(
                    "G1a",
                    [writer, t.id],
                    f"{t.id} read {name} = {external}, holding {x} written by {writer}, "
                    f"which did not commit",
                    [name],
                )
                return
            if final.get((writer, key)) != x:
                self.found(
                    "G1b",
                    [writer, t.id],
                    f"{t.id} read {name} = {external}, holding {x}, which {writer} "
                    f"overwrote before committing",
                    [name],
                )
                return
        if self.workload.ordered:
            by_writer: dict[int, set[int]] = {}
            for x in external:
                origin = truth.value_origin.get(x)
                if origin is not None:
                    by_writer.setdefault(origin[2], set()).add(x)
            for version, seen in by_writer.items():
                old, new = truth.changes.get(version, {}).get(key, ((), ()))
                written = set(new[len(old) :])
                if seen != written:
                    writer = truth.commit_txn.get(version, "?")
                    self.found(
                        "G1b",
                        [writer, t.id],
                        f"{t.id} read {name} = {external}: part of the appends of {writer} "
                        f"({sorted(written)})",
                        [name],
                    )
                    return
        self.found(
            "incompatible-order",
            [t.id],
            f"{t.id} read {name} = {external}, which the key never held",
            [name],
        )

    # --- 4. the graph -------------------------------------------------------------------

    def add_write_edges(self) -> None:
        for key, history in self.truth.versions.items():
            previous: str | None = None
            for kv in history:
                writer = kv.writer
                if writer is None or writer not in self.position:
                    continue
                if previous is not None:
                    self.graph.add(previous, writer, "ww", key)
                previous = writer

    def check_conflict_rules(self) -> None:
        """rw edges into commits that overtook a read the level protects (§9)."""
        for reader, out in self.graph.edges.items():
            for writer, kinds in out.items():
                if "rw" not in kinds:
                    continue
                if self.position[writer] >= self.position[reader]:
                    continue
                isolation = self.isolation
                blind = self.truth.blind.get(int(self.position[writer]), False)
                if isolation == "serializable" or (isolation == "write_serializable" and not blind):
                    self.found(
                        "rw-conflict-missed",
                        [reader, writer],
                        f"{writer} (version {int(self.position[writer])}"
                        f"{', blind append' if blind else ''}) changed {kinds['rw']}, which "
                        f"{reader} ({isolation}, version {self.position[reader]:g}) had read "
                        "before it, and yet both committed",
                        [kinds["rw"]],
                    )

    def find_cycles(self) -> None:
        graph = self.graph
        nodes = list(graph.edges)
        for component in _sccs(nodes, lambda a: graph.successors(a, _ALL, set(graph.edges))):
            if len(component) < 2:
                continue
            members = set(component)
            self._classify(members)

    def _classify(self, members: set[str]) -> None:
        """Find, in one strongly connected component, an example cycle of each class.

        G0: a cycle of ww edges; G1c: ww and wr edges, at least one wr; G-single:
        exactly one rw edge (the rest ww/wr); G2: only found with two or more rw
        edges, so reported when the component has no G-single cycle.
        """
        graph = self.graph
        edges = [
            (a, b, kind)
            for a in members
            for b, kinds in graph.edges.get(a, {}).items()
            if b in members
            for kind in kinds
        ]
        searches = 0
        single = False
        for kind, via, allowed in (
            ("G0", "ww", _WW),
            ("G1c", "wr", _WWR),
            ("G-single", "rw", _WWR),
            ("G2", "rw", _ALL),
        ):
            if kind == "G2" and single:
                break
            for a, b, k in edges:
                if k != via:
                    continue
                searches += 1
                if searches > _MAX_SEARCHES:
                    return
                back = _bfs(
                    b, a, functools.partial(graph.successors, kinds=allowed, within=members)
                )
                if back is not None:
                    self._report_cycle(kind, (a, b, via), back, allowed)
                    single = single or kind == "G-single"
                    break

    def _report_cycle(
        self, kind: str, first: tuple[str, str, str], back: list[str], allowed: frozenset[str]
    ) -> None:
        """Record a cycle: the edge ``first`` then the path ``back`` to its start."""
        steps = [first[0], *back]
        cycle = []
        for a, b in itertools.pairwise(steps):
            types = self.graph.edges[a][b]
            if (a, b) == first[:2]:
                wanted = first[2]
            else:
                wanted = next(t for t in ("ww", "wr", "rw") if t in types and t in allowed)
            cycle.append({"from": a, "to": b, "type": wanted, "key": types[wanted]})
        text = "; ".join(f"{c['from']} -{c['type']}({c['key']})-> {c['to']}" for c in cycle)
        self.anomalies[kind].append(
            Anomaly(kind, list(dict.fromkeys(steps)), text, [c["key"] for c in cycle], cycle)
        )

    # --- everything ----------------------------------------------------------------------

    def run(self) -> CheckResult:
        self.resolve()
        self.check_writes()
        self.check_reads()
        self.add_write_edges()
        self.check_conflict_rules()
        self.find_cycles()
        counts = {k: len(v) for k, v in self.anomalies.items() if v}
        errors = Counter(t.error for t in self.history.txns if t.error)
        return CheckResult(
            workload=self.workload.name,
            isolation=self.isolation,
            anomalies={k: v for k, v in self.anomalies.items() if v},
            counts=counts,
            outcomes=dict(self.outcomes),
            errors=dict(errors),
            latest_version=self.truth.latest,
            graph={
                "transactions": len(self.graph.edges),
                "ww": self.graph.count("ww"),
                "wr": self.graph.count("wr"),
                "rw": self.graph.count("rw"),
            },
            strongest=strongest_level(counts),
        )


def check(history: History, truth: LogTruth, workload: Workload, isolation: str) -> CheckResult:
    """Check a history against the log's truth at the requested isolation level."""
    return Checker(history, truth, workload, isolation).run()


# --- graph helpers --------------------------------------------------------------------------


def _bfs(start: str, goal: str, successors: Callable[[str], list[str]]) -> list[str] | None:
    """A shortest path start..goal (both included), or None."""
    if start == goal:
        return [start]
    parent: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        a = queue.popleft()
        for b in successors(a):
            if b in parent:
                continue
            parent[b] = a
            if b == goal:
                out = [b]
                while out[-1] != start:
                    out.append(parent[out[-1]])
                return out[::-1]
            queue.append(b)
    return None


def _sccs(nodes: list[str], successors: Callable[[str], list[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work: list[tuple[str, int, list[str]]] = [(root, 0, successors(root))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, i, succ = work[-1]
            if i < len(succ):
                work[-1] = (node, i + 1, succ)
                nxt = succ[i]
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0, successors(nxt)))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                out.append(component)
    return out
