"""FaultyStore: every fault kind does what it says, and the rules are honoured."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from mere.errors import AlreadyExists, ObjectNotFound, StorageError
from mere.storage import Fault, FaultyStore, InjectedFault, MemoryStore, SimulatedCrash


@pytest.fixture
def inner() -> Iterator[MemoryStore]:
    store = MemoryStore()
    yield store
    MemoryStore.forget(store.name)


@pytest.fixture
def faulty(inner: MemoryStore) -> FaultyStore:
    return FaultyStore(inner, seed=7)


def test_exception_hierarchy() -> None:
    assert issubclass(InjectedFault, StorageError)
    assert issubclass(SimulatedCrash, BaseException)
    assert not issubclass(SimulatedCrash, Exception)


def test_no_faults_is_transparent(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.put_if_absent("a", b"1")
    faulty.put("b", b"2")
    assert faulty.get("a") == b"1"
    assert faulty.head("b").size == 1
    assert [m.key for m in faulty.list()] == ["a", "b"]
    assert faulty.open_input("a").read() == b"1"
    faulty.delete("a")
    assert not faulty.exists("a")
    assert inner.get("b") == b"2"
    assert faulty.uri == inner.uri
    assert sum(faulty.fired.values()) == 0
    assert faulty.calls == {
        "put_if_absent": 1,
        "put": 1,
        "get": 1,
        "head": 2,  # head() and exists()
        "list": 1,
        "open_input": 1,
        "delete": 1,
    }


# --- each kind ------------------------------------------------------------------------


def test_error_before_does_not_write(faulty: FaultyStore, inner: MemoryStore) -> None:
    fault = faulty.inject(Fault("put_if_absent", "error_before"))
    with pytest.raises(InjectedFault, match="error_before"):
        faulty.put_if_absent("k", b"v")
    assert not inner.exists("k")
    assert fault.fired == 1
    faulty.put_if_absent("k", b"v")  # times=1: the next call goes through
    assert inner.get("k") == b"v"


def test_error_after_really_wrote(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.inject(Fault("put_if_absent", "error_after"))
    with pytest.raises(InjectedFault):
        faulty.put_if_absent("k", b"v")
    assert inner.get("k") == b"v"
    with pytest.raises(AlreadyExists):  # a blind retry now sees its own write
        faulty.put_if_absent("k", b"v")


def test_crash_before_did_not_write(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.inject(Fault("put", "crash_before"))
    with pytest.raises(SimulatedCrash):
        try:
            faulty.put("k", b"v")
        except Exception:  # library code must not be able to swallow a crash
            pytest.fail("SimulatedCrash was caught by 'except Exception'")
    assert not inner.exists("k")


def test_crash_after_wrote(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.inject(Fault("put_if_absent", "crash_after"))
    with pytest.raises(SimulatedCrash):
        faulty.put_if_absent("k", b"v")
    assert inner.get("k") == b"v"


def test_delay_sleeps_then_performs(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.inject(Fault("put", "delay", delay=0.05))
    started = time.monotonic()
    faulty.put("k", b"v")
    assert time.monotonic() - started >= 0.045
    assert inner.get("k") == b"v"
    assert faulty.fired["delay"] == 1


def test_exists_after_wrote_and_raised_already_exists(
    faulty: FaultyStore, inner: MemoryStore
) -> None:
    faulty.inject(Fault("put_if_absent", "exists_after"))
    with pytest.raises(AlreadyExists) as info:
        faulty.put_if_absent("_log/00000000000000000001.json", b"commit")
    assert info.value.key == "_log/00000000000000000001.json"
    assert inner.get("_log/00000000000000000001.json") == b"commit"


def test_exists_after_only_applies_to_put_if_absent(
    faulty: FaultyStore, inner: MemoryStore
) -> None:
    with pytest.raises(ValueError):
        Fault("put", "exists_after")
    fault = faulty.inject(Fault("*", "exists_after"))
    faulty.put("a", b"1")
    assert faulty.get("a") == b"1"
    assert fault.seen == 0
    with pytest.raises(AlreadyExists):
        faulty.put_if_absent("b", b"2")
    assert inner.get("b") == b"2"


def test_after_kind_whose_operation_fails_propagates_that_failure(
    faulty: FaultyStore,
) -> None:
    faulty.put_if_absent("k", b"v")
    fault = faulty.inject(Fault("put_if_absent", "error_after"))
    with pytest.raises(AlreadyExists):
        faulty.put_if_absent("k", b"other")
    assert fault.fired == 1  # consumed when chosen
    assert faulty.get("k") == b"v"


@pytest.mark.parametrize(
    ("op", "call"),
    [
        ("get", lambda s: s.get("k")),
        ("head", lambda s: s.head("k")),
        ("delete", lambda s: s.delete("k")),
        ("open_input", lambda s: s.open_input("k")),
        ("head", lambda s: s.exists("k")),
    ],
)
def test_read_and_delete_ops_can_fail(
    faulty: FaultyStore, op: str, call: Callable[[FaultyStore], object]
) -> None:
    faulty.put("k", b"v")
    faulty.inject(Fault(op, "error_before"))
    with pytest.raises(InjectedFault):
        call(faulty)
    faulty.inject(Fault(op, "crash_before"))
    with pytest.raises(SimulatedCrash):
        call(faulty)
    call(faulty)  # both faults are used up


def test_delete_error_after_deleted(faulty: FaultyStore, inner: MemoryStore) -> None:
    faulty.put("k", b"v")
    faulty.inject(Fault("delete", "error_after"))
    with pytest.raises(InjectedFault):
        faulty.delete("k")
    assert not inner.exists("k")


def test_get_error_after_still_raises_not_found_for_missing_key(faulty: FaultyStore) -> None:
    faulty.inject(Fault("get", "error_after"))
    with pytest.raises(ObjectNotFound):
        faulty.get("missing")


# --- list -------------------------------------------------------------------------------


def test_list_faults_fire_on_call(faulty: FaultyStore) -> None:
    faulty.put("_log/1", b"")
    faulty.put("data/x", b"")
    faulty.inject(Fault("list", "error_before", match="^_log/"))
    faulty.list("data/")  # other prefixes are untouched
    with pytest.raises(InjectedFault):
        faulty.list("_log/")  # raised by the call itself, before any next()
    assert [m.key for m in faulty.list("_log/")] == ["_log/1"]


def test_list_after_kinds_drain_then_raise(faulty: FaultyStore) -> None:
    faulty.put("a", b"")
    faulty.inject(Fault("list", "crash_after"))
    with pytest.raises(SimulatedCrash):
        faulty.list()
    faulty.inject(Fault("list", "delay", delay=0.01))
    assert [m.key for m in faulty.list()] == ["a"]
    assert faulty.fired == {"crash_after": 1, "delay": 1}


# --- rules --------------------------------------------------------------------------------


def test_times_limits_firing(faulty: FaultyStore) -> None:
    fault = faulty.inject(Fault("get", "error_before", times=2))
    faulty.put("k", b"v")
    for _ in range(2):
        with pytest.raises(InjectedFault):
            faulty.get("k")
    assert faulty.get("k") == b"v"
    assert fault.fired == 2
    assert fault.exhausted


def test_times_none_is_unlimited(faulty: FaultyStore) -> None:
    fault = faulty.inject(Fault("get", "error_before", times=None))
    for _ in range(25):
        with pytest.raises(InjectedFault):
            faulty.get("k")
    assert fault.fired == 25
    assert not fault.exhausted


def test_times_zero_never_fires(faulty: FaultyStore) -> None:
    faulty.inject(Fault("put", "error_before", times=0))
    faulty.put("k", b"v")
    assert faulty.fired.total() == 0


def test_after_skips_the_first_matching_calls(faulty: FaultyStore, inner: MemoryStore) -> None:
    fault = faulty.inject(Fault("put_if_absent", "error_before", match="^_log/", after=2))
    faulty.put_if_absent("data/a", b"")  # does not match: not counted
    faulty.put_if_absent("_log/1", b"")
    faulty.put_if_absent("_log/2", b"")
    with pytest.raises(InjectedFault):
        faulty.put_if_absent("_log/3", b"")
    faulty.put_if_absent("_log/4", b"")
    assert fault.seen == 4
    assert fault.fired == 1
    assert [m.key for m in inner.list()] == ["_log/1", "_log/2", "_log/4", "data/a"]


def test_match_is_a_regex_searched_in_the_key(faulty: FaultyStore) -> None:
    faulty.inject(Fault("*", "error_before", match=r"\.json$", times=None))
    faulty.put("a.parquet", b"")
    faulty.put("json/a", b"")
    with pytest.raises(InjectedFault):
        faulty.put("_log/1.json", b"")
    with pytest.raises(InjectedFault):
        faulty.get("x/y.json")


def test_star_matches_every_op(faulty: FaultyStore) -> None:
    faulty.inject(Fault("*", "error_before", times=None))
    calls = [
        lambda: faulty.put_if_absent("k", b""),
        lambda: faulty.put("k", b""),
        lambda: faulty.get("k"),
        lambda: faulty.head("k"),
        lambda: faulty.list(),
        lambda: faulty.delete("k"),
        lambda: faulty.open_input("k"),
    ]
    for call in calls:
        with pytest.raises(InjectedFault):
            call()
    assert faulty.fired["error_before"] == 7
    assert sum(faulty.calls.values()) == 7


def test_probability_is_seeded_and_roughly_honoured(inner: MemoryStore) -> None:
    def pattern(seed: int) -> list[bool]:
        store = FaultyStore(
            inner, [Fault("get", "error_before", times=None, probability=0.3)], seed=seed
        )
        inner.put("k", b"v")
        outcome = []
        for _ in range(400):
            try:
                store.get("k")
                outcome.append(False)
            except InjectedFault:
                outcome.append(True)
        return outcome

    first = pattern(1)
    assert first == pattern(1)
    assert first != pattern(2)
    assert 70 <= sum(first) <= 170  # 120 expected


def test_probability_zero_never_fires(faulty: FaultyStore) -> None:
    faulty.inject(Fault("put", "error_before", times=None, probability=0.0))
    for i in range(50):
        faulty.put(f"k{i}", b"")
    assert faulty.fired.total() == 0


def test_first_eligible_fault_fires_and_all_applying_faults_count(faulty: FaultyStore) -> None:
    first = faulty.inject(Fault("get", "error_before", times=1))
    second = faulty.inject(Fault("get", "crash_before", times=1))
    faulty.put("k", b"v")
    with pytest.raises(InjectedFault):
        faulty.get("k")
    with pytest.raises(SimulatedCrash):
        faulty.get("k")
    assert faulty.get("k") == b"v"
    assert (first.seen, first.fired) == (3, 1)
    assert (second.seen, second.fired) == (3, 1)
    assert faulty.fired == {"error_before": 1, "crash_before": 1}
    assert faulty.calls["get"] == 3


def test_clear_removes_rules_but_keeps_counters(faulty: FaultyStore) -> None:
    faulty.inject(Fault("put", "error_before", times=None))
    with pytest.raises(InjectedFault):
        faulty.put("k", b"")
    assert len(faulty.faults) == 1
    faulty.clear()
    assert faulty.faults == []
    faulty.put("k", b"")
    assert faulty.fired["error_before"] == 1
    assert faulty.calls["put"] == 2


def test_faults_given_at_construction(inner: MemoryStore) -> None:
    store = FaultyStore(inner, [Fault("put", "error_before"), Fault("get", "error_before")])
    with pytest.raises(InjectedFault):
        store.put("k", b"")
    store.put("k", b"")
    with pytest.raises(InjectedFault):
        store.get("k")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"op": "nope", "kind": "error_before"},
        {"op": "get", "kind": "explode"},
        {"op": "get", "kind": "error_before", "times": -1},
        {"op": "get", "kind": "error_before", "after": -1},
        {"op": "get", "kind": "error_before", "probability": 1.5},
        {"op": "get", "kind": "delay", "delay": -1.0},
        {"op": "get", "kind": "error_before", "match": "("},
    ],
)
def test_invalid_fault_definitions_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Fault(**kwargs)  # type: ignore[arg-type]


def test_counters_are_exact_under_threads(faulty: FaultyStore) -> None:
    fault = faulty.inject(Fault("put", "error_before", times=5))
    failures: list[int] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        for i in range(50):
            try:
                faulty.put(f"t{n}/{i}", b"")
            except InjectedFault:
                with lock:
                    failures.append(n)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert len(failures) == 5
    assert fault.fired == 5
    assert fault.seen == 400
    assert faulty.calls["put"] == 400
    assert len(list(faulty.list())) == 395
