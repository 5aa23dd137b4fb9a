"""Primary keys: finding keys already present, and telling which keys collide.

A table's primary key is the table property ``mere.primaryKey`` (a JSON list
of column names, docs/format.md §5; see :func:`mere.constraints.primary_key`).
The stage checks every statement's new keys here when the statement ends
(SQL checks constraints per statement, so an update that shifts keys by one
does not trip over itself), and the committer's conflict check asks a
:class:`KeyProbe` whether a winning commit added one of the keys this
transaction inserts.

Reading is pruned by the files' statistics on the first key column (the
range of the keys looked for), and only the key columns are read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.constraints import primary_key
from mere.errors import DuplicateKey, InvalidExpression
from mere.log.actions import AddFile, TableMeta
from mere.snapshot.scan import plan_scan, scan_files
from mere.storage import ObjectStore

#: How many key values an error names.
SHOWN_KEYS = 10


def key_columns(meta: TableMeta) -> list[str]:
    """The table's primary key columns ([] when it has none)."""
    return primary_key(meta.properties)


def describe_keys(keys: pa.Table, limit: int = SHOWN_KEYS) -> str:
    """Up to ``limit`` key values, for a message: ``(1), (2)`` or ``(1, 'a')``."""
    rows = keys.slice(0, limit).to_pylist()
    shown = ", ".join("(" + ", ".join(repr(v) for v in row.values()) + ")" for row in rows)
    more = f" and {keys.num_rows - limit} more" if keys.num_rows > limit else ""
    return shown + more


def _counted(keys: pa.Table) -> pa.Table:
    """Each distinct key value of ``keys`` with ``count_all``, how often it occurs."""
    names = keys.column_names
    if len(names) == 1:  # hash counting, much faster than a group-by for one column
        counts = pc.value_counts(keys.column(0).combine_chunks())
        return pa.table({names[0]: counts.field("values"), "count_all": counts.field("counts")})
    return keys.group_by(names, use_threads=False).aggregate([([], "count_all")])


def duplicates_within(keys: pa.Table) -> pa.Table:
    """The key values that occur more than once in ``keys``."""
    if keys.num_rows < 2:
        return keys.slice(0, 0)
    counted = _counted(keys)
    return counted.filter(pc.greater(counted["count_all"], 1)).select(keys.column_names)


def semi_join(left: pa.Table, right: pa.Table, *, anti: bool = False) -> pa.Table:
    """The rows of ``left`` whose key is (``anti``: is not) among ``right``'s (same columns)."""
    names = left.column_names
    if len(names) == 1:
        inside = pc.is_in(left.column(0), value_set=pc.unique(right.column(0).combine_chunks()))
        return left.filter(pc.invert(inside) if anti else inside)
    kind = "left anti" if anti else "left semi"
    return left.join(right.select(names), names, join_type=kind, use_threads=False)


def intersect(left: pa.Table, right: pa.Table) -> pa.Table:
    """The distinct key values present in both tables (same columns)."""
    if left.num_rows == 0 or right.num_rows == 0:
        return left.slice(0, 0)
    return _counted(semi_join(left, right)).select(left.column_names)


def key_counts(
    store: ObjectStore, meta: TableMeta, files: Sequence[AddFile], keys: pa.Table
) -> pa.Table:
    """How many rows of ``files`` hold each value of ``keys`` (absent values left out)."""
    columns = keys.column_names
    if keys.num_rows == 0 or not files:
        return pa.table({**{c: keys.column(c).slice(0, 0) for c in columns}, "count_all": []})
    plan = plan_scan(meta, columns, _range_filter(columns[0], keys.column(0)))
    found = scan_files(store, plan, plan.select(files)).select(columns).cast(keys.schema)
    return _counted(semi_join(found, keys))


def present_keys(
    store: ObjectStore, meta: TableMeta, files: Sequence[AddFile], keys: pa.Table
) -> pa.Table:
    """The values of ``keys`` that rows of ``files`` hold (a subset of ``keys``)."""
    if keys.num_rows == 0 or not files:
        return keys.slice(0, 0)
    columns = keys.column_names
    plan = plan_scan(meta, columns, _range_filter(columns[0], keys.column(0)))
    candidates = plan.select(files)
    if not candidates:
        return keys.slice(0, 0)
    found = scan_files(store, plan, candidates).select(columns)
    return intersect(keys, found.cast(keys.schema))


def _range_filter(column: str, values: pa.ChunkedArray) -> str | None:
    """``column BETWEEN min AND max`` of the values, as filter text (None if not expressible)."""
    try:
        lo, hi = pc.min_max(values).values()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if not lo.is_valid or not hi.is_valid:
        return None
    col = sqlexpr.Column(column)
    expr = sqlexpr.And(
        (
            sqlexpr.Compare(">=", col, sqlexpr.Literal(lo.as_py(), values.type)),
            sqlexpr.Compare("<=", col, sqlexpr.Literal(hi.as_py(), values.type)),
        )
    )
    try:
        text = sqlexpr.to_sql(expr)
        sqlexpr.parse(text)
    except (InvalidExpression, ValueError, TypeError):
        return None  # a key type whose literals do not read back: no pruning
    return text


def refuse_duplicates(meta: TableMeta, duplicates: pa.Table, where: str) -> None:
    """Raise DuplicateKey for ``duplicates`` (if any), naming up to ten of them."""
    if duplicates.num_rows:
        columns = ", ".join(duplicates.column_names)
        raise DuplicateKey(
            f"duplicate primary key ({columns}) {where} of table {meta.name!r}: "
            f"{describe_keys(duplicates)}",
            keys=duplicates.slice(0, SHOWN_KEYS).to_pylist(),
        )


@dataclass
class KeyProbe:
    """The keys a transaction inserts into one table, to test a winner's added files."""

    store: ObjectStore
    meta: TableMeta
    keys: pa.Table

    def collisions(self, adds: Sequence[AddFile]) -> pa.Table:
        """The inserted keys that rows of ``adds`` also hold."""
        return present_keys(self.store, self.meta, adds, self.keys)


__all__ = [
    "KeyProbe",
    "describe_keys",
    "duplicates_within",
    "intersect",
    "key_columns",
    "present_keys",
    "refuse_duplicates",
    "semi_join",
]
