"""A stateful property test: random operation sequences against a plain in-memory model.

Hypothesis drives a :class:`RuleBasedStateMachine` through random sequences of
create / drop / append / delete / update / overwrite / merge / multi-table and
aborted transactions / time-travel reads (plus compact, restore and vacuum
where the database has them). The model is a dict of lists of rows per
table, and a copy of it per committed version. After every step every
table's rows at the latest version must equal the model's, and a time-travel
read of any recorded version must equal the model's copy of that version.

Checkpoints are written every 3 commits, so time travel goes through them.
Partition values include ``/``, ``..``, ``%2F`` and non-ASCII text, which must
come back exactly as written.
"""

from __future__ import annotations

import copy
import uuid
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import mere
from mere.storage import MemoryStore

try:
    import mere.ops.merge

    HAS_MERGE = True
except ImportError:  # pragma: no cover - merge is built by another issue
    HAS_MERGE = False

NAMES = ("t0", "t1", "t2")
PARTS = ("a", "b/c", "..", "%2F", "é")
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("val", pa.int64()),
        pa.field("p", pa.string()),
    ]
)
Row = dict[str, Any]
Tables = dict[str, list[Row]]

rows_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(0, 12),
            "val": st.one_of(st.none(), st.integers(-5, 5)),
            "p": st.sampled_from(PARTS),
        }
    ),
    min_size=0,
    max_size=5,
)


def canonical(rows: list[Row]) -> list[tuple[Any, ...]]:
    """Rows as a sorted list of tuples (a scan promises no order)."""
    return sorted(((r["id"], r["val"], r["p"]) for r in rows), key=repr)


def below(val: int | None, bound: int) -> bool:
    """SQL ``val < bound``: NULL is not below anything."""
    return val is not None and val < bound


class DatabaseMachine(RuleBasedStateMachine):
    """mere against a dict of lists of rows."""

    def __init__(self) -> None:
        super().__init__()
        self.name = f"stateful-{uuid.uuid4().hex}"
        self.db = mere.connect(f"memory://{self.name}", checkpoint_interval=3)
        self.model: Tables = {}
        self.partitioned: dict[str, bool] = {}
        self.versions: dict[int, Tables] = {self.db.version: {}}
        self.readable_from = 0  # vacuum makes older versions unreadable

    def teardown(self) -> None:
        self.db.close()
        MemoryStore.forget(self.name)

    def committed(self) -> None:
        """Record the model as the state of the database's current version."""
        self.versions[self.db.version] = copy.deepcopy(self.model)

    @initialize(partitioned=st.booleans())
    def start(self, partitioned: bool) -> None:
        """Begin with two tables, so that most steps have something to work on."""
        self.committed()
        self.create_table("t0", partitioned)
        self.create_table("t1", not partitioned)

    # --- tables -----------------------------------------------------------------

    @rule(name=st.sampled_from(NAMES), partitioned=st.booleans())
    def create_table(self, name: str, partitioned: bool) -> None:
        if name in self.model:
            with pytest.raises(mere.TableExists):
                self.db.create_table(name, SCHEMA)
            return
        self.db.create_table(name, SCHEMA, partition_by=["p"] if partitioned else [])
        self.model[name] = []
        self.partitioned[name] = partitioned
        self.committed()

    @rule(name=st.sampled_from(NAMES))
    def drop_table(self, name: str) -> None:
        if name not in self.model:
            with pytest.raises(mere.TableNotFound):
                self.db.drop_table(name)
            return
        self.db.drop_table(name)
        del self.model[name]
        self.committed()

    # --- rows -------------------------------------------------------------------

    def existing(self, data: st.DataObject) -> str | None:
        if not self.model:
            return None
        return data.draw(st.sampled_from(sorted(self.model)))

    @rule(data=st.data(), rows=rows_strategy)
    def append(self, data: st.DataObject, rows: list[Row]) -> None:
        name = self.existing(data)
        if name is None or not rows:
            return
        self.db.table(name).append(rows)
        self.model[name].extend(copy.deepcopy(rows))
        self.committed()

    @rule(data=st.data(), bound=st.integers(-5, 6))
    def delete(self, data: st.DataObject, bound: int) -> None:
        name = self.existing(data)
        if name is None:
            return
        deleted = self.db.table(name).delete(f"val < {bound}")
        kept = [r for r in self.model[name] if not below(r["val"], bound)]
        assert deleted == len(self.model[name]) - len(kept)
        self.model[name] = kept
        self.committed()

    @rule(data=st.data(), top=st.integers(0, 12), literal=st.one_of(st.none(), st.integers(-5, 5)))
    def update(self, data: st.DataObject, top: int, literal: int | None) -> None:
        name = self.existing(data)
        if name is None:
            return
        change: dict[str, Any] = {"val": "val + 1"} if literal is None else {"val": literal}
        updated = self.db.table(name).update(f"id <= {top}", change)
        count = 0
        for r in self.model[name]:
            if r["id"] <= top:
                count += 1
                if literal is not None:
                    r["val"] = literal
                elif r["val"] is not None:
                    r["val"] += 1
        assert updated == count
        self.committed()

    @rule(data=st.data(), rows=rows_strategy, replace_where=st.booleans())
    def overwrite(self, data: st.DataObject, rows: list[Row], replace_where: bool) -> None:
        name = self.existing(data)
        if name is None:
            return
        if replace_where:
            rows = [{**r, "id": r["id"] % 5} for r in rows]
            self.db.table(name).overwrite(rows, "id < 5")
            kept = [r for r in self.model[name] if not r["id"] < 5]
        else:
            self.db.table(name).overwrite(rows)
            kept = []
        self.model[name] = kept + copy.deepcopy(rows)
        self.committed()

    @precondition(lambda self: HAS_MERGE)
    @rule(data=st.data(), source=rows_strategy)
    def merge(self, data: st.DataObject, source: list[Row]) -> None:
        name = self.existing(data)
        unique = list({r["id"]: r for r in source}.values())  # one source row per key
        if name is None or not unique:
            return
        (
            self.db.table(name)
            .merge(pa.Table.from_pylist(unique, schema=SCHEMA), on="t.id = s.id")
            .when_matched_update({"val": "s.val"})
            .when_not_matched_insert({"id": "s.id", "val": "s.val", "p": "s.p"})
            .execute()
        )
        by_id = {r["id"]: r for r in unique}
        matched = set()
        for r in self.model[name]:
            if r["id"] in by_id:
                r["val"] = by_id[r["id"]]["val"]
                matched.add(r["id"])
        self.model[name].extend(copy.deepcopy(r) for i, r in by_id.items() if i not in matched)
        self.committed()

    # --- transactions -------------------------------------------------------------

    @precondition(lambda self: len(self.model) >= 2)
    @rule(data=st.data(), rows=rows_strategy, bound=st.integers(-5, 6))
    def multi_table_transaction(self, data: st.DataObject, rows: list[Row], bound: int) -> None:
        first, second = data.draw(st.permutations(sorted(self.model)))[:2]
        with self.db.transaction() as tx:
            tx.table(first).append(rows)
            tx.table(second).delete(f"val < {bound}")
        self.model[first].extend(copy.deepcopy(rows))
        self.model[second] = [r for r in self.model[second] if not below(r["val"], bound)]
        self.committed()

    @rule(data=st.data(), rows=rows_strategy)
    def aborted_transaction(self, data: st.DataObject, rows: list[Row]) -> None:
        name = self.existing(data)
        if name is None:
            return
        version = self.db.version
        with pytest.raises(RuntimeError), self.db.transaction() as tx:
            tx.table(name).append(rows)
            tx.create_table("ghost", SCHEMA)
            raise RuntimeError("changed my mind")
        assert self.db.version == version

    # --- maintenance (when the database has it) --------------------------------------

    @precondition(lambda self: hasattr(mere.Table, "compact"))
    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        name = self.existing(data)
        if name is None:
            return
        self.db.table(name).compact()  # type: ignore[attr-defined]
        self.committed()

    @precondition(lambda self: hasattr(mere.Database, "restore") and len(self.versions) > 1)
    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(sorted(self.versions)))
        if version < self.readable_from:
            try:
                self.db.restore(version)  # type: ignore[attr-defined]
            except mere.MereError:
                return  # its files may be gone: refusing is fine, a wrong state is not
        else:
            self.db.restore(version)  # type: ignore[attr-defined]
        self.model = copy.deepcopy(self.versions[version])
        self.partitioned = {n: self.partitioned.get(n, False) for n in self.model}
        self.committed()

    @precondition(lambda self: hasattr(mere.Database, "vacuum"))
    @rule()
    def vacuum(self) -> None:
        self.db.vacuum(timedelta(0), force=True)  # type: ignore[attr-defined]
        self.readable_from = self.db.version

    # --- checks -------------------------------------------------------------------

    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(sorted(self.versions)))
        expected = self.versions[version]
        try:
            snapshot = self.db.snapshot(version=version)
            assert snapshot.tables() == sorted(expected)
            for name, rows in expected.items():
                got = snapshot.table(name).scan().to_pylist()
                assert canonical(got) == canonical(rows), (version, name)
        except mere.MereError:
            if version >= self.readable_from:
                raise  # only versions vacuum may have broken may refuse to read

    @invariant()
    def latest_matches_the_model(self) -> None:
        assert self.db.tables() == sorted(self.model)
        for name, rows in self.model.items():
            got = self.db.table(name).scan().to_pylist()
            assert canonical(got) == canonical(rows), name


DatabaseMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDatabase = DatabaseMachine.TestCase
