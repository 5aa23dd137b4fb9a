"""Checking a database's whole history after a run: dense log, every version readable.

Used by the fault and crash tests. Rows at a version are computed from the
table's data files at that version, each file read once (data files are
immutable and uniquely named), so checking every version stays linear.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

import mere
from mere.log.keys import LOG_PREFIX, parse_log_key
from mere.storage import ObjectStore


def commit_versions(store: ObjectStore) -> list[int]:
    """The versions of every commit file in the log, in order."""
    versions = []
    for meta in store.list(LOG_PREFIX):
        parsed = parse_log_key(meta.key)
        if parsed is not None and parsed[1] == "commit":
            versions.append(parsed[0])
    return versions


def assert_dense(store: ObjectStore) -> int:
    """Assert the log holds versions 0..N with no gap; return N."""
    versions = commit_versions(store)
    assert versions, "the log is empty"
    assert versions == list(range(versions[-1] + 1)), f"gaps in the log: {versions}"
    return versions[-1]


class Rows:
    """A table's rows at any version, reading each data file once."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._files: dict[tuple[str, str], list[dict[str, Any]]] = {}

    def of(self, table: mere.TableSnapshot) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for add in table.files:
            key = (table.id, add.path)
            if key not in self._files:
                source = self.store.open_input(f"tables/{table.id}/{add.path}")
                try:
                    self._files[key] = pq.read_table(source).to_pylist()
                finally:
                    source.close()
            rows.extend(self._files[key])
        return rows

    def column(self, table: mere.TableSnapshot, name: str) -> list[Any]:
        return [row[name] for row in self.of(table)]


@dataclass
class Outcomes:
    """What writers were told: acknowledged (value -> version), unknown, failed."""

    acked: dict[str, int]
    unknown: set[str]
    failed: set[str]

    @classmethod
    def empty(cls) -> Outcomes:
        return cls({}, set(), set())

    def merge(self, other: Outcomes) -> None:
        self.acked.update(other.acked)
        self.unknown |= other.unknown
        self.failed |= other.failed


def check_history(
    store: ObjectStore, table: str, column: str, outcomes: Outcomes
) -> dict[str, int]:
    """Check a log of single-table appends against what the writers were told.

    * the log is dense and every version opens;
    * no value appears twice at any version (no commit applied twice);
    * each acknowledged value first appears at exactly the version its writer
      was told, and stays (no acknowledged commit lost, no silent overwrite);
    * values whose commit failed definitely never appear; values whose
      outcome was unknown appear at most once.

    Returns counts for the test report.
    """
    latest = assert_dense(store)
    db = mere.connect(store, create=False)
    rows = Rows(store)
    first_seen: dict[str, int] = {}
    for version in range(latest + 1):
        snapshot = db.snapshot(version=version)
        if table not in snapshot.tables():
            continue
        values = rows.column(snapshot.table(table), column)
        counts = Counter(values)
        duplicated = {v: n for v, n in counts.items() if n > 1}
        assert not duplicated, f"applied twice at version {version}: {duplicated}"
        for value in values:
            first_seen.setdefault(value, version)
        missing = {v for v, at in first_seen.items() if v not in counts}
        assert not missing, f"rows disappeared at version {version}: {missing}"
    for value, version in outcomes.acked.items():
        assert value in first_seen, f"acknowledged commit lost: {value} (version {version})"
        assert first_seen[value] == version, (
            f"{value} was acknowledged at version {version} but appeared at {first_seen[value]}"
        )
    assert len(set(outcomes.acked.values())) == len(outcomes.acked), "two acks, one version"
    resurrected = outcomes.failed & set(first_seen)
    assert not resurrected, f"failed commits are visible: {resurrected}"
    latest_rows = db.snapshot(version=latest).table(table).scan()  # reads every live file
    assert latest_rows.num_rows == len(first_seen)
    return {
        "versions": latest + 1,
        "acked": len(outcomes.acked),
        "unknown": len(outcomes.unknown),
        "unknown_landed": len(outcomes.unknown & set(first_seen)),
        "failed": len(outcomes.failed),
    }


def tables_agree(store: ObjectStore, tables: Iterable[str], column: str) -> int:
    """Assert that at every version the given tables hold the same values; return N."""
    latest = assert_dense(store)
    db = mere.connect(store, create=False)
    rows = Rows(store)
    names = list(tables)
    for version in range(latest + 1):
        snapshot = db.snapshot(version=version)
        present = [name for name in names if name in snapshot.tables()]
        if not present:
            continue
        assert present == names, f"version {version} has only {present}"
        seen = [Counter(rows.column(snapshot.table(name), column)) for name in names]
        for name, counts in zip(names, seen, strict=True):
            assert all(n == 1 for n in counts.values()), f"duplicates in {name} at {version}"
        assert all(s == seen[0] for s in seen), f"tables disagree at version {version}"
    return latest
