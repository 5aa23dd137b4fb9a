"""Running a verification: set up, start the clients, inject faults, check.

The parent process:

1. refuses ``memory://`` (a memory store lives in one process, so the
   clients would each see their own empty database) and any location that
   already holds a database (verify writes test tables and commits);
2. creates the database and the workload's tables in one commit; with
   ``inline_limit`` it first turns inlined data files on (the database
   properties ``inlineLimit``, ``inlineFlushBytes`` and a short
   ``checkpointInterval``), so that the clients' small writes land in the log
   and the checkpointing client moves them out to data files during the run;
3. starts ``processes`` clients as fresh interpreters, never by forking the
   parent (a forked child would inherit its threads, locks and caches): with
   the ``forkserver`` start method where there is one (a server started like
   ``spawn`` that has imported mere once, so a client restarted after a kill
   is running in milliseconds), else ``spawn``;
4. while they run, injects the parent-side faults: ``kill`` SIGKILLs a random
   client (almost always mid-transaction) and starts a new client, under a
   new process id, for the rest of its quota; ``stale-hint`` overwrites the
   ``_log/_latest`` hint with an old version, which readers must never trust;
   ``http`` runs a fault-injecting HTTP proxy (:mod:`mere.verify.http_proxy`)
   in front of a cloud store's plain-http endpoint and hands the clients an
   environment whose endpoint variable names the proxy (see
   :func:`http_endpoint`; the parent itself reaches the store directly);
5. assembles the clients' history files, replays the log, and checks.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mere.database import connect
from mere.errors import (
    StorageError,
    VerifyError,
)
from mere.log.keys import LATEST_HINT
from mere.log.log import Log
from mere.properties import (
    CHECKPOINT_INTERVAL_PROPERTY,
    INLINE_FLUSH_PROPERTY,
    INLINE_LIMIT_PROPERTY,
    MAX_INLINE_LIMIT,
)
from mere.storage import ObjectStore, open_store
from mere.verify.checker import ISOLATION_LEVELS, CheckResult, check
from mere.verify.client import CLIENT_FAULTS, FAULTS, ClientSpec, client_main
from mere.verify.history import History, assemble
from mere.verify.http_proxy import Fault, FaultProxy
from mere.verify.truth import bank_totals_by_snapshot, read_truth
from mere.verify.workloads import Workload

#: The longest a run may last (its duration, or its time limit with a transaction count).
MAX_RUN_SECONDS = 86_400.0
#: How long a run with a transaction count may take before it gives up, by default.
DEFAULT_TIME_LIMIT = 3_600.0
#: Extra seconds the clients get past the duration or time limit to finish and write.
FINISH_GRACE = 120.0
#: Seconds between two kills, and between two stale hints (uniformly drawn).
KILL_INTERVAL = (0.5, 1.5)
#: At most one kill per this many transactions of the quota (a run with a count).
TRANSACTIONS_PER_KILL = 20
#: Modules the fork server imports once, so that clients start fast.
PRELOAD = ["mere.verify.client", "mere.ops.update", "mere.ops.delete", "mere.expr"]
STALE_HINT_INTERVAL = (0.05, 0.3)
#: A commit-file create as the proxy sees it: ``.../_log/<20 digits>.json``.
COMMIT_PATH = r"/_log/\d{20}\.json(?:\?|$)"
_ALL_METHODS = frozenset({"GET", "HEAD", "PUT", "POST", "DELETE"})
#: The service's "slow down" error code, per backend (sent with a 503).
_BUSY_CODE = {"s3": "SlowDown", "azure": "ServerBusy", "gcs": "ServiceUnavailable"}
_CLOUD_SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
    "gs": "gcs",
    "gcs": "gcs",
}
#: The environment variables that set each backend's endpoint, as obstore reads them.
_ENDPOINT_VARIABLES = {
    "s3": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "azure": ("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT"),
    "gcs": ("GOOGLE_BASE_URL",),
}
#: With inlining on: the inlined bytes a table keeps before a checkpoint flushes them (small,
#: so that flushes happen during a run: a one-row list-append file is about 600 bytes).
DEFAULT_VERIFY_FLUSH_BYTES = 16 * 1024
#: With inlining on: a checkpoint (and with it a possible flush) every this many commits.
DEFAULT_VERIFY_CHECKPOINT_INTERVAL = 10
_AZURITE_URL = "AZURITE_BLOB_STORAGE_URL"
_AZURITE_DEFAULT = "http://127.0.0.1:10000"


@dataclass(frozen=True)
class RunConfig:
    """What to run: see ``mere verify --help`` for the meaning of each field."""

    uri: str
    workload: str = "list-append"
    processes: int = 4
    duration: float | None = None
    transactions: int | None = None
    keys: int = 5
    tables: int = 2
    isolation: str = "serializable"
    faults: tuple[str, ...] = ()
    seed: int = 0
    max_ops: int = 4
    workdir: str | None = None
    time_limit: float = DEFAULT_TIME_LIMIT
    """With ``transactions``: give up (an error) when the clients are not done after this."""
    inline_limit: int = 0
    """Data files of at most this many bytes are inlined in their commit (0: off)."""
    inline_flush_bytes: int = DEFAULT_VERIFY_FLUSH_BYTES
    """With inlining: a table's inlined bytes past this are flushed at a checkpoint."""
    checkpoint_interval: int | None = None
    """A checkpoint every this many commits (None: 10 with inlining, else the default)."""
    unsafe_disable_conflict_detection: bool = False
    """Test-only: clients run with conflict detection off, a deliberately broken mere.

    It shows the checker catching what a broken build lets through. ``mere verify``
    turns it on only when ``MERE_UNSAFE_DISABLE_CONFLICT_DETECTION=1`` is set.
    """

    def validate(self) -> None:
        """Raise VerifyError for a configuration that cannot run."""
        if urlparse(self.uri).scheme.lower() == "memory":
            raise VerifyError(
                "mere verify cannot use a memory:// store: each client process would see "
                "its own empty database",
                help="give a local path (or file:// URI) shared by the clients",
            )
        if self.isolation not in ISOLATION_LEVELS:
            raise VerifyError(f"isolation must be one of {ISOLATION_LEVELS}")
        unknown = [f for f in self.faults if f not in FAULTS]
        if unknown:
            raise VerifyError(f"unknown faults {unknown}; choose from {', '.join(FAULTS)}")
        if self.processes < 1:
            raise VerifyError("at least one client process is needed")
        if self.duration is not None and self.transactions is not None:
            raise VerifyError("give a duration or a transaction count, not both")
        if self.duration is not None and not (0 < self.duration <= MAX_RUN_SECONDS):
            raise VerifyError(f"the duration must be in (0, {MAX_RUN_SECONDS:g}] seconds")
        if not (0 < self.time_limit <= MAX_RUN_SECONDS):
            raise VerifyError(f"the time limit must be in (0, {MAX_RUN_SECONDS:g}] seconds")
        if self.transactions is not None and self.transactions < 1:
            raise VerifyError("the transaction count must be at least 1")
        if not (0 <= self.inline_limit <= MAX_INLINE_LIMIT):
            raise VerifyError(f"the inline limit must be in [0, {MAX_INLINE_LIMIT}] bytes")
        if self.inline_flush_bytes < 0:
            raise VerifyError("the inline flush bound cannot be negative")
        if self.checkpoint_interval is not None and self.checkpoint_interval < 1:
            raise VerifyError("the checkpoint interval must be at least 1")
        try:
            self.make_workload()
        except ValueError as exc:
            raise VerifyError(str(exc)) from None

    def make_workload(self) -> Workload:
        return Workload(self.workload, self.tables, self.keys, self.max_ops)

    def database_properties(self) -> dict[str, str]:
        """The properties the run sets before its setup commit (none by default)."""
        properties: dict[str, str] = {}
        interval = self.checkpoint_interval
        if self.inline_limit:
            properties[INLINE_LIMIT_PROPERTY] = str(self.inline_limit)
            properties[INLINE_FLUSH_PROPERTY] = str(self.inline_flush_bytes)
            interval = interval or DEFAULT_VERIFY_CHECKPOINT_INTERVAL
        if interval is not None:
            properties[CHECKPOINT_INTERVAL_PROPERTY] = str(interval)
        return properties


def http_rules(backend: str) -> list[tuple[str, Fault]]:
    """The proxy's rules for the ``http`` fault, each with the name its count is reported by.

    Probabilities are per HTTP request; a transaction makes a few dozen. The
    ambiguous answers go to commit-file creates, where they exercise the
    read-back of the commit protocol; every request may be throttled, reset,
    cut off after it was served, or delayed. A run still makes progress.
    """
    busy = _BUSY_CODE.get(backend, "ServerBusy")
    rules = [
        ("http-drop-after-commit", Fault("drop_after", path=COMMIT_PATH, probability=0.08)),
        ("http-500-after-commit",
         Fault("error_after", path=COMMIT_PATH, status=500, probability=0.08)),
    ]  # fmt: skip
    if backend == "s3":
        rules.append(
            ("http-409-before-commit",
             Fault("error_before", path=COMMIT_PATH, status=409,
                   code="ConditionalRequestConflict", probability=0.05))
        )  # fmt: skip
    rules += [
        ("http-503-before",
         Fault("error_before", methods=_ALL_METHODS, status=503, code=busy, probability=0.01)),
        ("http-reset-before", Fault("reset_before", methods=_ALL_METHODS, probability=0.003)),
        ("http-drop-after", Fault("drop_after", methods=_ALL_METHODS, probability=0.002)),
        ("http-delay",
         Fault("delay", methods=_ALL_METHODS, probability=0.05, delay=0.005)),
    ]  # fmt: skip
    return rules


@dataclass(frozen=True)
class HttpEndpoint:
    """Where a cloud store's requests go, and the variables that say so (``http`` fault)."""

    backend: str
    host: str
    port: int
    path: str
    """The endpoint URL's path (``/<account>`` in an Azure endpoint): kept after the proxy's."""
    variables: tuple[str, ...]
    """The environment variables to point at the proxy."""

    def overrides(self, proxy_endpoint: str) -> dict[str, str]:
        """The client environment's changes that send the store's requests to the proxy."""
        return {name: proxy_endpoint + self.path for name in self.variables}


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "on", "yes", "y")


def http_endpoint(uri: str, environ: dict[str, str]) -> HttpEndpoint | None:
    """The plain-http endpoint the ``http`` fault can proxy for ``uri``.

    mere's cloud stores read their endpoint from the environment (obstore's
    variables: see :mod:`mere.storage.cloud`): for S3 ``AWS_ENDPOINT_URL_S3``,
    ``AWS_ENDPOINT_URL`` or ``AWS_ENDPOINT``; for Azure
    ``AZURITE_BLOB_STORAGE_URL`` when ``AZURE_STORAGE_USE_EMULATOR`` is set
    (default ``http://127.0.0.1:10000``), else ``AZURE_STORAGE_ENDPOINT`` or
    ``AZURE_ENDPOINT``; for GCS ``GOOGLE_BASE_URL``.

    Returns None for a store that speaks no HTTP (a local path or
    ``file://``): the run skips the fault with a note.

    Raises:
        VerifyError: the store's endpoint is https, which includes a real
            cloud service's default endpoint: the proxy speaks plain HTTP only.
    """
    scheme = urlparse(uri).scheme.lower()
    backend = _CLOUD_SCHEMES.get(scheme)
    if backend is None:
        return None
    if backend == "azure" and _truthy(environ.get("AZURE_STORAGE_USE_EMULATOR")):
        variables: tuple[str, ...] = (_AZURITE_URL,)
        url = environ.get(_AZURITE_URL) or _AZURITE_DEFAULT
    else:
        variables = tuple(v for v in _ENDPOINT_VARIABLES[backend] if environ.get(v))
        url = environ[variables[0]] if variables else ""
    parts = urlparse(url)
    if parts.scheme.lower() != "http" or not parts.hostname:
        where = (
            f"its endpoint {parts.scheme}://{parts.hostname or ''}"
            if url
            else "its endpoint is the service's own (https), since no endpoint variable is set"
        )
        raise VerifyError(
            f"the http fault cannot be injected on {uri}: {where}. The fault proxy speaks "
            "plain HTTP only, so it can stand in front of an emulator or another http:// "
            "endpoint, not a real cloud service over https",
            help="leave http out of --faults (list the other kinds instead of all): "
            + ",".join(f for f in FAULTS if f != "http"),
        )
    try:
        port = parts.port or 80
    except ValueError:
        raise VerifyError(f"the store's endpoint for {uri} has a bad port") from None
    return HttpEndpoint(backend, parts.hostname, port, parts.path.rstrip("/"), variables)


@dataclass
class RunResult:
    """A finished run: its history, the checker's verdict, and the faults that fired."""

    config: RunConfig
    history: History
    result: CheckResult
    faults: dict[str, int]
    elapsed: float
    client_crashes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Remarks about the run, such as a fault kind that was skipped and why."""
    rearranged_versions: list[int] = field(default_factory=list)
    """Versions that only moved rows to new files (flushes of inlined files)."""

    @property
    def valid(self) -> bool:
        return self.result.valid and not self.client_crashes

    def to_json(self, *, history: bool = False) -> dict[str, Any]:
        """The report; with ``history``, every transaction of the run too."""
        config = {k: v for k, v in asdict(self.config).items() if k != "workdir"}
        config["faults"] = list(self.config.faults)
        out = {
            "valid": self.valid,
            "config": config,
            "elapsed_seconds": round(self.elapsed, 3),
            "transactions": len(self.history.txns),
            "faults_fired": self.faults,
            "client_crashes": self.client_crashes,
            "notes": self.notes,
            "rearranged_versions": self.rearranged_versions,
            "check": self.result.to_json(),
        }
        if history:
            out["history"] = [t.to_json() for t in self.history.txns]
        return out


@dataclass
class _Slot:
    """One client seat: the process currently in it and how much of its quota is left."""

    process_id: int
    proc: multiprocessing.process.BaseProcess
    quota: int | None
    history: Path


class _Parent:
    """The parent's bookkeeping while the clients run."""

    def __init__(self, config: RunConfig, workdir: Path, store: ObjectStore) -> None:
        self.config = config
        #: The environment the clients get (the ``http`` fault points it at its proxy).
        self.environ = dict(os.environ)
        self.workdir = workdir
        self.store = store
        self.workload = config.make_workload()
        self.context = _context()
        self.rng = random.Random(f"{config.seed}/parent")
        self.next_id = 1
        self.slots: list[_Slot] = []
        self.deadline: float | None = None
        self.fired: Counter[str] = Counter()
        self.crashes: list[str] = []

    def start(self, quota: int | None) -> _Slot:
        process_id = self.next_id
        self.next_id += 1
        history = self.workdir / f"p{process_id:05d}.jsonl"
        spec = ClientSpec(
            uri=self.config.uri,
            workload=self.workload,
            isolation=self.config.isolation,
            process=process_id,
            seed=self.config.seed,
            history=str(history),
            quota=quota,
            deadline=self.deadline,
            faults=tuple(f for f in self.config.faults if f in CLIENT_FAULTS),
            unsafe_disable_conflict_detection=self.config.unsafe_disable_conflict_detection,
            environ=dict(self.environ),
        )
        proc = self.context.Process(
            target=client_main, args=(spec,), name=f"verify-p{process_id}", daemon=True
        )
        proc.start()
        return _Slot(process_id, proc, quota, history)

    def kill_one(self) -> bool:
        """SIGKILL a random client that is mid-transaction; seat a new one for the rest.

        Returns False when no client is in a transaction right now.
        """
        busy = [
            i
            for i, s in enumerate(self.slots)
            if s.proc.is_alive() and _last_kind(s.history) == "invoke"
        ]
        if not busy:
            return False
        i = self.rng.choice(busy)
        slot = self.slots[i]
        slot.proc.kill()
        slot.proc.join(30)
        self.fired["kill"] += 1
        started = sum(1 for line in _lines(slot.history) if '"kind":"invoke"' in line)
        quota = None if slot.quota is None else slot.quota - started
        more_time = self.deadline is None or time.time() < self.deadline
        if (quota is None or quota > 0) and more_time:
            self.slots[i] = self.start(quota)
        return True

    def stale_hint(self) -> None:
        """Point ``_log/_latest`` at an older version (readers must probe past it)."""
        try:
            latest = Log(self.store).latest_version() or 0
            old = self.rng.randint(0, max(0, latest - 1))
            self.store.put(LATEST_HINT, json.dumps({"version": old}).encode())
        except StorageError:
            return
        self.fired["stale-hint"] += 1

    def run(self, progress: Callable[[str], None]) -> None:
        config = self.config
        n = config.processes
        if config.transactions is not None:
            quotas: list[int | None] = [
                config.transactions // n + (1 if i < config.transactions % n else 0)
                for i in range(n)
            ]
        else:
            quotas = [None] * n
            self.deadline = time.time() + (config.duration or 10.0)
        self.slots = [self.start(q) for q in quotas if q is None or q > 0]
        progress(f"started {len(self.slots)} client processes")
        max_kills = (
            max(1, config.transactions // TRANSACTIONS_PER_KILL)
            if config.transactions is not None
            else math.inf
        )
        give_up = time.time() + (config.duration or config.time_limit) + FINISH_GRACE
        next_kill = time.time() + self.rng.uniform(*KILL_INTERVAL)
        next_stale = time.time() + self.rng.uniform(*STALE_HINT_INTERVAL)
        try:
            while any(s.proc.is_alive() for s in self.slots):
                now = time.time()
                if now > give_up:
                    raise VerifyError(
                        "the clients did not finish in time",
                        help="run fewer --transactions, or raise --time-limit",
                    )
                if "kill" in config.faults and now >= next_kill and self.fired["kill"] < max_kills:
                    if self.kill_one():
                        next_kill = now + self.rng.uniform(*KILL_INTERVAL)
                if "stale-hint" in config.faults and now >= next_stale:
                    self.stale_hint()
                    next_stale = now + self.rng.uniform(*STALE_HINT_INTERVAL)
                for slot in self.slots:
                    slot.proc.join(0.02 / max(1, len(self.slots)))
        finally:
            for slot in self.slots:
                if slot.proc.is_alive():
                    slot.proc.kill()
                slot.proc.join(30)
        for slot in self.slots:
            if slot.proc.exitcode not in (0, None) and slot.proc.exitcode > 0:
                self.crashes.append(f"client p{slot.process_id} exited with {slot.proc.exitcode}")


def _context() -> multiprocessing.context.SpawnContext | multiprocessing.context.ForkServerContext:
    """forkserver (preloaded with mere) where available, else spawn; never fork."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)  # only if the server is not running yet
        return context
    return multiprocessing.get_context("spawn")


def _last_kind(path: Path) -> str | None:
    """The kind of the last complete record of a client file (None if there is none)."""
    lines = [line for line in _lines(path) if line.endswith("}")]
    if not lines:
        return None
    return "invoke" if '"kind":"invoke"' in lines[-1] else "complete"


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def run(config: RunConfig, progress: Callable[[str], None] | None = None) -> RunResult:
    """Run a verification end to end (see the module docstring).

    Raises:
        VerifyError: a bad configuration, a location that already holds a
            database, clients that never finish, or the ``http`` fault on a
            store whose endpoint is https.
    """
    config.validate()
    say = progress or (lambda _message: None)
    notes: list[str] = []
    endpoint: HttpEndpoint | None = None
    if "http" in config.faults:
        endpoint = http_endpoint(config.uri, dict(os.environ))
        if endpoint is None:
            notes.append(
                "the http fault was skipped: the store is not reached over HTTP "
                "(it applies to cloud stores on a plain-http endpoint)"
            )
            say(notes[-1])
    store = open_store(config.uri)
    if Log(store).latest_version() is not None:
        raise VerifyError(
            f"a mere database already exists at {store.uri}",
            help="mere verify creates its own database: give a new, empty location",
        )
    workload = config.make_workload()
    db = connect(store)
    properties = config.database_properties()
    if properties:
        db.set_properties(properties)
        say("database properties: " + ", ".join(f"{k}={v}" for k, v in properties.items()))
    setup_version = workload.setup(db)
    say(f"created {len(workload.table_names)} tables at version {setup_version}")
    own_workdir = config.workdir is None
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="mere-verify-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        parent = _Parent(config, workdir, store)
        rules: list[tuple[str, Fault]] = []
        proxy: FaultProxy | None = None
        try:
            if endpoint is not None:
                proxy = FaultProxy(endpoint.port, upstream_host=endpoint.host, seed=config.seed)
                rules = http_rules(endpoint.backend)
                for _name, rule in rules:
                    proxy.add(rule)
                proxy.start()
                parent.environ.update(endpoint.overrides(proxy.endpoint))
                say(f"http faults: clients reach the store through the proxy at {proxy.endpoint}")
            parent.run(say)
        finally:
            if proxy is not None:
                proxy.stop()
                parent.fired.update({name: rule.fired for name, rule in rules if rule.fired})
        elapsed = time.monotonic() - started
        history = assemble(workdir.glob("p*.jsonl"))
        say(f"{len(history.txns)} transactions recorded; checking")
        truth = read_truth(store, workload)
        if workload.name == "bank" and truth.setup_version is not None:
            say("reading every version's total through snapshots")
            truth.bad_totals.update(bank_totals_by_snapshot(store, workload, truth.setup_version))
        result = check(history, truth, workload, config.isolation)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        store.close()
    faults: dict[str, int] = dict(history.faults)
    faults.update(parent.fired)
    return RunResult(
        config=replace(config),
        history=history,
        result=result,
        faults={k: faults[k] for k in sorted(faults)},
        elapsed=elapsed,
        client_crashes=parent.crashes + history.crashes,
        notes=notes,
        rearranged_versions=list(truth.rearranged),
    )


def rate(count: int, seconds: float) -> str:
    """``"12.3/s"``: a count per second, for summaries."""
    return f"{count / seconds:.1f}/s" if seconds > 0 else "-"
