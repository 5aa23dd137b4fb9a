"""The workloads' plans: list-append's key generations, and the keys the checker must know."""

from __future__ import annotations

import random

import pytest

from mere.verify import RunConfig, VerifyError
from mere.verify.workloads import VERSIONS_PER_KEY, ValueSource, Workload


def planned_keys(workload: Workload, version: int, count: int = 200) -> set[tuple[str, int]]:
    rng, values = random.Random(1), ValueSource(1)
    return {(op["t"], op["k"]) for _ in range(count) for op in workload.plan(rng, values, version)}


def test_list_append_moves_to_fresh_keys_as_the_log_grows() -> None:
    workload = Workload("list-append", tables=2, keys=3)
    span = workload.generation_versions
    assert span == 2 * 3 * VERSIONS_PER_KEY
    first = planned_keys(workload, 0)
    assert {k for _, k in first} == {0, 1, 2}
    assert planned_keys(workload, span - 1) == first
    second = planned_keys(workload, span)
    assert {k for _, k in second} == {3, 4, 5}
    assert {k for _, k in planned_keys(workload, 5 * span + 7)} == {15, 16, 17}
    # The checker gives every key any plan up to a version may touch an empty first state.
    assert set(workload.keys_of(5 * span + 7)) >= first | second | planned_keys(workload, 5 * span)
    assert len(workload.keys_of(5 * span + 7)) == 2 * 3 * 6


@pytest.mark.parametrize("name", ["register", "bank"])
def test_keyed_workloads_keep_their_keys(name: str) -> None:
    workload = Workload(name, tables=2, keys=3)
    assert workload.generation_versions is None
    assert {k for _, k in planned_keys(workload, 10_000)} == {0, 1, 2}
    assert workload.keys_of(10_000) == workload.keys_of()


@pytest.mark.parametrize("limit", [0.0, -1.0, 86_401.0])
def test_a_time_limit_out_of_range_is_refused(limit: float, tmp_path: object) -> None:
    with pytest.raises(VerifyError, match="time limit"):
        RunConfig(uri=f"{tmp_path}/db", transactions=10, time_limit=limit).validate()
