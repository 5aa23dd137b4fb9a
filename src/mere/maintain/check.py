"""Check: verify a database the way a careful operator would, and repair what is safe.

``check(db)`` reads everything the log is made of and reports each defect as
one :class:`Finding`:

* every commit from the oldest retained one to the latest decodes, and the
  versions are contiguous: a commit missing while a lower and a higher one
  exist is a ``GAP``; commits that do not decode are ``CORRUPT_COMMIT``, ones
  that decode but cannot be applied to the state before them
  ``INVALID_COMMIT``; commit timestamps must increase (``TIMESTAMP_ORDER``);
  when the oldest commits are gone, a checkpoint must replace them
  (``NO_BASE``);
* every checkpoint decodes (``CORRUPT_CHECKPOINT``) and holds the state the
  log gives at its version, replayed from the commits and the checkpoint
  before it (``CHECKPOINT_MISMATCH``); none lies beyond the latest version
  (``STRAY_CHECKPOINT``);
* every data file live at the latest version exists (``MISSING_FILE``) with
  the size the log records (``WRONG_SIZE``), in the database's own store or,
  in an export's target, in its source's (format §11.6); every inlined one
  decodes (``CORRUPT_INLINED``); if the latest version cannot be read at all
  its files are not checked (``UNREADABLE``); so do the files a live tag or
  ``minimal``/``partial`` export keeps at its version (which must stay
  readable: not repairable by a commit);
* the hints are sane (``BAD_HINT``): ``_log/_latest`` readable, naming a
  commit that exists, not beyond the log and not below a gap (discovery would
  stop there and the next writer would commit into the gap);
  ``_log/_last_checkpoint`` readable and naming an existing checkpoint at or
  below the latest version. A missing or merely stale hint is normal.

With ``repair=True``, what is safe to repair is repaired, always forward and
never by rewriting history (no commit or checkpoint is deleted or
overwritten):

* references to missing data files are removed by one ordinary commit with
  operation ``REPAIR`` (as Databricks' ``FSCK REPAIR TABLE`` does): their
  rows are lost either way, and the table reads again;
* a bad hint is rewritten (or, for a checkpoint hint with no checkpoint to
  name, deleted);
* when readers of the latest version would get a state other than the log's
  (a checkpoint that disagrees with the log, or cannot be read) and no
  checkpoint exists at the latest version, one is written there from the
  log's state: the latest version and later ones read right again. Older
  versions keep reading the bad checkpoint: that finding stays.

Gaps, corrupt commits and bad checkpoints cannot be repaired without
rewriting history: they are reported, with the repair a person can make.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from mere.data.external import data_file_location, data_file_name
from mere.data.reader import decoded_inline
from mere.errors import (
    ConflictError,
    CorruptDataFile,
    CorruptLog,
    DatabaseNotFound,
    DataFileMissing,
    FormatVersionError,
    ObjectNotFound,
    StorageError,
    VersionNotFound,
)
from mere.log.actions import (
    AddFile,
    Commit,
    Export,
    TableMeta,
    decode_commit,
    is_external_path,
)
from mere.log.columns import FileLayout, adds_to_columns, columns_to_adds
from mere.log.keys import (
    CHECKPOINT_HINT,
    LATEST_HINT,
    LOG_PREFIX,
    checkpoint_key,
    commit_key,
    parse_log_key,
)
from mere.maintain.common import exported_states, shared_paths
from mere.maintain.progress import Advance, progress
from mere.snapshot.files import LiveFiles
from mere.snapshot.loader import load_state
from mere.snapshot.state import DatabaseState
from mere.storage import ObjectStore

if TYPE_CHECKING:
    from mere.txn.context import DatabaseContext

# --- what a finding can be -----------------------------------------------------------------

GAP = "GAP"
NO_BASE = "NO_BASE"
CORRUPT_COMMIT = "CORRUPT_COMMIT"
INVALID_COMMIT = "INVALID_COMMIT"
TIMESTAMP_ORDER = "TIMESTAMP_ORDER"
CORRUPT_CHECKPOINT = "CORRUPT_CHECKPOINT"
CHECKPOINT_MISMATCH = "CHECKPOINT_MISMATCH"
STRAY_CHECKPOINT = "STRAY_CHECKPOINT"
MISSING_FILE = "MISSING_FILE"
WRONG_SIZE = "WRONG_SIZE"
CORRUPT_INLINED = "CORRUPT_INLINED"
UNREADABLE = "UNREADABLE"
BAD_HINT = "BAD_HINT"

#: Every kind of finding, in the order a report lists them.
KINDS = (
    GAP,
    NO_BASE,
    CORRUPT_COMMIT,
    INVALID_COMMIT,
    TIMESTAMP_ORDER,
    CORRUPT_CHECKPOINT,
    CHECKPOINT_MISMATCH,
    STRAY_CHECKPOINT,
    UNREADABLE,
    MISSING_FILE,
    WRONG_SIZE,
    CORRUPT_INLINED,
    BAD_HINT,
)

#: Commits read (and decoded) per batch; concurrently on stores that read concurrently.
BATCH = 64
READ_THREADS = 8
#: How often the REPAIR commit starts over after losing to a conflicting commit.
REPAIR_ATTEMPTS = 3
#: What a person can do about a bad checkpoint (repair never deletes or overwrites one).
MOVE_AWAY = "move it away by hand: readers then rebuild those versions from the log"
#: Differences a checkpoint mismatch lists before "and N more".
MAX_DIFFERENCES = 3


@dataclass
class Finding:
    """One defect: its kind, the object it is about, and what is wrong, in one line."""

    kind: str
    #: The object the finding is about (a commit, checkpoint, hint or data file key).
    key: str
    message: str
    version: int | None = None
    table: str | None = None
    #: Whether ``repair=True`` can repair it (by committing forward or rewriting a hint).
    repairable: bool = False
    repaired: bool = False
    #: What was done about it, or what a person can do.
    repair: str | None = None

    def line(self) -> str:
        """The finding as one line of text."""
        text = f"{self.kind} {self.key}: {self.message}"
        if self.repair:
            text += f" [{'repaired: ' if self.repaired else ''}{self.repair}]"
        return " ".join(text.split())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CheckResult:
    """What a check found (and, with ``repair``, repaired)."""

    uri: str
    #: The oldest and latest commit versions found in the log (None: no commit at all).
    oldest_version: int | None
    latest_version: int | None
    commits_checked: int = 0
    checkpoints_checked: int = 0
    files_checked: int = 0
    findings: list[Finding] = field(default_factory=list)
    #: The version of the REPAIR commit, when one was made.
    repair_version: int | None = None

    @property
    def clean(self) -> bool:
        """True when nothing was found."""
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly form (for ``--json``)."""
        return {
            "uri": self.uri,
            "clean": self.clean,
            "oldest_version": self.oldest_version,
            "latest_version": self.latest_version,
            "commits_checked": self.commits_checked,
            "checkpoints_checked": self.checkpoints_checked,
            "files_checked": self.files_checked,
            "repair_version": self.repair_version,
            "findings": [f.to_dict() for f in self.findings],
        }


def check(db: DatabaseContext, *, repair: bool = False) -> CheckResult:
    """Verify the log, the checkpoints, the live data files and the hints of ``db``.

    Never raises for a defect it finds: each is a :class:`Finding` of the
    result. With ``repair``, repairs what is safe to repair (see the module
    documentation) and marks those findings ``repaired``.

    Raises:
        DatabaseNotFound: there is no commit at all.
        FormatVersionError: a commit or checkpoint has a newer format than this
            mere reads (upgrade mere to check the database).
        StorageError: the store failed (the check is not complete).
    """
    commits, checkpoints = _inventory(db)
    if not commits:
        raise DatabaseNotFound(f"no mere database at {db.uri}: _log/ holds no commit")
    oldest, latest = min(commits), max(commits)
    result = CheckResult(db.uri, oldest, latest)
    walk = _Walk(db, result, commits, checkpoints)
    truth = walk.run()
    readers = _readers_state(db, result, latest, truth, walk, repair)
    _check_files(db, result, latest, truth, readers)
    _check_hints(db, result, commits, checkpoints, walk, repair)
    if repair:
        _repair_missing_files(db, result)
    result.findings.sort(key=lambda f: (KINDS.index(f.kind), f.version or 0, f.table or "", f.key))
    return result


def _inventory(db: DatabaseContext) -> tuple[set[int], set[int]]:
    """The commit and checkpoint versions ``_log/`` holds (one listing)."""
    commits: set[int] = set()
    checkpoints: set[int] = set()
    for meta in db.store.list(LOG_PREFIX):
        parsed = parse_log_key(meta.key)
        if parsed is not None:
            (commits if parsed[1] == "commit" else checkpoints).add(parsed[0])
    return commits, checkpoints


# --- the log and its checkpoints -------------------------------------------------------------


class _Walk:
    """Replays the log from its oldest retained version, checking every commit and checkpoint.

    ``state`` is the state the log gives at the version reached, or None
    while it cannot be known (before the first base, after a gap or a bad
    commit); a checkpoint met then becomes the new base, as it is for readers.
    """

    def __init__(
        self,
        db: DatabaseContext,
        result: CheckResult,
        commits: set[int],
        checkpoints: set[int],
    ) -> None:
        self.db = db
        self.result = result
        self.commits = commits
        self.checkpoints = checkpoints
        self.oldest = min(commits)
        self.latest = max(commits)
        self.state: DatabaseState | None = None
        self.run_commits: list[Commit] = []
        self.previous_timestamp: int | None = None
        #: Checkpoints that decoded and agree with the log (or could not be compared).
        self.good_checkpoints: set[int] = set()
        #: Findings about checkpoints, by version: the repair may add a note to them.
        self.bad_checkpoints: dict[int, Finding] = {}
        #: The first version of each gap.
        self.gaps: list[int] = []
        self.pool: ThreadPoolExecutor | None = None

    def add(self, finding: Finding) -> Finding:
        self.result.findings.append(finding)
        return finding

    def run(self) -> DatabaseState | None:
        """Walk every version; the log's state at the latest version, if it can be known."""
        self._report_gaps()
        for version in sorted(self.checkpoints):
            if version > self.latest:
                self.add(
                    Finding(
                        STRAY_CHECKPOINT,
                        checkpoint_key(version),
                        f"a checkpoint at version {version}, beyond the latest version "
                        f"{self.latest}",
                        version=version,
                        repair="once the log reaches that version readers will trust it; "
                        "move it away by hand (repair never deletes a checkpoint)",
                    )
                )
        first = self.oldest
        if first > 0:
            base = min((c for c in self.checkpoints if first - 1 <= c <= self.latest), default=None)
            if base is None:
                self.add(
                    Finding(
                        NO_BASE,
                        commit_key(first - 1),
                        f"the commits below version {first} are gone and no checkpoint at or "
                        f"after version {first - 1} replaces them: no version can be rebuilt",
                        version=first - 1,
                        repair="put the missing commits or a checkpoint back from a backup",
                    )
                )
            elif base == first - 1:
                self._checkpoint(base)
        total = self.latest - first + 1
        concurrent = self.db.store.concurrent_reads and total > 1
        with (
            progress("checking the log", total) as advance,
            ThreadPoolExecutor(max_workers=READ_THREADS if concurrent else 1) as pool,
        ):
            self.pool = pool if concurrent else None
            for start in range(first, self.latest + 1, BATCH):
                stop = min(start + BATCH, self.latest + 1)
                self._batch(range(start, stop), advance)
        self.pool = None
        self._flush()
        if self.state is not None and self.state.version == self.latest:
            return self.state
        return None

    def _report_gaps(self) -> None:
        ordered = sorted(self.commits)
        for below, above in pairwise(ordered):
            if above == below + 1:
                continue
            first, last = below + 1, above - 1
            self.gaps.append(first)
            span = f"version {first} is" if first == last else f"versions {first}..{last} are"
            self.add(
                Finding(
                    GAP,
                    commit_key(first),
                    f"the commit of {span} missing but later versions exist (the next is "
                    f"{above}): a gap in the log",
                    version=first,
                    repair="put the missing commit files back from a backup",
                )
            )

    def _batch(self, versions: range, advance: Advance) -> None:
        """Check the commits of ``versions`` and the checkpoints among them, in order."""
        present = [v for v in versions if v in self.commits]
        outcomes = dict(zip(present, self._read(present), strict=True))
        for version in versions:
            if version in outcomes:
                self.result.commits_checked += 1
                outcome = outcomes[version]
                if isinstance(outcome, Commit):
                    self._commit(outcome)
                else:
                    self._break()
                    if outcome is not None:
                        self.add(outcome)
            else:
                self._break()  # a gap (already reported)
            if version in self.checkpoints:
                self._checkpoint(version)
        advance(len(versions))

    def _read(self, versions: list[int]) -> list[Commit | Finding | None]:
        """Each commit decoded, or the finding it is (None: it vanished meanwhile)."""
        if self.pool is not None and len(versions) > 1:
            return list(self.pool.map(self._read_one, versions))
        return [self._read_one(v) for v in versions]

    def _read_one(self, version: int) -> Commit | Finding | None:
        key = commit_key(version)
        try:
            data = self.db.store.get(key)
        except ObjectNotFound:
            return None  # expired while the check ran
        try:
            return decode_commit(key, version, data)  # a newer format raises: not ours to judge
        except CorruptLog as exc:
            reason = exc.reason
        return Finding(
            CORRUPT_COMMIT,
            key,
            f"the commit of version {version} does not decode: {reason}",
            version=version,
            repair="put the commit file back from a backup",
        )

    def _commit(self, commit: Commit) -> None:
        """Check one decoded commit in order (versions ascending, gaps skipped)."""
        version = commit.version
        info = commit.info
        previous = self.previous_timestamp
        if previous is not None and info.timestamp <= previous:
            self.add(
                Finding(
                    TIMESTAMP_ORDER,
                    commit_key(version),
                    f"the commit of version {version} has timestamp {info.timestamp}, not after "
                    f"the previous version's {previous}: time travel by timestamp is unreliable "
                    "around it",
                    version=version,
                )
            )
        self.previous_timestamp = info.timestamp
        if self.state is None and version == 0:
            try:
                self.state = DatabaseState.initial(commit)
            except CorruptLog as exc:
                self._invalid(exc, version)
            return
        if self.state is not None:
            self.run_commits.append(commit)

    def _break(self) -> None:
        """The chain of known states is broken at this version (timestamps still compare)."""
        self._flush()
        self.state = None

    def _flush(self) -> None:
        """Apply the commits read since the last flush to the known state."""
        commits, self.run_commits = self.run_commits, []
        if not commits or self.state is None:
            return
        try:
            self.state = self.state.apply_many(commits)
        except CorruptLog as exc:
            version = parse_log_key(exc.key)
            self._invalid(exc, version[0] if version else None)
            self.state = None

    def _invalid(self, exc: CorruptLog, version: int | None) -> None:
        self.add(
            Finding(
                INVALID_COMMIT,
                exc.key,
                f"the commit cannot be applied to the state before it: {exc.reason}",
                version=version,
                repair="put the commit file back from a backup",
            )
        )

    def _checkpoint(self, version: int) -> None:
        """Check the checkpoint at ``version`` against the log (or make it the new base)."""
        self._flush()
        self.result.checkpoints_checked += 1
        key = checkpoint_key(version)
        try:
            data = self.db.log.read_checkpoint(version)
            from_checkpoint = _fetched(DatabaseState.from_checkpoint(data))
        except VersionNotFound:
            return  # removed by expiry while the check ran
        except CorruptLog as exc:  # a newer format raises: not ours to judge
            self.bad_checkpoints[version] = self.add(
                Finding(
                    CORRUPT_CHECKPOINT,
                    exc.key or key,  # the manifest, or the part that is damaged
                    f"the checkpoint of version {version} cannot be read: {exc.reason}",
                    version=version,
                    # Without a known state before it, the log cannot replace it.
                    repair=MOVE_AWAY if self.state is not None else "put it back from a backup",
                )
            )
            return
        if self.state is None:
            # The new base, as for readers: nothing before it to compare it with.
            self.state = from_checkpoint
            self.good_checkpoints.add(version)
            return
        differences = state_differences(from_checkpoint, self.state)
        if not differences:
            self.good_checkpoints.add(version)
            return
        shown = "; ".join(differences[:MAX_DIFFERENCES])
        if len(differences) > MAX_DIFFERENCES:
            shown += f"; and {len(differences) - MAX_DIFFERENCES} more"
        self.bad_checkpoints[version] = self.add(
            Finding(
                CHECKPOINT_MISMATCH,
                key,
                f"the checkpoint of version {version} disagrees with the log: {shown}",
                version=version,
                repair=MOVE_AWAY,
            )
        )
        # The log is the authority: go on from its state.


def _fetched(state: DatabaseState) -> DatabaseState:
    """``state`` with every table's files read: a checkpoint's parts are fetched
    when first needed, and a damaged one must be found here (raises CorruptLog)."""
    for table in state.tables.values():
        table.live.table()
    return state


def state_differences(checkpoint: DatabaseState, log: DatabaseState) -> list[str]:
    """How the state a checkpoint holds differs from the state the log gives (empty: equal).

    ``dataChange`` of live files is not part of a state (a checkpoint does
    not keep it) and is ignored.
    """
    out: list[str] = []
    if checkpoint.version != log.version:
        out.append(f"version {checkpoint.version} instead of {log.version}")
    if checkpoint.timestamp != log.timestamp:
        out.append(f"timestamp {checkpoint.timestamp} instead of {log.timestamp}")
    ids = sorted(set(checkpoint.tables) | set(log.tables))
    for table_id in ids:
        mine, theirs = checkpoint.tables.get(table_id), log.tables.get(table_id)
        if theirs is None:
            assert mine is not None
            out.append(f"table {mine.meta.name!r} ({table_id}) is not in the log's state")
            continue
        if mine is None:
            out.append(f"table {theirs.meta.name!r} ({table_id}) is missing")
            continue
        name = theirs.meta.name
        if not _same_meta(mine.meta, theirs.meta):
            out.append(f"table {name!r} has other metadata")
        extra = [p for p in mine.files if p not in theirs.files]
        missing = [p for p in theirs.files if p not in mine.files]
        changed = [
            p
            for p, f in mine.files.items()
            if p in theirs.files and not _same_file(f, theirs.files[p], theirs.meta)
        ]
        for count, what in (
            (len(extra), "live files the log does not have"),
            (len(missing), "of the log's live files missing"),
            (len(changed), "live files recorded differently"),
        ):
            if count:
                out.append(f"table {name!r}: {count} {what}")
    simple = {"version", "timestamp", "tables"}
    for f in dataclasses.fields(DatabaseState):
        if f.name not in simple and getattr(checkpoint, f.name) != getattr(log, f.name):
            out.append(f"other {f.name.replace('_', ' ')}")
    return out


def _file_key(add: AddFile) -> AddFile:
    return replace(add, data_change=True)


def _same_file(held: AddFile, logged: AddFile, meta: TableMeta) -> bool:
    """Whether a checkpoint holds the file as the log records it.

    A checkpoint keeps statistics in the columns' current types: after a
    column was widened, a decimal's bound written as ``1.50`` reads back as
    ``1.5000``. The log's file is compared as a checkpoint would hold it.
    """
    if _file_key(held) == _file_key(logged):
        return True
    layout = FileLayout.of(meta)
    [as_held] = columns_to_adds(layout, meta.id, adds_to_columns(layout, [logged]))
    return _file_key(held) == _file_key(as_held)


def _same_meta(a: TableMeta, b: TableMeta) -> bool:
    """Equal metadata, field metadata (physical column names) included."""
    return (
        a.id == b.id
        and a.name == b.name
        and a.schema.equals(b.schema, check_metadata=True)
        and a.partition_columns == b.partition_columns
        and a.properties == b.properties
        and a.created_time == b.created_time
    )


def _readers_state(
    db: DatabaseContext,
    result: CheckResult,
    latest: int,
    truth: DatabaseState | None,
    walk: _Walk,
    repair: bool,
) -> DatabaseState | None:
    """The state readers build at the latest version (None: they cannot).

    When it differs from the log's and no checkpoint exists at the latest
    version, ``repair`` writes one from the log's state.
    """
    try:
        readers: DatabaseState | None = _fetched(load_state(db.log, latest))
    except (CorruptLog, FormatVersionError, VersionNotFound):
        readers = None
    if truth is None or (readers is not None and not state_differences(readers, truth)):
        return readers
    # Readers of the latest version get another state than the log's: a bad checkpoint.
    if not repair and latest not in walk.checkpoints:
        for finding in walk.bad_checkpoints.values():
            finding.repair = (
                "readers of the latest version use it; repair writes a checkpoint of the "
                f"log's state at the latest version; {MOVE_AWAY}"
            )
    if repair and latest not in walk.checkpoints:
        db.log.write_checkpoint(latest, truth.timestamp, list(truth.live_actions()))
        walk.checkpoints.add(latest)
        walk.good_checkpoints.add(latest)
        note = (
            f"wrote a checkpoint of the log's state at the latest version {latest}, which "
            f"reads right again; older versions still read this checkpoint: {MOVE_AWAY}"
        )
        for version, finding in walk.bad_checkpoints.items():
            if version < latest:
                finding.repair = note
        return truth
    if latest in walk.bad_checkpoints:
        walk.bad_checkpoints[
            latest
        ].repair = f"the latest version reads it and repair cannot replace it; {MOVE_AWAY}"
    return readers


# --- data files --------------------------------------------------------------------------------


def _check_files(
    db: DatabaseContext,
    result: CheckResult,
    latest: int,
    truth: DatabaseState | None,
    readers: DatabaseState | None,
) -> None:
    """Every data file live at the latest version exists with its recorded size, or decodes."""
    states = [s for s in (readers, truth) if s is not None]
    if not states:
        result.findings.append(
            Finding(
                UNREADABLE,
                commit_key(latest),
                f"the latest version {latest} cannot be read (see the other findings): its "
                "data files were not checked",
                version=latest,
            )
        )
        return
    live: dict[tuple[ObjectStore, str], tuple[TableMeta, AddFile]] = {}
    inlined: dict[tuple[str, str], tuple[TableMeta, AddFile]] = {}
    for state in states:
        for table in state.tables.values():
            for add in table.files.values():
                if add.inline is not None:
                    inlined.setdefault((table.meta.id, add.path), (table.meta, add))
                    continue
                try:  # a file of another store (format §11.6) is checked there
                    where = data_file_location(db.store, table.meta, add)
                except DataFileMissing:  # that store's root is gone
                    result.files_checked += 1
                    result.findings.append(_missing_file(table.meta, add, latest))
                    continue
                live.setdefault(where, (table.meta, add))
    kept = _kept_by_exports(db, result, states[0], live)
    by_prefix: dict[tuple[ObjectStore, str], list[tuple[str, TableMeta, AddFile]]] = {}
    for (store, key), (meta, add) in live.items():
        prefix = "/".join(key.split("/")[:2]) + "/"  # tables/<table id>/
        by_prefix.setdefault((store, prefix), []).append((key, meta, add))
    with progress("checking data files", len(live) + len(inlined)) as advance:
        for (store, prefix), files in by_prefix.items():
            sizes = {meta.key: meta.size for meta in store.list(prefix)}
            for key, meta, add in files:
                size = sizes.get(key)
                if size is None:
                    size = _head_size(store, key)  # the listing is only a fast path
                result.files_checked += 1
                if size is None:
                    result.findings.append(_missing_file(meta, add, latest, kept.get((store, key))))
                elif size != add.size:
                    result.findings.append(
                        Finding(
                            WRONG_SIZE,
                            data_file_name(meta, add),
                            f"data file of table {meta.name!r} is {size:,} bytes; the log "
                            f"records {add.size:,}",
                            version=latest,
                            table=meta.name,
                            repair="put the file back from a backup",
                        )
                    )
            advance(len(files))
        for meta, add in inlined.values():
            result.files_checked += 1
            try:
                decoded_inline(meta, add)
            except CorruptDataFile as exc:
                result.findings.append(
                    Finding(
                        CORRUPT_INLINED,
                        meta.prefix + add.path,
                        f"inlined data file of table {meta.name!r}, live at version {latest}, "
                        f"does not decode ({exc.reason}): reading the table fails",
                        version=latest,
                        table=meta.name,
                        repair="put the commit or checkpoint file that holds it back from a backup",
                    )
                )
            advance(1)


def _kept_by_exports(
    db: DatabaseContext,
    result: CheckResult,
    state: DatabaseState,
    live: dict[tuple[ObjectStore, str], tuple[TableMeta, AddFile]],
) -> dict[tuple[ObjectStore, str], Export]:
    """Add to ``live`` the files the live tags and exports of ``state`` keep (their
    versions must stay readable); return the export keeping each file added."""
    kept: dict[tuple[ObjectStore, str], Export] = {}
    exports = sorted((e for e in state.exports.values() if e.protects), key=lambda e: e.name)
    # Their versions are rebuilt in ascending order, each replayed on from the one before
    # (one by one, each was a checkpoint open and a replay), and a file becomes an object
    # only when it is not live at a retained version (once, whichever export keeps it).
    found: dict[str, list[tuple[TableMeta, str]] | Exception] = {}
    objects: dict[tuple[str, str], AddFile] = {}
    known = {key for store, key in live if store is db.store}
    for export, states in exported_states(db, exports):
        if not isinstance(states, tuple):
            found[export.name] = states
            continue
        at, since, tables = states
        try:
            found[export.name] = _shared_by(at, since, tables, known, objects)
        except (VersionNotFound, CorruptLog) as exc:  # a checkpoint part gone, damaged
            found[export.name] = exc
    for export in exports:
        files_or_error = found[export.name]
        if isinstance(files_or_error, Exception):
            result.findings.append(
                Finding(
                    UNREADABLE,
                    commit_key(export.version),
                    f"{_named(export)} keeps version {export.version}, which cannot be "
                    f"rebuilt ({files_or_error}): its files were not checked",
                    version=export.version,
                )
            )
            continue
        for meta, path in files_or_error:
            if not is_external_path(path) and (db.store, meta.prefix + path) in live:
                continue  # live at a retained version: checked there
            add = objects[(meta.id, path)]
            try:
                where = data_file_location(db.store, meta, add)
            except DataFileMissing:  # that store's root is gone
                result.files_checked += 1
                result.findings.append(_missing_file(meta, add, export.version, export))
                continue
            if where not in live:
                live[where] = (meta, add)
                kept[where] = export
    return kept


def _shared_by(
    at: DatabaseState,
    since: DatabaseState | None,
    tables: list[TableMeta],
    known: set[str],
    objects: dict[tuple[str, str], AddFile],
) -> list[tuple[TableMeta, str]]:
    """The files an export shares, by path; those not among ``known`` keys (live at a
    retained version) are also put in ``objects`` (built once, whichever export needs them)."""
    files: list[tuple[TableMeta, str]] = []
    for meta in tables:
        paths, rows = shared_paths(at, since, meta)
        new = [
            (path, row)
            for path, row in zip(paths, rows, strict=True)
            if (meta.id, path) not in objects
            and (is_external_path(path) or meta.prefix + path not in known)
        ]
        if new:
            table_files = at.tables[meta.id].files
            if isinstance(table_files, LiveFiles):
                adds = table_files.take([row for _, row in new])
            else:
                adds = [table_files[path] for path, _ in new]
            for add in adds:
                objects[(meta.id, add.path)] = add
        files += [(meta, path) for path in paths]
    return files


def _named(export: Export) -> str:
    return f"{'tag' if export.mode == 'tag' else 'export'} {export.name!r}"


def _missing_file(
    meta: TableMeta, add: AddFile, latest: int, kept: Export | None = None
) -> Finding:
    """A live data file that does not exist; repair drops those of the database's own store.

    ``kept``: the file is not live at ``latest`` but at the version a tag or export
    keeps (nothing to repair by a commit: reading that version fails).
    """
    if kept is not None:
        return Finding(
            MISSING_FILE,
            data_file_name(meta, add),
            f"data file of table {meta.name!r}, kept by {_named(kept)} at version "
            f"{kept.version}, does not exist ({add.rows:,} rows): reading that version fails",
            version=kept.version,
            table=meta.name,
            repairable=False,
            repair=f"put the file back from a backup, or drop the {_named(kept)} if its "
            "version is no longer needed",
        )
    own = not is_external_path(add.path)
    return Finding(
        MISSING_FILE,
        data_file_name(meta, add),
        f"data file of table {meta.name!r}, live at version {latest}, does "
        f"not exist ({add.rows:,} rows): reading the table fails",
        version=latest,
        table=meta.name,
        repairable=own,
        repair="repair removes it from the table by a commit (its rows are lost)"
        if own
        else "it is a file of the database this one was exported from, which vacuum "
        "deleted there: restore it there from a backup, or restore this database to "
        "a version that does not reference it",
    )


def _head_size(store: ObjectStore, key: str) -> int | None:
    try:
        return store.head(key).size
    except ObjectNotFound:
        return None


def _repair_missing_files(db: DatabaseContext, result: CheckResult) -> None:
    """Remove references to missing data files with one REPAIR commit (retried on conflicts)."""
    missing = {
        f.key: f
        for f in result.findings
        if f.kind == MISSING_FILE and f.repairable and not f.repaired
    }
    if not missing:
        return
    for attempt in range(1, REPAIR_ATTEMPTS + 1):
        tx = db.begin()
        try:
            removed: dict[str, list[AddFile]] = {}
            names: set[str] = set()
            with tx.statement() as stage:
                for table in tx.read_state.tables.values():
                    gone = [
                        add
                        for path, add in table.files.items()
                        if table.meta.prefix + path in missing
                    ]
                    if gone:
                        stage.remove_files(table.meta.id, gone)
                        removed[table.meta.id] = gone
                        names.add(table.meta.name)
                count = sum(len(adds) for adds in removed.values())
                stage.set_operations(
                    [{"operation": "REPAIR", "tables": sorted(names), "missingFiles": count}]
                )
            version = tx.commit()
        except ConflictError:
            tx.abort()
            if attempt == REPAIR_ATTEMPTS:
                raise
            continue
        except BaseException:
            tx.abort()
            raise
        if removed:
            result.repair_version = version
        done = {
            tx.read_state.tables[table_id].meta.prefix + add.path
            for table_id, adds in removed.items()
            for add in adds
        }
        for key, finding in missing.items():
            finding.repaired = True
            if key in done:
                finding.repair = f"removed from the table by the REPAIR commit of version {version}"
            else:
                finding.repair = f"no longer live at version {tx.read_version}"
        return


# --- hints -------------------------------------------------------------------------------------


def _check_hints(
    db: DatabaseContext,
    result: CheckResult,
    commits: set[int],
    checkpoints: set[int],
    walk: _Walk,
    repair: bool,
) -> None:
    latest = max(commits)
    _check_hint(
        db,
        result,
        LATEST_HINT,
        lambda v: _latest_hint_problem(v, commits, walk.gaps, latest),
        lambda: latest,
        repair,
    )
    good = sorted(c for c in walk.good_checkpoints if c <= latest and c in checkpoints)
    _check_hint(
        db,
        result,
        CHECKPOINT_HINT,
        lambda v: _checkpoint_hint_problem(v, checkpoints, latest),
        lambda: good[-1] if good else None,
        repair,
    )


def _check_hint(
    db: DatabaseContext,
    result: CheckResult,
    key: str,
    problem_of: Callable[[int], str | None],
    right_value: Callable[[], int | None],
    repair: bool,
) -> None:
    """Check one hint; with ``repair``, rewrite it to ``right_value()`` (None: delete it)."""
    try:
        raw = db.store.get(key)
    except ObjectNotFound:
        return  # a missing hint is allowed: readers list instead
    value = _hint_value(raw)
    problem = 'is not a valid hint (expected {"version": N})' if value is None else None
    if value is not None:
        problem = problem_of(value)
    if problem is None:
        return
    finding = Finding(BAD_HINT, key, problem, version=value, repairable=True)
    finding.repair = "repair rewrites it"
    result.findings.append(finding)
    if not repair:
        return
    right = right_value()
    try:
        if right is None:
            db.store.delete(key)
            finding.repair = "deleted it"
        else:
            db.store.put(key, json.dumps({"version": right}).encode())
            finding.repair = f"rewrote it to version {right}"
    except StorageError as exc:
        finding.repair = f"could not rewrite it: {exc}"
        return
    finding.repaired = True


def _hint_value(raw: bytes) -> int | None:
    try:
        value = json.loads(raw)["version"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _latest_hint_problem(value: int, commits: set[int], gaps: list[int], latest: int) -> str | None:
    if value > latest:
        return f"names version {value}, beyond the latest version {latest}"
    if value not in commits:
        return f"names version {value}, whose commit does not exist"
    below = [g for g in gaps if g > value]
    if below:
        return (
            f"names version {value}, below the gap at version {below[0]}: discovery may "
            "stop there, and without turns (a cloud store) the next commit would fill the gap"
        )
    return None


def _checkpoint_hint_problem(value: int, checkpoints: set[int], latest: int) -> str | None:
    if value > latest:
        return f"names version {value}, beyond the latest version {latest}"
    if value not in checkpoints:
        return f"names version {value}, which has no checkpoint"
    return None


def findings_of(result: CheckResult, kind: str) -> Iterator[Finding]:
    """The findings of one kind (a convenience for callers and tests)."""
    return (f for f in result.findings if f.kind == kind)


def summary(result: CheckResult) -> str:
    """One line saying what was checked and found."""
    if result.latest_version is None:
        return "no commit found"
    checked = (
        f"versions {result.oldest_version}..{result.latest_version}: "
        f"{_count(result.commits_checked, 'commit')}, "
        f"{_count(result.checkpoints_checked, 'checkpoint')}, "
        f"{_count(result.files_checked, 'data file')}"
    )
    if result.clean:
        return f"clean: {checked}"
    repaired = sum(1 for f in result.findings if f.repaired)
    text = f"{_count(len(result.findings), 'finding')} in {checked}"
    if repaired:
        text += f"; {repaired} repaired"
        if result.repair_version is not None:
            text += f" (REPAIR commit at version {result.repair_version})"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


__all__ = [
    "KINDS",
    "CheckResult",
    "Finding",
    "check",
    "findings_of",
    "state_differences",
    "summary",
]
