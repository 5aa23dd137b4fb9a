"""The workloads a verify run drives: list-append, register and bank.

Every workload works on tables whose rows are keyed by an integer ``k`` and
carry an integer value ``v`` that is unique in the whole run (a client
``p`` writes ``p * VALUE_SPACE + counter``). Unique values are what let the
checker tell, for every value a read returned, which transaction wrote it
(Elle's "recoverability"). The *state* of a key is the tuple of ``v`` of its
rows:

* **list-append**: each key is a set of rows; a transaction reads keys with
  filtered scans (``k = K``) and appends rows with fresh values to others. The
  state of a key is its values in append order (commit order, then the order
  within the commit). mere's scans promise no row order, so the checker compares
  a read with a state as a multiset and takes the order from the log. Like
  Elle's ``max-writes-per-key``, the workload moves on to fresh keys as the log
  grows (every :attr:`Workload.generation_versions` versions), so a key collects
  a bounded number of appends and a read stays cheap however long the run is.
* **register**: each key is one row, created by the setup. A transaction reads
  keys, writes them (``update``; an ``append`` when the key was deleted) and
  deletes them (``delete``), sometimes writing a key twice (so that a read of
  the first, intermediate value is recognisable: G1b).
* **upsert**: like register, on tables with the primary key ``k``: a write is
  an upsert (``append(..., on_duplicate="update")``), never an update-or-append.
  Whatever the isolation level, no version may hold a key twice (the
  checker's **duplicate-key**), however the clients race.
* **bank**: accounts in two tables, one row each, with a ``balance`` and the
  tag ``v`` of the last transfer that touched them. A transfer reads two
  accounts and moves an amount with two ``update``s; an audit reads every
  account. The total of the balances must be the same at every version.

Register and bank tables are partitioned by ``k`` so that each key has its own
files: conflicts are then per key, as a key-value store's would be.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere.verify.history import MicroOp

if TYPE_CHECKING:
    from mere.database import Database
    from mere.txn.transaction import Transaction

#: Values of client ``p`` are ``p * VALUE_SPACE + i``; process 0 is the setup.
VALUE_SPACE = 10_000_000
#: List-append moves to fresh keys after about this many versions per key in use.
VERSIONS_PER_KEY = 10
INITIAL_BALANCE = 100
WORKLOADS = ("list-append", "register", "bank", "upsert")


class ValueSource:
    """Unique values for one client process."""

    def __init__(self, process: int) -> None:
        self._next = process * VALUE_SPACE

    def __call__(self) -> int:
        self._next += 1
        return self._next


@dataclass(frozen=True)
class Workload:
    """What a run does: its tables, setup, transactions and the shape of a key's state."""

    name: str
    tables: int
    keys: int
    max_ops: int = 4

    def __post_init__(self) -> None:
        if self.name not in WORKLOADS:
            raise ValueError(f"unknown workload {self.name!r}; expected one of {WORKLOADS}")
        if self.tables < 1 or self.keys < 1:
            raise ValueError("a workload needs at least one table and one key")
        if self.name == "bank" and self.tables * self.keys < 2:
            raise ValueError("the bank workload needs at least two accounts")

    # --- shape -----------------------------------------------------------------

    @property
    def table_names(self) -> list[str]:
        prefix = {"list-append": "la", "register": "reg", "bank": "bank", "upsert": "ups"}[
            self.name
        ]
        count = 2 if self.name == "bank" else self.tables
        return [f"verify_{prefix}{i}" for i in range(count)]

    @property
    def ordered(self) -> bool:
        """True when a key's state is a list in append order (list-append)."""
        return self.name == "list-append"

    @property
    def keyed(self) -> bool:
        """True when the tables have the primary key ``k`` (upsert)."""
        return self.name == "upsert"

    @property
    def partitioned(self) -> bool:
        return self.name != "list-append"

    def schema(self) -> pa.Schema:
        fields = [pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64())]
        if self.name == "bank":
            fields.append(pa.field("balance", pa.int64()))
        return pa.schema(fields)

    @property
    def generation_versions(self) -> int | None:
        """List-append's key generation length in log versions (None: the keys never change).

        Keys in use at version ``V`` are ``g * keys .. g * keys + keys - 1`` with
        ``g = V // generation_versions``. With about one append per commit, a key
        collects some ``VERSIONS_PER_KEY`` appends before the workload moves on.
        """
        return self.tables * self.keys * VERSIONS_PER_KEY if self.ordered else None

    def keys_of(self, upto_version: int = 0) -> list[tuple[str, int]]:
        """Every key a transaction planned at a version up to ``upto_version`` may touch."""
        span = self.generation_versions
        count = self.keys * (upto_version // span + 1) if span else self.keys
        return [(t, k) for t in self.table_names for k in range(count)]

    # --- setup -------------------------------------------------------------------

    def setup(self, db: Database) -> int:
        """Create the tables and the initial rows in one commit; return its version.

        The commit records app transaction ``verify/p0`` version 0, so the
        checker sees it as the setup transaction ``p0:0``.
        """
        values = ValueSource(0)
        with db.transaction(isolation="serializable") as tx:
            for name in self.table_names:
                tx.create_table(
                    name,
                    self.schema(),
                    partition_by=["k"] if self.partitioned else [],
                    primary_key=["k"] if self.keyed else None,
                )
                if self.name == "list-append":
                    continue
                for k in range(self.keys):
                    row: dict[str, Any] = {"k": k, "v": values()}
                    if self.name == "bank":
                        row["balance"] = INITIAL_BALANCE
                    tx.table(name).append([row])
            tx.set_app_transaction("verify/p0", 0)
        assert tx.commit_version is not None
        return tx.commit_version

    def initial_total(self) -> int:
        """The bank's total balance (0 for the other workloads)."""
        return INITIAL_BALANCE * 2 * self.keys if self.name == "bank" else 0

    # --- planning ------------------------------------------------------------------

    def plan(
        self, rng: random.Random, values: Callable[[], int], version: int = 0
    ) -> list[MicroOp]:
        """A random transaction's micro-operations, with the values it will write.

        ``version`` is the latest version the client knows of; it picks
        list-append's key generation.
        """
        if self.name == "list-append":
            return self._plan_list_append(rng, values, version)
        if self.name in ("register", "upsert"):
            return self._plan_register(rng, values)
        return self._plan_bank(rng, values)

    def _key(self, rng: random.Random, version: int = 0) -> tuple[str, int]:
        span = self.generation_versions
        base = (version // span) * self.keys if span else 0
        return rng.choice(self.table_names), base + rng.randrange(self.keys)

    def _plan_list_append(
        self, rng: random.Random, values: Callable[[], int], version: int
    ) -> list[MicroOp]:
        ops: list[MicroOp] = []
        for _ in range(rng.randint(1, self.max_ops)):
            t, k = self._key(rng, version)
            if rng.random() < 0.5:
                ops.append({"f": "r", "t": t, "k": k, "v": None})
            else:
                ops.append({"f": "append", "t": t, "k": k, "v": values()})
        return ops

    def _plan_register(self, rng: random.Random, values: Callable[[], int]) -> list[MicroOp]:
        ops: list[MicroOp] = []
        for _ in range(rng.randint(1, self.max_ops)):
            t, k = self._key(rng)
            roll = rng.random()
            if roll < 0.45:
                ops.append({"f": "r", "t": t, "k": k, "v": None})
            elif roll < 0.9:
                ops.append({"f": "w", "t": t, "k": k, "v": values()})
                if rng.random() < 0.15:  # write it twice: the first value is intermediate
                    ops.append({"f": "w", "t": t, "k": k, "v": values()})
            else:
                ops.append({"f": "d", "t": t, "k": k, "v": None})
        return ops

    def _plan_bank(self, rng: random.Random, values: Callable[[], int]) -> list[MicroOp]:
        accounts = self.keys_of()
        if rng.random() < 0.2:  # an audit: read every account
            return [
                {"f": "r", "t": t, "k": k, "v": None, "bal": None, "audit": True}
                for t, k in accounts
            ]
        (t1, k1), (t2, k2) = rng.sample(accounts, 2)
        amount = rng.randint(1, 5)
        return [
            {"f": "r", "t": t1, "k": k1, "v": None, "bal": None},
            {"f": "r", "t": t2, "k": k2, "v": None, "bal": None},
            {"f": "w", "t": t1, "k": k1, "v": values(), "delta": -amount},
            {"f": "w", "t": t2, "k": k2, "v": values(), "delta": amount},
        ]

    # --- execution -------------------------------------------------------------------

    def execute(self, tx: Transaction, plan: list[MicroOp]) -> list[MicroOp]:
        """Run the planned micro-operations in ``tx``; return them with what reads returned."""
        if plan and plan[0].get("audit"):
            return self._audit(tx, plan)
        done: list[MicroOp] = []
        for op in plan:
            table = tx.table(op["t"])
            k = int(op["k"])
            f = op["f"]
            if f == "r":
                columns = ["v", "balance"] if self.name == "bank" else ["v"]
                rows = table.scan(columns=columns, filter=f"k = {k}")
                out = {**op, "v": rows.column("v").to_pylist()}
                if self.name == "bank":
                    out["bal"] = rows.column("balance").to_pylist()
                done.append(out)
            elif f == "append":
                table.append([{"k": k, "v": op["v"]}])
                done.append(op)
            elif f == "w":
                if self.keyed:
                    table.append([{"k": k, "v": op["v"]}], on_duplicate="update")
                elif self.name == "bank":
                    table.update(
                        f"k = {k}", {"v": op["v"], "balance": f"balance + ({op['delta']})"}
                    )
                elif table.update(f"k = {k}", {"v": op["v"]}) == 0:
                    table.append([{"k": k, "v": op["v"]}])
                done.append(op)
            elif f == "d":
                table.delete(f"k = {k}")
                done.append(op)
            else:
                raise ValueError(f"unknown micro-operation {f!r}")
        return done

    def _audit(self, tx: Transaction, plan: list[MicroOp]) -> list[MicroOp]:
        """Read every account with one full scan per table."""
        seen: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
        for name in self.table_names:
            rows = tx.table(name).scan(columns=["k", "v", "balance"]).to_pylist()
            for row in rows:
                tags, balances = seen.setdefault((name, row["k"]), ([], []))
                tags.append(row["v"])
                balances.append(row["balance"])
        done = []
        for op in plan:
            tags, balances = seen.get((op["t"], op["k"]), ([], []))
            done.append({**op, "v": tags, "bal": balances})
        return done
