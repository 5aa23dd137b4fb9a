"""Turns for writers racing for one log: no writer starves while others keep winning.

A commit is a create-only put of the next version, and the first put to land
wins. A writer that just won knows the state at its own version and puts its
next commit at once; a writer that lost must first read the winner's commit
(one round trip) before it can put again. Left alone, a writer committing in a
loop wins every race and the others never finish a commit
(docs/benchmarks.md, "Many writers, one log"). Nothing but the log is shared,
so a winner cannot see who is waiting; it can only see that it lost a race
itself, recently. Hence, per client (one :class:`Pacing` per
:class:`~mere.log.log.Log`):

* a client that lost a race within ``CONTENTION_WINDOW`` seconds pauses a
  random time, up to twice what its own catch-ups after a lost race took,
  before its next commit's first put: long enough, half the time, for a loser
  to put first;
* a client that keeps winning without losing cannot tell "alone" from
  "everyone else is starving", so after ``PROBE_EVERY`` such wins it pauses
  once (a probe), a random time up to a scale that starts at twice its put
  time (or its last catch-up, if longer) and grows ``PROBE_GROWTH`` times
  after each probe no loser used, up to ``PROBE_MAX``. A loser that gets
  through makes the winner lose, and turns start. Probes are spaced at least
  ``PROBE_SPACING`` times their scale apart, so a client alone spends at most
  about 1 / (2 * ``PROBE_SPACING``) of its time in them;
* a loser, once it has read the winner back, waits a random time up to its
  catch-up (``LOSER_SPREAD``) and then reads forward to the latest version
  before it tries again. Losers that all tried the next version at once
  would all but one lose again (each lost race costs a put, a read and a
  validation); spread out, a later one reads the earlier one's commit
  instead of racing it. This halved the lost races per commit (5 to 2.8 with
  8 local writers, docs/benchmarks.md).

The pauses are the only cost: nothing is written or read for them.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from dataclasses import dataclass, field

from mere.log.log import Log

#: A client that lost a race this recently (seconds) pauses before each first put.
CONTENTION_WINDOW = 1.0
#: A client that lost lately pauses up to this many times its catch-up before a first put.
WINNER_PAUSE = 2.0
#: A client winning without losing probes after at least this many commits ...
PROBE_EVERY = 16
#: ... and at least this many times the probe's scale after the previous probe.
PROBE_SPACING = 25
#: Each probe no loser used makes the next one's scale this many times larger ...
PROBE_GROWTH = 4
#: ... up to this (seconds).
PROBE_MAX = 0.2
#: A loser waits up to this many times its catch-up before reading forward.
LOSER_SPREAD = 1.0
#: After giving up waiting for a turn, a client takes turns only when free for this long.
STALLED_TURN_SECONDS = 10.0
#: Weight of the newest sample in the moving averages.
_WEIGHT = 0.2


def _average(known: float, sample: float) -> float:
    return known + _WEIGHT * (sample - known) if known else sample


@dataclass
class Pacing:
    """What one client knows of the race for its log (times from ``time.monotonic()``)."""

    lost_at: float | None = None  # when a put of ours last lost
    catch_up: float = 0.0  # seconds from a lost put to our next put (moving average)
    put_time: float = 0.0  # seconds a winning put took (moving average)
    wins_alone: int = 0  # commits won in a row without a lost race in CONTENTION_WINDOW
    probe_scale: float = 0.0  # the next probe's scale (0: from put_time and catch_up)
    probed_at: float | None = None  # when the last probe was
    stalled_at: float | None = None  # when we last gave up waiting for a turn
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def pause(self) -> float:
        """Seconds to wait before a commit's first put (0 when no one else is known)."""
        with self.lock:
            now = time.monotonic()
            if self.lost_at is not None and now - self.lost_at < CONTENTION_WINDOW:
                return random.uniform(0, WINNER_PAUSE * (self.catch_up or self.put_time))
            if self.wins_alone < PROBE_EVERY:
                return 0.0
            scale = self.probe_scale or 2 * max(self.put_time, self.catch_up)
            if self.probed_at is not None and now - self.probed_at < PROBE_SPACING * scale:
                return 0.0
            self.wins_alone, self.probed_at = 0, now
            self.probe_scale = min(PROBE_MAX, PROBE_GROWTH * scale)
            return random.uniform(0, scale)

    def after_loss(self) -> float:
        """Seconds a loser waits before it reads forward and tries again."""
        with self.lock:
            return random.uniform(0, LOSER_SPREAD * self.catch_up)

    def won(self, put_seconds: float) -> None:
        """A put of ours landed after ``put_seconds``."""
        with self.lock:
            self.put_time = _average(self.put_time, put_seconds)
            contended = self.lost_at is not None and (
                time.monotonic() - self.lost_at < CONTENTION_WINDOW
            )
            self.wins_alone = 0 if contended else self.wins_alone + 1

    def lost(self) -> None:
        """A put of ours found its version taken."""
        with self.lock:
            self.lost_at = time.monotonic()
            self.wins_alone, self.probe_scale = 0, 0.0

    def stalled_turn(self) -> None:
        """We waited for a turn (ObjectStore.turns) as long as we may and did not get it."""
        with self.lock:
            self.stalled_at = time.monotonic()

    def turns_stalled(self) -> bool:
        """Whether we gave up waiting for a turn within ``STALLED_TURN_SECONDS``."""
        with self.lock:
            at = self.stalled_at
        return at is not None and time.monotonic() - at < STALLED_TURN_SECONDS

    def caught_up(self, seconds: float) -> None:
        """Our next put went out ``seconds`` after the lost one was sent."""
        with self.lock:
            self.catch_up = _average(self.catch_up, seconds)


_PACINGS: weakref.WeakKeyDictionary[Log, Pacing] = weakref.WeakKeyDictionary()
_PACINGS_LOCK = threading.Lock()


def pacing_of(log: Log) -> Pacing:
    """The pacing of the client that owns ``log`` (one per log object, kept as long as it)."""
    with _PACINGS_LOCK:
        pacing = _PACINGS.get(log)
        if pacing is None:
            pacing = _PACINGS[log] = Pacing()
        return pacing


__all__ = [
    "CONTENTION_WINDOW",
    "LOSER_SPREAD",
    "PROBE_EVERY",
    "PROBE_MAX",
    "PROBE_SPACING",
    "STALLED_TURN_SECONDS",
    "Pacing",
    "pacing_of",
]
