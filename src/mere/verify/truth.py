"""What the log says happened: every key's versions, and which transaction installed each.

The checker does not infer the version order of keys from what reads
returned, as Elle must for a database that hides it: mere's log *is* the
total order of commits. Replaying it gives, for every key, the sequence of
states it went through and the commit (hence the transaction, through the
``verify/p<process>`` app transaction each client records) that installed
each state. That is the ground truth reads and acknowledged writes are
compared with.

A key's state is the tuple of the ``v`` values of its rows at a version: in
append order (commit order, then row order within the commit) for
list-append; sorted for register and bank, whose keys are single rows.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from mere.data.reader import read_file
from mere.database import Database
from mere.errors import VersionNotFound
from mere.log.actions import AddFile, AppTxn, Commit, RemoveFile
from mere.log.log import Log
from mere.snapshot.state import DatabaseState
from mere.storage.base import ObjectStore
from mere.verify.history import parse_app_id
from mere.verify.workloads import Workload

Key = tuple[str, int]  # (table name, k)
#: The transaction id of the setup commit (app transaction ``verify/p0``, version 0).
SETUP_TXN = "p0:0"
State = tuple[int, ...]
Row = tuple[int, int, int]  # k, v, balance

#: Commits read and applied per batch while replaying the log.
_BATCH = 256


def key_name(key: Key) -> str:
    """``table/k``: how a key is named in reports."""
    return f"{key[0]}/{key[1]}"


@dataclass(frozen=True)
class KeyVersion:
    """One state of a key, installed by the commit at ``version``."""

    version: int
    writer: str | None  # the transaction id, None when no verify app transaction says
    state: State


@dataclass
class LogTruth:
    """Everything the checker needs from the log (see the module docstring)."""

    latest: int
    setup_version: int | None = None
    #: key -> its states in version order (the first is the setup's, for existing keys).
    versions: dict[Key, list[KeyVersion]] = field(default_factory=dict)
    #: version -> the transaction id its app transaction names.
    commit_txn: dict[int, str] = field(default_factory=dict)
    #: transaction id -> every version that names it (more than one is a duplicate).
    txn_versions: dict[str, list[int]] = field(default_factory=dict)
    #: version -> commitInfo.isBlindAppend.
    blind: dict[int, bool] = field(default_factory=dict)
    #: version -> {key: (state before, state after)} for the keys it changed.
    changes: dict[int, dict[Key, tuple[State, State]]] = field(default_factory=dict)
    #: value -> (writer, key, version) where it first appeared.
    value_origin: dict[int, tuple[str | None, Key, int]] = field(default_factory=dict)
    #: values seen in more than one key, or twice in one key's state.
    duplicated: dict[int, list[str]] = field(default_factory=dict)
    #: bank: version -> total balance, at the versions where it is not the initial total.
    bad_totals: dict[int, int] = field(default_factory=dict)
    #: version -> keys that version holds more than once (keyed workloads)
    duplicate_keys: dict[int, list[str]] = field(default_factory=dict)
    #: versions touching the workload's tables with no verify app transaction.
    unclaimed_versions: list[int] = field(default_factory=list)
    #: versions that only moved rows to other files (``dataChange=false``: a flush of
    #: inlined files) and left every key's state as it was.
    rearranged: list[int] = field(default_factory=list)

    def state_at(self, key: Key, version: int) -> State:
        """The key's state at ``version`` (empty before its first state)."""
        history = self.versions.get(key, [])
        i = bisect.bisect_right([kv.version for kv in history], version) - 1
        return history[i].state if i >= 0 else ()

    def index_at(self, key: Key, version: int) -> int:
        """The index in ``versions[key]`` of the state at ``version`` (-1: none yet)."""
        history = self.versions.get(key, [])
        return bisect.bisect_right([kv.version for kv in history], version) - 1

    # --- building ------------------------------------------------------------------

    def record_commit(self, version: int, writer: str | None, blind: bool) -> None:
        """Note that ``version`` exists, which transaction it names, and whether it is blind."""
        self.latest = max(self.latest, version)
        self.blind[version] = blind
        if writer is None:
            return
        self.commit_txn[version] = writer
        self.txn_versions.setdefault(writer, []).append(version)
        if writer == SETUP_TXN and self.setup_version is None:
            self.setup_version = version

    def record_states(
        self, version: int, writer: str | None, states: dict[Key, State], ordered: bool
    ) -> None:
        """Record the states of the keys a commit touched (unchanged ones are ignored)."""
        changed = self.changes.setdefault(version, {})
        for key in sorted(states):
            new = states[key]
            old = self.state_at(key, version - 1)
            if new == old and key in self.versions:
                continue
            self.versions.setdefault(key, []).append(KeyVersion(version, writer, new))
            changed[key] = (old, new)
            for value in set(new) - set(old):
                if value in self.value_origin and self.value_origin[value][1] != key:
                    self.duplicated.setdefault(value, []).append(key_name(key))
                self.value_origin.setdefault(value, (writer, key, version))
            if ordered and len(set(new)) != len(new):  # register keys may hold copies
                for value in {v for v in new if new.count(v) > 1}:
                    self.duplicated.setdefault(value, []).append(key_name(key))
        if not changed:
            del self.changes[version]

    def finish(self, keys: Iterable[Key]) -> None:
        """Give every key of the workload its first state: empty, from the setup on."""
        if self.setup_version is None:
            return
        for key in keys:
            history = self.versions.setdefault(key, [])
            if not history or history[0].version > self.setup_version:
                history.insert(0, KeyVersion(self.setup_version, SETUP_TXN, ()))


def build_truth(
    commits: Iterable[tuple[int, str | None, dict[Key, State]]],
    keys: Iterable[Key],
    *,
    ordered: bool = True,
    blind: Iterable[int] = (),
) -> LogTruth:
    """A truth from explicit commits ``(version, transaction, {key: new state})``.

    For tests of the checker, which can then describe logs that mere would
    never write (a transaction at two versions, a value where it does not
    belong). The setup transaction is ``p0:0``.
    """
    truth = LogTruth(latest=0)
    blind_versions = set(blind)
    for version, writer, states in commits:
        truth.record_commit(version, writer, version in blind_versions)
        truth.record_states(version, writer, states, ordered)
    truth.finish(keys)
    return truth


def read_truth(store: ObjectStore, workload: Workload) -> LogTruth:
    """Replay the whole log and derive the truth about the workload's tables."""
    log = Log(store)
    latest = log.latest_version()
    if latest is None:
        raise VersionNotFound(f"no mere database at {store.uri}")
    truth = LogTruth(latest=latest)
    names = set(workload.table_names)
    ordered = workload.ordered
    rows_of: dict[tuple[str, str], list[Row]] = {}  # (table id, path) -> rows
    live: dict[Key, dict[tuple[str, str], None]] = {}  # key -> live files holding it, in order
    balances: dict[Key, int] = {}
    columns = ["k", "v", "balance"] if workload.name == "bank" else ["k", "v"]
    state: DatabaseState | None = None
    for commit in _commits(log, latest):
        if state is None:
            state = DatabaseState.initial(commit)
            continue
        before = state
        state = state.apply(commit)
        version = commit.version
        writer = None
        for a in commit.actions:
            if isinstance(a, AppTxn):
                process = parse_app_id(a.app_id)
                if process is not None:
                    writer = f"p{process}:{a.version}"
        truth.record_commit(version, writer, commit.info.is_blind_append)
        rearranged = _is_rearrangement(commit)
        touched: set[Key] = set()
        # (table id, rows) -> files removed; (table name, file id) of the adds, in commit order
        removed: dict[tuple[str, tuple[Row, ...]], list[tuple[str, str]]] = {}
        added: list[tuple[str, tuple[str, str]]] = []
        for a in commit.actions:
            if not isinstance(a, AddFile | RemoveFile):
                continue
            table = (state if isinstance(a, AddFile) else before).tables.get(a.table_id)
            if table is None or table.meta.name not in names:
                continue
            file_id = (a.table_id, a.path)
            if isinstance(a, AddFile):
                data = read_file(store, table.meta, a, columns)
                k_col = data.column("k").to_pylist()
                v_col = data.column("v").to_pylist()
                b_col = data.column("balance").to_pylist() if "balance" in columns else None
                rows_of[file_id] = [
                    (k, v, b_col[i] if b_col is not None else 0)
                    for i, (k, v) in enumerate(zip(k_col, v_col, strict=True))
                ]
                added.append((table.meta.name, file_id))
            else:
                rows = rows_of.get(file_id, [])
                removed.setdefault((a.table_id, tuple(rows)), []).append(file_id)
                for k in dict.fromkeys(r[0] for r in rows):
                    touched.add((table.meta.name, k))
        # A flush of inlined files (dataChange=false) removes them and adds their rows
        # in new files at the end of the table's files, as any commit does: when that
        # keeps every key's values (and their order), the version is a rearrangement.
        for name, file_id in added:
            for k in dict.fromkeys(r[0] for r in rows_of[file_id]):
                live.setdefault((name, k), {})[file_id] = None
                touched.add((name, k))
        for (_, removed_rows), gone in removed.items():
            for file_id in gone:
                name = before.tables[file_id[0]].meta.name
                for k in dict.fromkeys(r[0] for r in removed_rows):
                    live.get((name, k), {}).pop(file_id, None)
        states: dict[Key, State] = {}
        for key in touched:
            rows = [r for f in live.get(key, {}) for r in rows_of[f] if r[0] == key[1]]
            values = [r[1] for r in rows]
            states[key] = tuple(values) if ordered else tuple(sorted(values))
            balances[key] = sum(r[2] for r in rows)
        if rearranged and all(s == truth.state_at(k, version - 1) for k, s in states.items()):
            truth.rearranged.append(version)  # moved rows without changing any: nobody's claim
        elif touched and writer is None:
            truth.unclaimed_versions.append(version)
        if workload.keyed:
            doubled = sorted(key_name(k) for k, s in states.items() if len(s) > 1)
            if doubled:
                truth.duplicate_keys[version] = doubled
        truth.record_states(version, writer, states, ordered)
        if workload.name == "bank" and balances:
            total = sum(balances.values())
            if total != workload.initial_total():
                truth.bad_totals[version] = total
    truth.finish(workload.keys_of(latest))
    return truth


def _is_rearrangement(commit: Commit) -> bool:
    """Whether every add and remove of ``commit`` says ``dataChange=false`` (and it has some)."""
    files = [a for a in commit.actions if isinstance(a, AddFile | RemoveFile)]
    return bool(files) and not any(a.data_change for a in files)


def _commits(log: Log, latest: int) -> Iterator[Commit]:
    """Commits 0..latest, read in batches (each batch fetched concurrently)."""
    for first in range(0, latest + 1, _BATCH):
        yield from log.read_commits(first, min(latest, first + _BATCH - 1))


def bank_totals_by_snapshot(store: ObjectStore, workload: Workload, first: int) -> dict[int, int]:
    """The bank's total at every version from ``first`` on, read through snapshots.

    An independent second reading of the invariant: each version is opened
    with :meth:`~mere.Database.snapshot` and both tables are scanned, so the
    replay of :func:`read_truth` is cross-checked by the ordinary read path.
    Returns the versions whose total is not the initial total.
    """
    db = Database(store, create=False)
    latest = db.version
    wrong: dict[int, int] = {}
    for version in range(first, latest + 1):
        snapshot = db.snapshot(version=version)
        total = sum(
            sum(v for v in snapshot.table(name).scan(["balance"]).column(0).to_pylist() if v)
            for name in workload.table_names
        )
        if total != workload.initial_total():
            wrong[version] = total
    return wrong
