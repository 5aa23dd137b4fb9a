"""Fault injection: an ObjectStore wrapper that fails on purpose, for tests.

``FaultyStore(inner, faults)`` forwards every operation to ``inner``, except
that before each call it checks its :class:`Fault` rules (in injection order)
and may fire one of them:

=================  ============================================================
kind               effect
=================  ============================================================
``error_before``   raise :class:`InjectedFault` without calling ``inner``
``error_after``    call ``inner``, then raise :class:`InjectedFault` (the write
                   landed, but the caller is told it failed: an ambiguous outcome)
``crash_before``   raise :class:`SimulatedCrash` without calling ``inner``
``crash_after``    call ``inner``, then raise :class:`SimulatedCrash`
``delay``          sleep ``Fault.delay`` seconds, then call ``inner`` normally
``exists_after``   ``put_if_absent`` only: create the object, then raise
                   :class:`~mere.errors.AlreadyExists` -- a client library whose
                   retry of a create that landed got "already exists"
=================  ============================================================

Rules: a fault *applies* to a call when its ``op`` is the operation (or
``"*"``) and its ``match`` regex is found in the key (for ``list``, in the
prefix). Every applying fault counts the call in ``Fault.seen``, whether or not
it fires. The first applying fault (in injection order) that is past its
``after`` skips, has ``times`` left and passes its ``probability`` roll fires;
at most one fault fires per call. A fault is consumed (``Fault.fired`` and
``FaultyStore.fired[kind]`` are incremented) when it is chosen, so an
``*_after`` fault whose underlying operation itself raises still counts as
fired, and the operation's own exception propagates instead.

``list`` faults fire when ``list()`` is *called*, not on the first ``next()``:
``*_before`` kinds raise from the call, ``*_after`` kinds first consume the
inner listing completely, and ``delay`` sleeps in the call.

``exists()`` is not intercepted separately: the base implementation calls
``head``, so ``head`` faults apply to it (and ``calls["head"]`` counts it).
"""

from __future__ import annotations

import builtins
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import pyarrow as pa

from mere.errors import AlreadyExists, InvalidArgument, StorageError
from mere.storage.base import ObjectMeta, ObjectStore, Turns

__all__ = ["OPS", "Fault", "FaultKind", "FaultyStore", "InjectedFault", "SimulatedCrash"]

FaultKind = Literal[
    "error_before", "error_after", "crash_before", "crash_after", "delay", "exists_after"
]

#: The operations a fault can target ("*" targets all of them).
OPS = frozenset({"put_if_absent", "put", "get", "head", "list", "delete", "open_input"})
_KINDS = frozenset(
    {"error_before", "error_after", "crash_before", "crash_after", "delay", "exists_after"}
)

_T = TypeVar("_T")


class InjectedFault(StorageError):
    """An injected storage error. For writes the outcome is ambiguous, as for a real one."""


class SimulatedCrash(BaseException):
    """Simulates the process dying at this point.

    A BaseException, so ``except Exception`` in library code does not swallow
    it; tests catch it explicitly and then inspect the store as a new process
    would find it.
    """


@dataclass
class Fault:
    """One fault-injection rule (see the module docstring for the semantics).

    Attributes:
        op: the operation to intercept, one of :data:`OPS`, or ``"*"``.
        kind: what to do when the fault fires.
        match: a regex searched (``re.search``) in the key, or in the prefix
            for ``list``; ``""`` matches every call.
        times: how many times the fault may fire; ``None`` for no limit.
        probability: the chance that an eligible call fires the fault.
        delay: seconds to sleep, for kind ``"delay"``.
        after: the number of applying calls to let through before firing.
        seen: applying calls so far (maintained by FaultyStore).
        fired: times this fault has fired (maintained by FaultyStore).

    Raises:
        ValueError: an unknown op or kind, a bad regex, a negative count or
            delay, a probability outside [0, 1], or ``exists_after`` on an op
            other than ``put_if_absent``/``"*"``.
    """

    op: str
    kind: FaultKind
    match: str = ""
    times: int | None = 1
    probability: float = 1.0
    delay: float = 0.0
    after: int = 0
    seen: int = field(default=0, init=False, compare=False)
    fired: int = field(default=0, init=False, compare=False)
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.op != "*" and self.op not in OPS:
            raise InvalidArgument(
                f"unknown fault op {self.op!r}; expected one of {sorted(OPS)} or '*'"
            )
        if self.kind not in _KINDS:
            raise InvalidArgument(
                f"unknown fault kind {self.kind!r}; expected one of {sorted(_KINDS)}"
            )
        if self.kind == "exists_after" and self.op not in ("put_if_absent", "*"):
            raise InvalidArgument("an exists_after fault only applies to put_if_absent")
        if self.times is not None and self.times < 0:
            raise InvalidArgument(f"fault times must be >= 0 or None, not {self.times}")
        if self.after < 0:
            raise InvalidArgument(f"fault after must be >= 0, not {self.after}")
        if not 0.0 <= self.probability <= 1.0:
            raise InvalidArgument(f"fault probability must be in [0, 1], not {self.probability}")
        if self.delay < 0:
            raise InvalidArgument(f"fault delay must be >= 0, not {self.delay}")
        try:
            self._pattern = re.compile(self.match)
        except re.error as exc:
            raise InvalidArgument(f"bad fault match regex {self.match!r}: {exc}") from exc

    def applies(self, op: str, target: str) -> bool:
        """True if a call of ``op`` on ``target`` (key or list prefix) is one this rule watches."""
        if self.op != "*" and self.op != op:
            return False
        if self.kind == "exists_after" and op != "put_if_absent":
            return False
        return self._pattern.search(target) is not None

    @property
    def exhausted(self) -> bool:
        """True once the fault has fired ``times`` times."""
        return self.times is not None and self.fired >= self.times


class FaultyStore(ObjectStore):
    """Wraps a store and injects the faults it is given.

    Args:
        inner: the store that does the real work.
        faults: initial rules, in priority order.
        seed: seeds the random generator used for ``probability`` rolls
            (only faults with ``probability < 1`` draw from it).

    Attributes:
        inner: the wrapped store.
        fired: how many faults fired, by kind.
        calls: how many calls were made, by operation (including calls that
            failed or had a fault fire).
    """

    def __init__(
        self, inner: ObjectStore, faults: Iterable[Fault] = (), *, seed: int | None = None
    ) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.concurrent_reads = inner.concurrent_reads
        self.fired: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self._faults: builtins.list[Fault] = []
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        for fault in faults:
            self.inject(fault)

    def inject(self, fault: Fault) -> Fault:
        """Add a rule (after the existing ones) and return it, to inspect its counters."""
        with self._lock:
            self._faults.append(fault)
        return fault

    def clear(self) -> None:
        """Remove every rule. The ``fired`` and ``calls`` counters are kept."""
        with self._lock:
            self._faults.clear()

    @property
    def faults(self) -> builtins.list[Fault]:
        """A copy of the current rules, in priority order."""
        with self._lock:
            return builtins.list(self._faults)

    def _choose(self, op: str, target: str) -> Fault | None:
        """Count the call and pick the fault to fire, if any (under the lock)."""
        with self._lock:
            self.calls[op] += 1
            chosen: Fault | None = None
            for fault in self._faults:
                if not fault.applies(op, target):
                    continue
                fault.seen += 1
                if chosen is not None or fault.seen <= fault.after or fault.exhausted:
                    continue
                if fault.probability < 1.0 and self._random.random() >= fault.probability:
                    continue
                chosen = fault
            if chosen is not None:
                chosen.fired += 1
                self.fired[chosen.kind] += 1
            return chosen

    def _call(self, op: str, key: str, action: Callable[[], _T]) -> _T:
        """Run ``action`` (the inner operation), under a fault if one fires."""
        fault = self._choose(op, key)
        if fault is None:
            return action()
        return self._fire(fault, op, key, action)

    def _fire(self, fault: Fault, op: str, key: str, action: Callable[[], _T]) -> _T:
        """Apply an already chosen fault around ``action``."""
        kind = fault.kind
        message = f"injected {kind} fault on {op}({key!r})"
        if kind == "error_before":
            raise InjectedFault(message)
        if kind == "crash_before":
            raise SimulatedCrash(message)
        if kind == "delay":
            time.sleep(fault.delay)
            return action()
        action()
        if kind == "error_after":
            raise InjectedFault(message)
        if kind == "crash_after":
            raise SimulatedCrash(message)
        raise AlreadyExists(key)  # exists_after: the create landed, the "retry" saw it

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Forward to the inner store, subject to ``put_if_absent`` faults."""
        self._call("put_if_absent", key, lambda: self.inner.put_if_absent(key, data))

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        """Forward to the inner store, subject to ``put`` faults."""
        self._call("put", key, lambda: self.inner.put(key, data))

    def get(self, key: str) -> bytes:
        """Forward to the inner store, subject to ``get`` faults."""
        return self._call("get", key, lambda: self.inner.get(key))

    def head(self, key: str) -> ObjectMeta:
        """Forward to the inner store, subject to ``head`` faults (``exists`` included)."""
        return self._call("head", key, lambda: self.inner.head(key))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        """Forward to the inner store; ``list`` faults fire here, at call time.

        With no fault the inner (possibly lazy) iterator is returned as is;
        an ``*_after`` fault first drains the inner listing, then raises.
        """

        def listing() -> Iterator[ObjectMeta]:
            return self.inner.list(prefix, start_after)

        def drained() -> Iterator[ObjectMeta]:
            return iter(builtins.list(listing()))

        fault = self._choose("list", prefix)
        if fault is None:
            return listing()
        return self._fire(
            fault, "list", prefix, drained if fault.kind.endswith("_after") else listing
        )

    def delete(self, key: str) -> None:
        """Forward to the inner store, subject to ``delete`` faults."""
        self._call("delete", key, lambda: self.inner.delete(key))

    def open_input(self, key: str) -> pa.NativeFile:
        """Forward to the inner store, subject to ``open_input`` faults."""
        return self._call("open_input", key, lambda: self.inner.open_input(key))

    def turns(self, prefix: str) -> Turns | None:
        """The inner store's turns (advisory, so no faults: a put's outcome never rests on them)."""
        return self.inner.turns(prefix)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()
