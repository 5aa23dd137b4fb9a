"""The MERGE builder: :class:`TableMerger` reads the source, binds and checks every clause.

What the user writes (aliases, ``on``, the ``when_*`` clauses) is parsed,
resolved to the target's or the source's columns and bound here, as soon as
it is given, so a mistake raises at the call that made it. The result is one
immutable :class:`~mere.ops.merge.plan.MergePlan` (:meth:`TableMerger.plan`);
:meth:`TableMerger.execute` runs it with the Arrow executor
(:mod:`mere.ops.merge.arrow`), and Spark's MERGE uses the same builder for
its clauses and runs the same plan on its executors.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from mere import expr as sqlexpr
from mere.errors import InvalidArgument, InvalidExpression, SchemaMismatch
from mere.expr.ast import quote_identifier
from mere.names import name_key
from mere.ops.merge.arrow import run_merge
from mere.ops.merge.plan import (
    KeyPair,
    MergeClause,
    MergeMetrics,
    MergePlan,
    Side,
    Value,
    joined_name,
)
from mere.ops.update import literal_value
from mere.schema import storage_type, to_arrow_table
from mere.txn.context import run_statement

if TYPE_CHECKING:
    from mere.txn.transaction import TxTable

_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class TableMerger:
    """A MERGE being built: add ``when_*`` clauses, then :meth:`execute`.

    Made by ``TxTable.merge`` (runs in that transaction) or ``Table.merge``
    (runs in a transaction of its own, committed by :meth:`execute`). Every
    expression is checked as soon as it is given, so a mistake raises at the
    ``merge``/``when_*`` call that made it; nothing is read or written before
    :meth:`execute`.
    """

    def __init__(
        self,
        table: TxTable,
        source: Any,
        on: str,
        *,
        source_alias: str = "s",
        target_alias: str = "t",
        commit: bool = False,
    ) -> None:
        """Check the aliases, the source and the ``on`` condition.

        Args:
            table: the target, seen through the transaction the merge runs in.
            source: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas
                DataFrame, or a list of dicts (read once, here).
            on: the match condition, a SQL conjunction over both aliases.
            commit: :meth:`execute` also commits the table's transaction, and
                aborts it if anything fails (for ``Table.merge``).

        Raises:
            InvalidExpression: a bad condition or alias, or no key equality in ``on``.
            SchemaMismatch: the source cannot be read as a table.
        """
        for what, alias in (("source_alias", source_alias), ("target_alias", target_alias)):
            if not isinstance(alias, str) or not _ALIAS.match(alias):
                raise InvalidExpression(f"{what} must be a plain identifier, not {alias!r}")
        if source_alias.casefold() == target_alias.casefold():
            raise InvalidExpression(
                f"the source and target aliases must differ (both are {source_alias!r})"
            )
        if not isinstance(on, str) or not on.strip():
            raise InvalidExpression("merge needs an 'on' condition, e.g. 't.id = s.id'")
        self._table = table
        self._target_schema: pa.Schema = table.schema
        self._source = _source_table(source, self._target_schema)
        self._aliases: dict[Side, str] = {"target": target_alias, "source": source_alias}
        self._commit = commit
        self._executed = False
        self._matched: list[MergeClause] = []
        self._not_matched: list[MergeClause] = []
        self._names: dict[Side, list[str]] = {
            "target": list(self._target_schema.names),
            "source": list(self._source.column_names),
        }
        self._joined_schema = pa.schema(
            [self._joined_field("target", f) for f in self._target_schema]
            + [self._joined_field("source", f) for f in self._source.schema]
        )
        self._source_schema = pa.schema(
            [self._joined_field("source", f) for f in self._source.schema]
        )
        bound_on, keys, target_only = self._analyse_on(on)
        # The plan without its clauses: what `on` and the schemas give, found once.
        self._base = MergePlan(
            on_text=on,
            on=bound_on,
            keys=tuple(keys),
            target_only=tuple(target_only),
            matched=(),
            not_matched=(),
            target_schema=self._target_schema,
            source_schema=self._source.schema,
            target_alias=target_alias,
            source_alias=source_alias,
        )

    # --- the builder ----------------------------------------------------------------

    def when_matched_update(self, set: Mapping[str, Any], cond: str | None = None) -> TableMerger:
        """Update matched target rows: ``set`` maps target columns to SQL over both aliases
        (``"s.v"``, ``"t.v + s.delta"``; a string constant is written ``"'text'"``) or to
        Python literals. Columns not named keep their value.
        """
        values, texts = self._values(set, ("target", "source"), "when_matched_update")
        self._add(self._matched, MergeClause("update", *self._cond(cond, True), values, texts))
        return self

    def when_matched_update_all(self, cond: str | None = None) -> TableMerger:
        """Update matched target rows, setting every column from the source column of that name.

        Raises:
            SchemaMismatch: the source lacks some of the target's columns.
        """
        set = {name: self._source_column_sql(name) for name in self._target_schema.names}
        values, texts = self._values(set, ("source",), "when_matched_update_all")
        self._add(self._matched, MergeClause("update", *self._cond(cond, True), values, texts))
        return self

    def when_matched_delete(self, cond: str | None = None) -> TableMerger:
        """Delete matched target rows (those for which ``cond`` is TRUE, if given)."""
        self._add(self._matched, MergeClause("delete", *self._cond(cond, True), (), ()))
        return self

    def when_not_matched_insert(
        self, values: Mapping[str, Any], cond: str | None = None
    ) -> TableMerger:
        """Insert a row for each source row that matched nothing.

        ``values`` maps target columns to SQL over the source alias or Python
        literals; columns not named are NULL. ``cond`` may use source columns only.
        """
        bound, texts = self._values(values, ("source",), "when_not_matched_insert")
        clause = MergeClause("insert", *self._cond(cond, False), bound, texts)
        self._add(self._not_matched, clause)
        return self

    def when_not_matched_insert_all(self, cond: str | None = None) -> TableMerger:
        """Insert unmatched source rows, taking every target column from the source by name.

        Raises:
            SchemaMismatch: the source lacks some of the target's columns.
        """
        set = {name: self._source_column_sql(name) for name in self._target_schema.names}
        bound, texts = self._values(set, ("source",), "when_not_matched_insert_all")
        clause = MergeClause("insert", *self._cond(cond, False), bound, texts)
        self._add(self._not_matched, clause)
        return self

    def plan(self) -> MergePlan:
        """The merge as built so far, bound and checked: what an executor runs.

        Raises:
            InvalidArgument: (a ValueError) no clause was given.
        """
        if not self._matched and not self._not_matched:
            raise InvalidArgument(
                "merge needs at least one when_matched_* or when_not_matched_* clause"
            )
        return self._with_clauses()

    def execute(self) -> MergeMetrics:
        """Run the merge (and, for ``Table.merge``, commit it); return what it did.

        Nothing is written unless every clause evaluates without error.

        Raises:
            ValueError: no clause was given, or the merge already ran.
            ConstraintViolation: a target row matches several source rows that
                act on it, or a NULL goes into a NOT NULL column.
            SchemaMismatch: a value does not fit its column.
            InvalidExpression: evaluating an expression failed (overflow, a cast).
            ConflictError: (``Table.merge`` only) a concurrent commit conflicts.
        """
        if self._executed:
            raise InvalidArgument("this merge was already executed; build a new one")
        plan = self.plan()
        self._executed = True
        table, source = self._table, self._source
        return run_statement(
            table.transaction, lambda _: run_merge(plan, source, table), autocommit=self._commit
        )

    def history_parameters(self, metrics: MergeMetrics) -> dict[str, Any]:
        """The MERGE's ``operationParameters`` in the history: its conditions and metrics."""
        return self._with_clauses().history_parameters(metrics)

    def _with_clauses(self) -> MergePlan:
        return dataclasses.replace(
            self._base, matched=tuple(self._matched), not_matched=tuple(self._not_matched)
        )

    # --- checking what the user wrote ---------------------------------------------------

    def _add(self, clauses: list[MergeClause], clause: MergeClause) -> None:
        if clauses and clauses[-1].cond is None:
            kind = "when_matched" if clause.action != "insert" else "when_not_matched"
            raise InvalidArgument(
                f"a {kind}_* clause after one without a condition can never run; "
                "give the earlier clause a condition or drop this one"
            )
        clauses.append(clause)

    def _joined_field(self, side: Side, f: pa.Field) -> pa.Field:
        """The field of the joined table holding column ``f`` of ``side``."""
        return pa.field(joined_name(self._aliases[side], f.name), f.type)

    def _lookup(self, side: Side, name: str) -> str | None:
        """The column of ``side`` that ``name`` means: exact, else a unique case-insensitive match.

        Raises:
            InvalidExpression: several columns match ignoring case.
        """
        names = self._names[side]
        if name in names:
            return name
        found = [n for n in names if n.casefold() == name.casefold()]
        if len(found) > 1:
            raise InvalidExpression(
                f"column {quote_identifier(name)} of the {side} is ambiguous: it matches "
                + ", ".join(quote_identifier(n) for n in found),
                help="write the exact name in double quotes",
            )
        return found[0] if found else None

    def _resolve(self, expr: sqlexpr.Expr, sides: tuple[Side, ...], text: str) -> sqlexpr.Expr:
        """``expr`` with every column renamed to its joined name (``t.x`` / ``s.x``).

        Raises:
            InvalidExpression: an unknown alias or column, an ambiguous bare
                name, or a side ``sides`` does not allow.
        """

        def one(column: sqlexpr.Column) -> sqlexpr.Expr:
            side = self._side_of(column, text)
            if side not in sides:
                raise InvalidExpression(
                    f"{quote_identifier(self._aliases[side])}.{quote_identifier(column.name)} "
                    f"in {text!r} refers to the target, but a WHEN NOT MATCHED clause has no "
                    "target row; use source columns only"
                )
            name = self._lookup(side, column.name)
            assert name is not None
            return sqlexpr.Column(joined_name(self._aliases[side], name))

        return _map_columns(expr, one)

    def _side_of(self, column: sqlexpr.Column, text: str) -> Side:
        """Which table a column reference means (see :mod:`mere.ops.merge`)."""
        target, source = self._aliases["target"], self._aliases["source"]
        if column.qualifier is not None:
            sides: tuple[tuple[Side, str], ...] = (("target", target), ("source", source))
            for side, alias in sides:
                if column.qualifier.casefold() == alias.casefold():
                    if self._lookup(side, column.name) is None:
                        raise InvalidExpression(
                            f"unknown column {quote_identifier(column.name)} of the {side} "
                            f"({alias}) in {text!r}; it has "
                            + ", ".join(quote_identifier(n) for n in self._names[side])
                        )
                    return side
            raise InvalidExpression(
                f"unknown table alias {quote_identifier(column.qualifier)} in {text!r}; "
                f"use {target} for the target and {source} for the source"
            )
        in_target = self._lookup("target", column.name) is not None
        in_source = self._lookup("source", column.name) is not None
        if in_target and in_source:
            raise InvalidExpression(
                f"column {quote_identifier(column.name)} in {text!r} is ambiguous: both the "
                f"target and the source have it; write {target}.{column.name} or "
                f"{source}.{column.name}"
            )
        if in_target:
            return "target"
        if in_source:
            return "source"
        available = [f"{target}.{n}" for n in self._names["target"]]
        available += [f"{source}.{n}" for n in self._names["source"]]
        raise InvalidExpression(
            f"unknown column {quote_identifier(column.name)} in {text!r}; available columns: "
            + ", ".join(available)
        )

    def _bind(self, text: str, sides: tuple[Side, ...]) -> sqlexpr.Expr:
        """Parse, resolve and bind one expression over the joined (or source-only) columns."""
        resolved = self._resolve(sqlexpr.parse(text), sides, text)
        schema = self._joined_schema if "target" in sides else self._source_schema
        return sqlexpr.bind(resolved, schema)

    def _cond(self, cond: str | None, matched: bool) -> tuple[str | None, sqlexpr.Expr | None]:
        if cond is None:
            return None, None
        if not isinstance(cond, str) or not cond.strip():
            raise InvalidExpression("a clause condition must be a non-empty SQL string or None")
        sides: tuple[Side, ...] = ("target", "source") if matched else ("source",)
        bound = self._bind(cond, sides)
        if not sqlexpr.is_boolean(bound):
            raise InvalidExpression(f"clause condition {cond!r} is not a boolean expression")
        return cond, bound

    def _values(
        self, values: Mapping[str, Any], sides: tuple[Side, ...], what: str
    ) -> tuple[tuple[tuple[str, Value], ...], tuple[tuple[str, str], ...]]:
        """Bind an update or insert mapping: (target column, expression or scalar) pairs,
        and (target column, what the user wrote) pairs.
        """
        if not isinstance(values, Mapping) or not values:
            raise InvalidExpression(f"{what} needs at least one column")
        bound: dict[str, Value] = {}
        texts: dict[str, str] = {}
        for key, value in values.items():
            column = self._target_column(key, what)
            if column in bound:
                raise SchemaMismatch(f"{what} sets column {column!r} twice")
            target = self._target_schema.field(column).type
            if isinstance(value, str):
                bound[column] = self._bind(value, sides)
            else:
                bound[column] = literal_value(column, target, value)
            texts[column] = value if isinstance(value, str) else repr(value)
        return tuple(bound.items()), tuple(texts.items())

    def _target_column(self, key: Any, what: str) -> str:
        """The target column an update/insert key names (``x`` or ``t.x``)."""
        if not isinstance(key, str):
            raise SchemaMismatch(f"{what} keys are column names, not {key!r}")
        name = key
        prefix = self._aliases["target"] + "."
        if name.casefold().startswith(prefix.casefold()) and name not in self._names["target"]:
            name = name[len(prefix) :]
        found = self._lookup("target", name)
        if found is None:
            raise SchemaMismatch(
                f"{what} sets unknown column {key!r}; the table has {self._names['target']}"
            )
        return found

    def _source_column_sql(self, target_column: str) -> str:
        """``s."x"`` for the source column named like ``target_column``, or SchemaMismatch."""
        found = self._lookup("source", target_column)
        if found is None:
            missing = [n for n in self._names["target"] if self._lookup("source", n) is None]
            raise SchemaMismatch(
                f"the source has no column(s) {missing} that the target has; "
                "the *_all clauses take every target column from the source by name",
                help="name the columns with when_matched_update / when_not_matched_insert",
            )
        return f"{quote_identifier(self._aliases['source'])}.{quote_identifier(found)}"

    def _analyse_on(self, on: str) -> tuple[sqlexpr.Expr, list[KeyPair], list[sqlexpr.Expr]]:
        """Bind ``on``; find its key equalities and its conjuncts over the target only.

        Returns the bound condition, the key pairs, and the target-only conjuncts
        rewritten over plain target column names (used to skip target files).
        """
        parsed = sqlexpr.parse(on)
        bound = sqlexpr.bind(self._resolve(parsed, ("target", "source"), on), self._joined_schema)
        if not sqlexpr.is_boolean(bound):
            raise InvalidExpression(f"merge condition {on!r} is not a boolean expression")
        conjuncts = parsed.items if isinstance(parsed, sqlexpr.And) else (parsed,)
        keys: list[KeyPair] = []
        target_only: list[sqlexpr.Expr] = []
        for conjunct in conjuncts:
            sides = {self._side_of(c, on) for c in _columns(conjunct)}
            if sides == {"target"}:
                target_only.append(_map_columns(conjunct, self._plain_target))
            key = self._key_pair(conjunct, on)
            if key is not None:
                keys.append(key)
        if not keys:
            raise InvalidExpression(
                f"merge condition {on!r} has no equality between a target and a source column",
                help="write the join keys as t.key = s.key, joined with AND to other conditions",
            )
        return bound, keys, target_only

    def _plain_target(self, column: sqlexpr.Column) -> sqlexpr.Expr:
        name = self._lookup("target", column.name)
        assert name is not None
        return sqlexpr.Column(name)

    def _key_pair(self, conjunct: sqlexpr.Expr, on: str) -> KeyPair | None:
        if not (
            isinstance(conjunct, sqlexpr.Compare)
            and conjunct.op == "="
            and isinstance(conjunct.left, sqlexpr.Column)
            and isinstance(conjunct.right, sqlexpr.Column)
        ):
            return None
        left, right = conjunct.left, conjunct.right
        sides = (self._side_of(left, on), self._side_of(right, on))
        if set(sides) != {"target", "source"}:
            return None
        bound = sqlexpr.bind(self._resolve(conjunct, ("target", "source"), on), self._joined_schema)
        assert isinstance(bound, sqlexpr.Compare)
        target_col = left if sides[0] == "target" else right
        name = self._lookup("target", target_col.name)
        assert name is not None
        if sides[0] == "target":
            return KeyPair(name, bound.left, bound.right)
        return KeyPair(name, bound.right, bound.left)


# --- reading the source and rewriting expressions ------------------------------------


def _source_table(source: Any, target: pa.Schema) -> pa.Table:
    """The merge source as one Arrow table, as stored (dictionary columns decoded, view
    types as plain ones: the kernels a merge uses take no views)."""
    if isinstance(source, list):
        table = _rows_table(source, target)
    elif isinstance(source, pa.Table | pa.RecordBatch | pa.RecordBatchReader) or (
        type(source).__module__.startswith("pandas") and type(source).__name__ == "DataFrame"
    ):
        table = to_arrow_table(source, target)
    else:
        raise SchemaMismatch(
            f"cannot merge from a {type(source).__name__}: pass a pyarrow Table, RecordBatch, "
            "RecordBatchReader, pandas DataFrame or a list of dicts"
        )
    if len(set(table.column_names)) != table.num_columns:
        raise SchemaMismatch(f"the merge source has duplicate column names: {table.column_names}")
    for i, f in enumerate(table.schema):
        stored = storage_type(f.type)  # dictionaries decoded, views as plain types
        if stored != f.type:
            table = table.set_column(i, f.name, table.column(i).cast(stored))
    return table


def _rows_table(rows: list[Any], target: pa.Schema) -> pa.Table:
    """A list of dicts as a table: columns the target has get its type, others are inferred."""
    names: dict[str, None] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise SchemaMismatch(f"source row {i} is a {type(row).__name__}, not a dict")
        for key in row:
            if not isinstance(key, str):
                raise SchemaMismatch(f"source row {i} has a non-string column name {key!r}")
            names.setdefault(key)
    by_key = {name_key(f.name): f for f in target}
    arrays = []
    for name in names:
        field = by_key.get(name_key(name))
        try:
            arrays.append(
                pa.array(
                    [row.get(name) for row in rows], type=None if field is None else field.type
                )
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise SchemaMismatch(f"source column {name!r} cannot be read: {exc}") from None
    return pa.Table.from_arrays(arrays, names=list(names))


def _columns(expr: sqlexpr.Expr) -> list[sqlexpr.Column]:
    return [node for node in expr.walk() if isinstance(node, sqlexpr.Column)]


def _map_columns(expr: sqlexpr.Expr, fn: Callable[[sqlexpr.Column], sqlexpr.Expr]) -> sqlexpr.Expr:
    """A copy of ``expr`` with every Column node replaced by ``fn(node)``."""
    if isinstance(expr, sqlexpr.Column):
        return fn(expr)
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(expr):  # type: ignore[arg-type]
        value = getattr(expr, f.name)
        if isinstance(value, sqlexpr.Expr):
            changes[f.name] = _map_columns(value, fn)
        elif isinstance(value, tuple) and any(isinstance(v, sqlexpr.Expr) for v in value):
            changes[f.name] = tuple(
                _map_columns(v, fn) if isinstance(v, sqlexpr.Expr) else v for v in value
            )
    return dataclasses.replace(expr, **changes) if changes else expr  # type: ignore[type-var]


__all__ = ["TableMerger"]
