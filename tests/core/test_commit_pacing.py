"""Pacing of racing writers (mere.txn.pacing) and the committer's patience.

The multi-process behaviour (writers looping with no pause all get turns) is
tested in tests/concurrency/test_fair_turns.py; here, one process: what a
client decides from what it saw, and that a commit losing more races than
``max_commit_attempts`` to other writers' commits keeps trying while patient.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import mere
from mere.log.keys import LOG_PREFIX
from mere.storage import FaultyStore, MemoryStore
from mere.storage.base import ObjectStore
from mere.txn import committer, pacing
from mere.txn.pacing import PROBE_EVERY, PROBE_GROWTH, PROBE_MAX, Pacing

KV = pa.schema([pa.field("k", pa.int64())])


# --- Pacing ----------------------------------------------------------------------------


def test_a_client_that_never_lost_pauses_at_most_once_per_probe_interval() -> None:
    p = Pacing()
    pauses = []
    for _ in range(10 * PROBE_EVERY):
        pauses.append(p.pause())
        p.won(0.001)
    assert pauses[:PROBE_EVERY] == [0.0] * PROBE_EVERY
    assert sum(1 for x in pauses if x) <= 10


def test_a_client_that_lost_pauses_before_each_commit_up_to_twice_its_catch_up() -> None:
    p = Pacing()
    p.won(0.001)
    p.lost()
    p.caught_up(0.01)
    pauses = [p.pause() for _ in range(20)]
    assert all(0 <= x <= 0.02 for x in pauses)
    assert any(x > 0 for x in pauses)


def test_a_loser_waits_up_to_its_catch_up_and_nothing_before_it_knows_one() -> None:
    p = Pacing()
    assert p.after_loss() == 0.0
    p.caught_up(0.01)
    waits = [p.after_loss() for _ in range(20)]
    assert all(0 <= x <= 0.01 for x in waits)


def test_unused_probes_grow_to_a_bound_and_a_lost_race_resets_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pacing, "PROBE_SPACING", 0)  # probes as often as PROBE_EVERY allows
    p = Pacing()
    scales = []
    for _ in range(8 * PROBE_EVERY):
        p.pause()
        p.won(0.001)
        scales.append(p.probe_scale)
    grown = sorted(set(scales))
    assert grown[:3] == [
        0.0,
        pytest.approx(PROBE_GROWTH * 0.002),
        pytest.approx(PROBE_GROWTH**2 * 0.002),
    ]
    assert max(scales) == PROBE_MAX
    p.lost()
    assert p.probe_scale == 0.0


# --- patience ----------------------------------------------------------------------------


class OthersFirst(FaultyStore):
    """Before each of our first ``times`` commit puts, another client commits first."""

    def __init__(self, inner: ObjectStore, times: int) -> None:
        super().__init__(inner)
        self.left = times
        self.other: mere.Database | None = None

    def put_if_absent(self, key: str, data: bytes | memoryview | pa.Buffer) -> None:
        if key.startswith(LOG_PREFIX) and self.left and self.other is not None:
            self.left -= 1
            self.other.table("b").append([{"k": self.left}])  # lands at our version
        super().put_if_absent(key, data)


def _racing(times: int, max_attempts: int) -> tuple[mere.Database, OthersFirst]:
    store = OthersFirst(MemoryStore(), times)
    db = mere.connect(store, max_commit_attempts=max_attempts)
    db.create_table("a", KV)
    db.create_table("b", KV)
    store.other = mere.connect(store.inner, create=False)
    return db, store


def test_a_commit_losing_more_races_than_its_attempts_to_others_keeps_trying() -> None:
    db, store = _racing(times=7, max_attempts=3)
    start = db.version
    assert db.table("a").append([{"k": 1}]) == start + 8
    assert store.left == 0
    assert db.table("b").scan().num_rows == 7


def test_past_its_patience_a_commit_gives_up_after_max_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(committer, "COMMIT_PATIENCE_SECONDS", 0.0)
    db, store = _racing(times=7, max_attempts=3)
    with db.transaction() as tx:
        tx.table("a").append([{"k": 1}])
        with pytest.raises(mere.RetriesExhausted, match="after 3 attempts"):
            tx.commit()
    assert store.left == 4
    assert db.table("a").scan().num_rows == 0


def test_one_attempt_means_one_try() -> None:
    db, store = _racing(times=7, max_attempts=1)
    with db.transaction() as tx:
        tx.table("a").append([{"k": 1}])
        with pytest.raises(mere.RetriesExhausted, match="after 1 attempts"):
            tx.commit()
    assert store.left == 6
