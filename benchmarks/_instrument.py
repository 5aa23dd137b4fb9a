"""Instrumentation for the benchmarks: a store that times every request, phase timers.

Nothing here changes what mere does; it only measures. :class:`TimingStore`
forwards each call to the wrapped store and adds the time (and the bytes
written) to a counter keyed by (operation, kind of object). :class:`PhaseTimer`
temporarily wraps methods of mere's classes with timers, and restores them.
"""

from __future__ import annotations

import builtins
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from mere.storage.base import ObjectMeta, ObjectStore

_COMMIT = re.compile(r"_log/\d{20}\.json\Z")
_CHECKPOINT = re.compile(r"_log/\d{20}\.checkpoint\.parquet\Z")


def key_kind(key: str) -> str:
    """Which kind of object a key names: data, commit, checkpoint, hint or other."""
    if key.startswith("tables/"):
        return "data"
    if _COMMIT.match(key):
        return "commit"
    if _CHECKPOINT.match(key):
        return "checkpoint"
    if key.startswith("_log/_"):
        return "hint"
    if key.startswith("_log/"):
        return "log"
    return "other"


def _size(data: bytes | memoryview | pa.Buffer) -> int:
    return data.size if isinstance(data, pa.Buffer) else memoryview(data).nbytes


class TimingStore(ObjectStore):
    """Wraps a store; accumulates seconds, calls and bytes per (operation, key kind).

    ``list`` is drained inside the timed region so its cost is counted where it
    is incurred. ``keys_read`` records every key successfully read with ``get`` or
    ``open_input`` (for replaying the same reads as an I/O floor).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.seconds: dict[tuple[str, str], float] = defaultdict(float)
        self.calls: dict[tuple[str, str], int] = defaultdict(int)
        self.bytes: dict[tuple[str, str], int] = defaultdict(int)
        self.keys_read: builtins.list[str] = []

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.bytes.clear()
        self.keys_read.clear()

    def snapshot(self) -> dict[tuple[str, str], tuple[float, int, int]]:
        """(seconds, calls, bytes) by (op, kind), then reset the counters."""
        out = {k: (self.seconds[k], self.calls[k], self.bytes.get(k, 0)) for k in self.seconds}
        self.reset()
        return out

    def _timed(self, op: str, key: str, fn: Callable[[], Any], nbytes: int = 0) -> Any:
        kind = key_kind(key)
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.seconds[(op, kind)] += time.perf_counter() - t0
            self.calls[(op, kind)] += 1
            if nbytes:
                self.bytes[(op, kind)] += nbytes

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        self._timed("put_if_absent", key, lambda: self.inner.put_if_absent(key, data), _size(data))

    def put(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        self._timed("put", key, lambda: self.inner.put(key, data), _size(data))

    def get(self, key: str) -> bytes:
        data = self._timed("get", key, lambda: self.inner.get(key))
        self.keys_read.append(key)
        return data

    def head(self, key: str) -> ObjectMeta:
        return self._timed("head", key, lambda: self.inner.head(key))

    def list(self, prefix: str = "", start_after: str | None = None) -> Iterator[ObjectMeta]:
        items = self._timed(
            "list", prefix, lambda: builtins.list(self.inner.list(prefix, start_after))
        )
        return iter(items)

    def delete(self, key: str) -> None:
        self._timed("delete", key, lambda: self.inner.delete(key))

    def open_input(self, key: str) -> pa.NativeFile:
        source = self._timed("open_input", key, lambda: self.inner.open_input(key))
        self.keys_read.append(key)
        return source

    def close(self) -> None:
        self.inner.close()


class PhaseTimer:
    """Wraps methods with timers while active; ``seconds[name]`` accumulates.

    Re-entrant calls of the same phase are timed once (the outermost call).
    """

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._patched: list[tuple[type, str, Any]] = []
        self._depth: dict[str, int] = defaultdict(int)

    def wrap(self, cls: type, method: str, name: str) -> None:
        original = cls.__dict__[method]
        timer = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if timer._depth[name]:
                return original(*args, **kwargs)
            timer._depth[name] += 1
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timer.seconds[name] += time.perf_counter() - t0
                timer.calls[name] += 1
                timer._depth[name] -= 1

        timed.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(cls, method, timed)
        self._patched.append((cls, method, original))

    def snapshot(self) -> dict[str, float]:
        out = dict(self.seconds)
        self.seconds.clear()
        self.calls.clear()
        return out

    def restore(self) -> None:
        for cls, method, original in reversed(self._patched):
            setattr(cls, method, original)
        self._patched.clear()

    def __enter__(self) -> PhaseTimer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()
