"""A MERGE, bound and checked: the immutable plan its executors run.

:class:`~mere.ops.merge.builder.TableMerger` parses and checks what the user
wrote and builds one :class:`MergePlan`; the executors — the Arrow one
(:mod:`mere.ops.merge.arrow`) and Spark's (:mod:`mere.spark._merge`) — read
only the plan's public fields and the pure functions here, so both compute
the same rows, choose the same target files and record the same history.

A plan holds no transaction and no source rows: it is picklable, and Spark
ships it to its executors inside the tasks' closures.

Names in a plan: the *joined* columns are ``<alias>.<column>`` (``t.x`` for
the target's ``x``, ``s.x`` for the source's). Every bound expression (the
``on`` condition, the clause conditions and values, the join keys) reads
those columns; the target-only conjuncts of ``on`` read the target's plain
names (they filter the target's files).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere import expr as sqlexpr
from mere.errors import ConstraintViolation, InvalidExpression
from mere.ops.rewrite import match_mask
from mere.ops.update import assign_values
from mere.schema import conform

if TYPE_CHECKING:
    from mere.log.actions import AddFile

#: Up to this many distinct source keys, the target read is filtered with an IN list
#: (exact file skipping and conflict detection); beyond it, with the keys' range.
IN_LIST_LIMIT = 1000

Side: TypeAlias = Literal["target", "source"]
#: A bound value of an update or insert: an expression over the joined columns, or a constant.
Value: TypeAlias = "sqlexpr.Expr | pa.Scalar"


@dataclass(frozen=True)
class MergeMetrics:
    """What a MERGE did.

    ``num_target_rows_copied`` counts unchanged rows rewritten only because they
    shared a data file with an updated or deleted row (the cost of copy-on-write).
    """

    num_source_rows: int
    num_target_rows_inserted: int
    num_target_rows_updated: int
    num_target_rows_deleted: int
    num_target_rows_copied: int
    num_target_files_added: int
    num_target_files_removed: int


@dataclass(frozen=True)
class MergeClause:
    """One WHEN clause, bound: ``cond`` and the values over the joined columns.

    ``values`` pairs target columns with a bound expression or a scalar (in
    the order given); ``texts`` pairs them with what the user wrote (for the
    history). A delete has neither.
    """

    action: Literal["update", "delete", "insert"]
    cond_text: str | None
    cond: sqlexpr.Expr | None
    values: tuple[tuple[str, Value], ...]
    texts: tuple[tuple[str, str], ...]

    def value(self, column: str) -> Value | None:
        """The value the clause gives target ``column``, or None when it names no value."""
        for name, value in self.values:
            if name == column:
                return value
        return None

    def describe(self) -> dict[str, Any]:
        """The clause as recorded in the commit's parameters."""
        out: dict[str, Any] = {"actionType": self.action, "predicate": self.cond_text}
        if self.texts:
            out["values"] = dict(self.texts)
        return out


@dataclass(frozen=True)
class KeyPair:
    """One ``t.a = s.b`` conjunct of ``on``: the join key on each side, in a common type."""

    target_column: str  # the target's plain column name
    target_key: sqlexpr.Expr  # bound over the target's joined columns
    source_key: sqlexpr.Expr  # bound over the source's joined columns


@dataclass(frozen=True)
class MergePlan:
    """Everything an executor needs to run one MERGE (built by ``TableMerger.plan()``).

    Attributes:
        on_text: the ``on`` condition as written.
        on: ``on`` bound over :attr:`joined_schema`; a pair matches where it is TRUE.
        keys: the key equalities of ``on`` (at least one): the hash-join keys.
        target_only: the conjuncts of ``on`` over the target alone, on plain
            target names (they narrow the target files read).
        matched: the WHEN MATCHED clauses (update or delete), in order.
        not_matched: the WHEN NOT MATCHED clauses (insert), in order.
        target_schema: the target table's schema.
        source_schema: the source's schema, with the source's own column names.
        target_alias, source_alias: the aliases the expressions were written with.
    """

    on_text: str
    on: sqlexpr.Expr
    keys: tuple[KeyPair, ...]
    target_only: tuple[sqlexpr.Expr, ...]
    matched: tuple[MergeClause, ...]
    not_matched: tuple[MergeClause, ...]
    target_schema: pa.Schema
    source_schema: pa.Schema
    target_alias: str
    source_alias: str

    # --- names and schemas --------------------------------------------------------

    def joined_name(self, side: Side, name: str) -> str:
        """The joined column holding column ``name`` of ``side`` (``t.x``, ``s.x``)."""
        return joined_name(self.target_alias if side == "target" else self.source_alias, name)

    @property
    def prefixed_target_schema(self) -> pa.Schema:
        """The target's columns under their joined names."""
        return pa.schema(
            [pa.field(self.joined_name("target", f.name), f.type) for f in self.target_schema]
        )

    @property
    def prefixed_source_schema(self) -> pa.Schema:
        """The source's columns under their joined names (what insert clauses read)."""
        return pa.schema(
            [pa.field(self.joined_name("source", f.name), f.type) for f in self.source_schema]
        )

    @property
    def joined_schema(self) -> pa.Schema:
        """A joined pair: the target's columns, then the source's (what matched clauses read)."""
        return pa.schema(list(self.prefixed_target_schema) + list(self.prefixed_source_schema))

    @property
    def key_types(self) -> tuple[pa.DataType, ...]:
        """The common type of each join key."""
        return tuple(k.source_key.type for k in self.keys)

    # --- what the clauses do --------------------------------------------------------

    def new_rows(self, clause: MergeClause, rows: pa.Table, *, from_target: bool) -> pa.Table:
        """The target rows an update (over joined pairs) or an insert (over source rows) makes.

        ``rows`` are joined pairs (``from_target``: columns an update does
        not set keep the target's value) or prefixed source rows (columns an
        insert does not set are NULL). The result is conformed to the target
        schema.

        Raises:
            SchemaMismatch: a value does not fit its column.
            InvalidExpression: evaluating an expression failed (overflow, a cast).
        """
        columns = []
        for f in self.target_schema:
            value = clause.value(f.name)
            if value is None:
                if from_target:
                    columns.append(rows.column(self.joined_name("target", f.name)))
                else:
                    columns.append(pa.chunked_array([pa.nulls(rows.num_rows, f.type)]))
            elif isinstance(value, pa.Scalar):
                columns.append(pa.chunked_array([pa.repeat(value, rows.num_rows)]))
            else:
                columns.append(assign_values(f.name, f.type, sqlexpr.evaluate(value, rows)))
        table = pa.Table.from_arrays(columns, names=self.target_schema.names)
        what = "updated rows" if from_target else "inserted rows"
        return conform(table, self.target_schema, what=what)

    # --- which target files to read ---------------------------------------------------

    def file_filters(
        self, exact: Sequence[sqlexpr.Expr], ranged: Sequence[sqlexpr.Expr]
    ) -> list[sqlexpr.Expr]:
        """The filters on the target's files to try, most precise first.

        ``exact`` holds each key's IN list (or range), ``ranged`` each key's range
        (see :func:`key_filters`); both are joined with the target-only conjuncts
        of ``on``, then those conjuncts alone are tried. When none of them can
        be used, every file is read (see :func:`choose_files`).
        """
        target_only = list(self.target_only)
        candidates = [[*exact, *target_only], [*ranged, *target_only], target_only]
        return [
            parts[0] if len(parts) == 1 else sqlexpr.And(tuple(parts))
            for parts in candidates
            if parts
        ]

    # --- the history --------------------------------------------------------------

    def history_parameters(self, metrics: MergeMetrics) -> dict[str, Any]:
        """The MERGE's ``operationParameters`` in the history: its conditions and metrics."""
        return {
            "predicate": self.on_text,
            "matchedPredicates": [c.describe() for c in self.matched],
            "notMatchedPredicates": [c.describe() for c in self.not_matched],
            "numSourceRows": metrics.num_source_rows,
            "numTargetRowsInserted": metrics.num_target_rows_inserted,
            "numTargetRowsUpdated": metrics.num_target_rows_updated,
            "numTargetRowsDeleted": metrics.num_target_rows_deleted,
            "numTargetRowsCopied": metrics.num_target_rows_copied,
            "numTargetFilesAdded": metrics.num_target_files_added,
            "numTargetFilesRemoved": metrics.num_target_files_removed,
        }


# --- pure functions the executors share ---------------------------------------------


def joined_name(alias: str, name: str) -> str:
    """The joined column holding column ``name`` of the table aliased ``alias``."""
    return f"{alias}.{name}"


def first_clause(
    clauses: Sequence[MergeClause], rows: pa.Table, eligible: pa.Array | None = None
) -> pa.Array:
    """For each row, the index of the first clause whose condition is TRUE, else -1.

    Rows where ``eligible`` is False get -1 whatever the clauses say.
    """
    action = pa.repeat(pa.scalar(-1, pa.int64()), rows.num_rows)
    open_rows = eligible if eligible is not None else pa.repeat(pa.scalar(True), rows.num_rows)
    for k, clause in enumerate(clauses):
        chosen = pc.and_(open_rows, match_mask(clause.cond, rows).combine_chunks())
        action = pc.if_else(chosen, pa.scalar(k, pa.int64()), action)
        open_rows = pc.and_(open_rows, pc.invert(chosen))
    return action


def multiple_matches(on: str) -> ConstraintViolation:
    """The error of a target row that several source rows act on."""
    return ConstraintViolation(
        f"a target row matches several source rows on {on!r} and a "
        "WHEN MATCHED clause acts on it more than once (as in SQL MERGE); nothing "
        "was written",
        help="deduplicate the source, or make the 'on' condition unique per target row",
    )


def as_chunked(values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    """``values`` as a ChunkedArray (what ``sqlexpr.evaluate`` gives may be either)."""
    return values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])


def all_valid(keys: Sequence[pa.ChunkedArray], rows: int) -> pa.ChunkedArray:
    """True where every key is non-null (NULL equals nothing; NaN equals NaN, as in
    mere's filters and DuckDB's and Spark's joins)."""
    valid = pa.chunked_array([pa.repeat(pa.scalar(True), rows)], type=pa.bool_())
    for key in keys:
        valid = pc.and_(valid, pc.is_valid(key))
    return valid


def key_filters(
    column: str, values: pa.ChunkedArray
) -> tuple[sqlexpr.Expr | None, sqlexpr.Expr | None]:
    """File filters on one target key column, from the valid source keys (in the key type).

    Returns ``(column IN (...), column >= min AND column <= max)``; the first is the
    range when there are more than :data:`IN_LIST_LIMIT` keys, and either is None
    when the type has no usable literals or order.
    """
    if not _exact_literals(values.type):
        return None, None
    col = sqlexpr.Column(column)
    distinct = pc.unique(values)
    key_range: sqlexpr.Expr | None
    try:
        lo, hi = pc.min_max(distinct).values()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        key_range = None
    else:
        if pat.is_floating(values.type) and pc.any(pc.is_nan(distinct)).as_py():
            hi = pa.scalar(math.nan, values.type)  # NaN sorts above every number (min_max skips it)
        key_range = sqlexpr.And(
            (
                sqlexpr.Compare(">=", col, sqlexpr.Literal(lo.as_py(), values.type)),
                sqlexpr.Compare("<=", col, sqlexpr.Literal(hi.as_py(), values.type)),
            )
        )
    if len(distinct) > IN_LIST_LIMIT:
        return key_range, key_range
    literals = tuple(sqlexpr.Literal(v, values.type) for v in distinct.to_pylist())
    return sqlexpr.In(col, literals), key_range


def choose_files(
    filters: Sequence[sqlexpr.Expr], plan_read: Callable[[str | None], list[AddFile]]
) -> list[AddFile]:
    """The files ``plan_read`` selects (and records as read) with the first usable filter.

    ``filters`` come from :meth:`MergePlan.file_filters`; a filter ``plan_read``
    refuses (e.g. a key type whose literals the parser cannot read back) is
    skipped, and with none left every file is read (``plan_read(None)``).
    """
    for where in filters:
        text = sqlexpr.to_sql(where)
        try:
            return plan_read(text)
        except InvalidExpression:
            continue
    return plan_read(None)


def _exact_literals(type_: pa.DataType) -> bool:
    """Whether every value of ``type_`` prints as SQL that reads back as the same value.

    Nanosecond timestamps do not (``as_py`` drops the nanoseconds), and a filter
    built from a rounded key could skip the file holding the real one.
    """
    if pat.is_timestamp(type_):
        return bool(type_.unit != "ns")
    return any(
        check(type_)
        for check in (
            pat.is_integer,
            pat.is_floating,
            pat.is_decimal,
            pat.is_string,
            pat.is_large_string,
            pat.is_boolean,
            pat.is_date,
        )
    )


__all__ = [
    "IN_LIST_LIMIT",
    "KeyPair",
    "MergeClause",
    "MergeMetrics",
    "MergePlan",
    "Side",
    "Value",
    "all_valid",
    "as_chunked",
    "choose_files",
    "first_clause",
    "joined_name",
    "key_filters",
    "multiple_matches",
]
