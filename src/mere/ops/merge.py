"""MERGE: upsert a source into a table, with SQL MERGE semantics, as a delta-rs-style builder.

::

    metrics = (
        tx.table("orders")
        .merge(changes, on="t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete(cond="s.op = 'D'")
        .when_matched_update({"amount": "s.amount"})
        .when_not_matched_insert({"id": "s.id", "amount": "s.amount"}, cond="s.op != 'D'")
        .execute()
    )

Semantics (those of SQL MERGE, checked against DuckDB's ``MERGE INTO`` in the tests):

* ``on`` is a conjunction holding at least one equality between a target and a
  source column: those equalities are the join keys (a hash join), the whole
  condition is then evaluated on every joined pair, so extra conjuncts filter
  pairs. A pair matches only when ``on`` is TRUE: NULL keys never match.
* Each source row is *matched* (it joins some target row) or *not matched*.
  For each matched pair the first ``when_matched_*`` clause whose ``cond`` is
  TRUE acts (update or delete); for each not-matched source row the first
  ``when_not_matched_insert`` clause whose ``cond`` is TRUE inserts a row.
  Rows no clause picks are left as they are.
* A target row acted on by several source rows is an error
  (:class:`~mere.errors.ConstraintViolation`) and nothing is written, as in the
  SQL standard and DuckDB. One source row matching several target rows is
  fine: each of them is updated (or deleted).
* Names: ``t.x`` is the target's column, ``s.x`` the source's (with the
  aliases given); a bare ``x`` must exist on one side only. Insert clauses
  see only the source.

Copy-on-write, as the other operations: only files whose statistics allow one
of the source's key values (an ``IN`` list of up to :data:`IN_LIST_LIMIT` keys,
else the key range) are read, and only files holding a row that is updated or
deleted are replaced. The read is recorded with that filter, so concurrent
writers of other keys do not conflict.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere import expr as sqlexpr
from mere.data.reader import read_file
from mere.errors import ConstraintViolation, InvalidArgument, InvalidExpression, SchemaMismatch
from mere.expr.ast import quote_identifier
from mere.names import name_key
from mere.ops.rewrite import match_mask
from mere.ops.update import assign_values, literal_value
from mere.schema import conform, to_arrow_table
from mere.txn.context import run_statement

if TYPE_CHECKING:
    from mere.log.actions import AddFile
    from mere.txn.transaction import TxTable

#: Up to this many distinct source keys, the target read is filtered with an IN list
#: (exact file skipping and conflict detection); beyond it, with the keys' range.
IN_LIST_LIMIT = 1000

_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_Side = Literal["target", "source"]
_Value: TypeAlias = "sqlexpr.Expr | pa.Scalar"


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
class _Clause:
    """One WHEN clause, bound: ``cond`` and expression values over the joined columns."""

    action: Literal["update", "delete", "insert"]
    cond_text: str | None
    cond: sqlexpr.Expr | None
    values: dict[str, _Value]  # target column -> bound expression or scalar
    texts: dict[str, str]  # target column -> what the user wrote (for history)

    def describe(self) -> dict[str, Any]:
        """The clause as recorded in the commit's parameters."""
        out: dict[str, Any] = {"actionType": self.action, "predicate": self.cond_text}
        if self.texts:
            out["values"] = self.texts
        return out


@dataclass(frozen=True)
class _KeyPair:
    """One ``t.a = s.b`` conjunct of ``on``: the join key on each side, in a common type."""

    target_column: str
    target_key: sqlexpr.Expr  # bound over the target's prefixed columns
    source_key: sqlexpr.Expr  # bound over the source's prefixed columns


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
        self._aliases = {"target": target_alias, "source": source_alias}
        self._on_text = on
        self._commit = commit
        self._executed = False
        self._matched: list[_Clause] = []
        self._not_matched: list[_Clause] = []
        self._names: dict[_Side, list[str]] = {
            "target": list(self._target_schema.names),
            "source": list(self._source.column_names),
        }
        self._joined_schema = pa.schema(
            [self._target_side_field(f) for f in self._target_schema]
            + [self._source_side_field(f) for f in self._source.schema]
        )
        self._source_schema = pa.schema([self._source_side_field(f) for f in self._source.schema])
        self._on, self._keys, self._target_only = self._analyse_on(on)

    # --- the builder ----------------------------------------------------------------

    def when_matched_update(self, set: Mapping[str, Any], cond: str | None = None) -> TableMerger:
        """Update matched target rows: ``set`` maps target columns to SQL over both aliases
        (``"s.v"``, ``"t.v + s.delta"``; a string constant is written ``"'text'"``) or to
        Python literals. Columns not named keep their value.
        """
        values, texts = self._values(set, ("target", "source"), "when_matched_update")
        self._add(self._matched, _Clause("update", *self._cond(cond, True), values, texts))
        return self

    def when_matched_update_all(self, cond: str | None = None) -> TableMerger:
        """Update matched target rows, setting every column from the source column of that name.

        Raises:
            SchemaMismatch: the source lacks some of the target's columns.
        """
        set = {name: self._source_column_sql(name) for name in self._target_schema.names}
        values, texts = self._values(set, ("source",), "when_matched_update_all")
        self._add(self._matched, _Clause("update", *self._cond(cond, True), values, texts))
        return self

    def when_matched_delete(self, cond: str | None = None) -> TableMerger:
        """Delete matched target rows (those for which ``cond`` is TRUE, if given)."""
        self._add(self._matched, _Clause("delete", *self._cond(cond, True), {}, {}))
        return self

    def when_not_matched_insert(
        self, values: Mapping[str, Any], cond: str | None = None
    ) -> TableMerger:
        """Insert a row for each source row that matched nothing.

        ``values`` maps target columns to SQL over the source alias or Python
        literals; columns not named are NULL. ``cond`` may use source columns only.
        """
        bound, texts = self._values(values, ("source",), "when_not_matched_insert")
        self._add(self._not_matched, _Clause("insert", *self._cond(cond, False), bound, texts))
        return self

    def when_not_matched_insert_all(self, cond: str | None = None) -> TableMerger:
        """Insert unmatched source rows, taking every target column from the source by name.

        Raises:
            SchemaMismatch: the source lacks some of the target's columns.
        """
        set = {name: self._source_column_sql(name) for name in self._target_schema.names}
        bound, texts = self._values(set, ("source",), "when_not_matched_insert_all")
        self._add(self._not_matched, _Clause("insert", *self._cond(cond, False), bound, texts))
        return self

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
        if not self._matched and not self._not_matched:
            raise InvalidArgument(
                "merge needs at least one when_matched_* or when_not_matched_* clause"
            )
        self._executed = True
        return run_statement(
            self._table.transaction, lambda _: self._run(), autocommit=self._commit
        )

    # --- checking what the user wrote ---------------------------------------------------

    def _add(self, clauses: list[_Clause], clause: _Clause) -> None:
        if clauses and clauses[-1].cond is None:
            kind = "when_matched" if clause.action != "insert" else "when_not_matched"
            raise ValueError(
                f"a {kind}_* clause after one without a condition can never run; "
                "give the earlier clause a condition or drop this one"
            )
        clauses.append(clause)

    def _target_side_field(self, f: pa.Field) -> pa.Field:
        """The field of the joined table holding target column ``f``."""
        return pa.field(f"{self._aliases['target']}.{f.name}", f.type)

    def _source_side_field(self, f: pa.Field) -> pa.Field:
        """The field of the joined table holding source column ``f``."""
        return pa.field(f"{self._aliases['source']}.{f.name}", f.type)

    def _joined_name(self, side: _Side, name: str) -> str:
        return f"{self._aliases[side]}.{name}"

    def _lookup(self, side: _Side, name: str) -> str | None:
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

    def _resolve(self, expr: sqlexpr.Expr, sides: tuple[_Side, ...], text: str) -> sqlexpr.Expr:
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
            return sqlexpr.Column(self._joined_name(side, name))

        return _map_columns(expr, one)

    def _side_of(self, column: sqlexpr.Column, text: str) -> _Side:
        """Which table a column reference means (see the module docstring)."""
        target, source = self._aliases["target"], self._aliases["source"]
        if column.qualifier is not None:
            sides: tuple[tuple[_Side, str], ...] = (("target", target), ("source", source))
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

    def _bind(self, text: str, sides: tuple[_Side, ...]) -> sqlexpr.Expr:
        """Parse, resolve and bind one expression over the joined (or source-only) columns."""
        resolved = self._resolve(sqlexpr.parse(text), sides, text)
        schema = self._joined_schema if "target" in sides else self._source_schema
        return sqlexpr.bind(resolved, schema)

    def _cond(self, cond: str | None, matched: bool) -> tuple[str | None, sqlexpr.Expr | None]:
        if cond is None:
            return None, None
        if not isinstance(cond, str) or not cond.strip():
            raise InvalidExpression("a clause condition must be a non-empty SQL string or None")
        sides: tuple[_Side, ...] = ("target", "source") if matched else ("source",)
        bound = self._bind(cond, sides)
        if not sqlexpr.is_boolean(bound):
            raise InvalidExpression(f"clause condition {cond!r} is not a boolean expression")
        return cond, bound

    def _values(
        self, values: Mapping[str, Any], sides: tuple[_Side, ...], what: str
    ) -> tuple[dict[str, _Value], dict[str, str]]:
        """Bind an update or insert mapping: target column -> expression or scalar."""
        if not isinstance(values, Mapping) or not values:
            raise InvalidExpression(f"{what} needs at least one column")
        bound: dict[str, _Value] = {}
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
        return bound, texts

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

    def _analyse_on(self, on: str) -> tuple[sqlexpr.Expr, list[_KeyPair], list[sqlexpr.Expr]]:
        """Bind ``on``; find its key equalities and its conjuncts over the target only.

        Returns the bound condition, the key pairs, and the target-only conjuncts
        rewritten over plain target column names (used to skip target files).
        """
        parsed = sqlexpr.parse(on)
        bound = sqlexpr.bind(self._resolve(parsed, ("target", "source"), on), self._joined_schema)
        if not sqlexpr.is_boolean(bound):
            raise InvalidExpression(f"merge condition {on!r} is not a boolean expression")
        conjuncts = parsed.items if isinstance(parsed, sqlexpr.And) else (parsed,)
        keys: list[_KeyPair] = []
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

    def _key_pair(self, conjunct: sqlexpr.Expr, on: str) -> _KeyPair | None:
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
            return _KeyPair(name, bound.left, bound.right)
        return _KeyPair(name, bound.right, bound.left)

    # --- running it -------------------------------------------------------------------

    def _run(self) -> MergeMetrics:
        stage, table_id = self._table.stage, self._table.table_id
        schema = self._target_schema
        source = self._source
        prefixed_source = _rename(source, self._source_schema)

        # 1. The target files that may hold a matching row, read with a recorded filter.
        source_keys = [
            _as_chunked(sqlexpr.evaluate(k.source_key, prefixed_source)) for k in self._keys
        ]
        valid_source = _all_valid(source_keys, source.num_rows)
        files: list[AddFile] = []
        if pc.any(valid_source).as_py():
            files = self._plan_read(source_keys, valid_source)
        store, meta = stage.store, stage.meta(table_id)
        parts = [read_file(store, meta, add, schema.names) for add in files]
        target = pa.concat_tables(parts) if parts else schema.empty_table()
        file_of_row = pa.chunked_array(
            [pa.repeat(pa.scalar(i, pa.int64()), p.num_rows) for i, p in enumerate(parts)],
            type=pa.int64(),
        ).combine_chunks()
        prefixed_target = _rename(target, pa.schema([self._target_side_field(f) for f in schema]))

        # 2. Join on the keys, then keep the pairs for which the whole condition is TRUE.
        target_keys = [
            _as_chunked(sqlexpr.evaluate(k.target_key, prefixed_target)) for k in self._keys
        ]
        source_idx, target_idx = _join(
            source_keys, valid_source, target_keys, _all_valid(target_keys, target.num_rows)
        )
        joined = _combine(prefixed_source.take(source_idx), prefixed_target.take(target_idx))
        on_mask = match_mask(self._on, joined).combine_chunks()
        joined = joined.filter(on_mask)
        source_idx, target_idx = source_idx.filter(on_mask), target_idx.filter(on_mask)

        # 3. WHEN MATCHED: the first clause whose condition holds acts on each pair.
        action = _first_clause(self._matched, joined)
        acted = pc.not_equal(action, -1)
        acted_targets = target_idx.filter(acted)
        if len(pc.unique(acted_targets)) != len(acted_targets):
            raise multiple_matches(self._on_text)
        updated_parts: list[pa.Table] = []
        deleted = 0
        for k, clause in enumerate(self._matched):
            chosen = pc.equal(action, k)
            if clause.action == "delete":
                deleted += pc.sum(chosen).as_py() or 0
                continue
            pairs = joined.filter(chosen)
            rows = self._new_rows(clause, pairs, from_target=True)
            updated_parts.append(rows.append_column("__order", target_idx.filter(chosen)))
        updated = sum(p.num_rows for p in updated_parts)

        # 4. WHEN NOT MATCHED: source rows no pair kept.
        matched_sources = pc.unique(source_idx)
        all_sources = _arange(source.num_rows)
        unmatched = pc.invert(pc.is_in(all_sources, value_set=matched_sources))
        insert_action = _first_clause(self._not_matched, prefixed_source, unmatched)
        inserted_parts = [
            self._new_rows(c, prefixed_source.filter(pc.equal(insert_action, k)), from_target=False)
            for k, c in enumerate(self._not_matched)
        ]
        inserted = pa.concat_tables(inserted_parts) if inserted_parts else schema.empty_table()

        # 5. Files holding an updated or deleted row are replaced by their new content.
        rewritten_files = pc.unique(file_of_row.take(acted_targets))
        in_rewritten = pc.is_in(file_of_row, value_set=rewritten_files)
        untouched = pc.invert(pc.is_in(_arange(target.num_rows), value_set=acted_targets))
        keep = pc.and_(in_rewritten, untouched)
        copied = target.filter(keep).append_column("__order", _arange(target.num_rows).filter(keep))
        replacement = pa.concat_tables([copied, *updated_parts]).sort_by("__order")
        replacement = replacement.drop_columns(["__order"])

        # 6. Write (nothing above wrote anything, so an error left the transaction as it was).
        removed_files = [files[i] for i in rewritten_files.to_pylist()]
        stage.remove_files(table_id, removed_files)
        before = len(stage.live_files(table_id)[1])
        if replacement.num_rows:
            stage.write_rows(table_id, replacement)
        if inserted.num_rows:
            stage.write_rows(table_id, inserted)
        added_files = len(stage.live_files(table_id)[1]) - before
        metrics = MergeMetrics(
            num_source_rows=source.num_rows,
            num_target_rows_inserted=inserted.num_rows,
            num_target_rows_updated=updated,
            num_target_rows_deleted=deleted,
            num_target_rows_copied=copied.num_rows,
            num_target_files_added=added_files,
            num_target_files_removed=len(removed_files),
        )
        stage.record_operation("MERGE", table_id, **self.history_parameters(metrics))
        return metrics

    def history_parameters(self, metrics: MergeMetrics) -> dict[str, Any]:
        """The MERGE's ``operationParameters`` in the history: its conditions and metrics."""
        return {
            "predicate": self._on_text,
            "matchedPredicates": [c.describe() for c in self._matched],
            "notMatchedPredicates": [c.describe() for c in self._not_matched],
            "numSourceRows": metrics.num_source_rows,
            "numTargetRowsInserted": metrics.num_target_rows_inserted,
            "numTargetRowsUpdated": metrics.num_target_rows_updated,
            "numTargetRowsDeleted": metrics.num_target_rows_deleted,
            "numTargetRowsCopied": metrics.num_target_rows_copied,
            "numTargetFilesAdded": metrics.num_target_files_added,
            "numTargetFilesRemoved": metrics.num_target_files_removed,
        }

    def _plan_read(
        self, source_keys: list[pa.ChunkedArray], valid: pa.ChunkedArray
    ) -> list[AddFile]:
        """Choose (and record as read) the target files that may match a source key.

        The filter is the most precise one that binds: an IN list per key, else
        the key range, else the target-only conjuncts of ``on``, else none.
        """
        exact: list[sqlexpr.Expr] = []
        ranged: list[sqlexpr.Expr] = []
        for key, values in zip(self._keys, source_keys, strict=True):
            in_list, key_range = _key_filters(key.target_column, values.filter(valid))
            exact += [in_list] if in_list is not None else []
            ranged += [key_range] if key_range is not None else []
        return self._plan_filtered(exact, ranged)

    def _plan_filtered(
        self, exact: list[sqlexpr.Expr], ranged: list[sqlexpr.Expr]
    ) -> list[AddFile]:
        """Choose (and record as read) the files, given the key filters of :meth:`_plan_read`.

        ``exact`` holds each key's IN list (or range), ``ranged`` each key's range.
        """
        stage, table_id = self._table.stage, self._table.table_id
        candidates = [exact + self._target_only, ranged + self._target_only, self._target_only]
        for parts in candidates:
            if not parts:
                continue
            text = sqlexpr.to_sql(parts[0] if len(parts) == 1 else sqlexpr.And(tuple(parts)))
            try:
                return stage.plan_read(table_id, None, text)[1]
            except InvalidExpression:
                continue  # e.g. a key type whose literals the parser cannot read back
        return stage.plan_read(table_id, None, None)[1]

    def _new_rows(self, clause: _Clause, rows: pa.Table, *, from_target: bool) -> pa.Table:
        """The target rows an update (over joined pairs) or insert (over source rows) makes."""
        columns = []
        for f in self._target_schema:
            value = clause.values.get(f.name)
            if value is None:
                if from_target:
                    columns.append(rows.column(self._joined_name("target", f.name)))
                else:
                    columns.append(pa.chunked_array([pa.nulls(rows.num_rows, f.type)]))
            elif isinstance(value, pa.Scalar):
                columns.append(pa.chunked_array([pa.repeat(value, rows.num_rows)]))
            else:
                columns.append(assign_values(f.name, f.type, sqlexpr.evaluate(value, rows)))
        table = pa.Table.from_arrays(columns, names=self._target_schema.names)
        what = "updated rows" if from_target else "inserted rows"
        return conform(table, self._target_schema, what=what)


# --- helpers --------------------------------------------------------------------------


def multiple_matches(on: str) -> ConstraintViolation:
    """The error of a target row that several source rows act on."""
    return ConstraintViolation(
        f"a target row matches several source rows on {on!r} and a "
        "WHEN MATCHED clause acts on it more than once (as in SQL MERGE); nothing "
        "was written",
        help="deduplicate the source, or make the 'on' condition unique per target row",
    )


def _source_table(source: Any, target: pa.Schema) -> pa.Table:
    """The merge source as one Arrow table (dictionary columns decoded)."""
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
        if pat.is_dictionary(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(f.type.value_type))
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


def _rename(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(table.columns, schema=schema)


def _combine(left: pa.Table, right: pa.Table) -> pa.Table:
    return pa.Table.from_arrays(
        left.columns + right.columns, names=left.column_names + right.column_names
    )


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


def _as_chunked(values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])


def _arange(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64 (without numpy)."""
    if n == 0:
        return pa.array([], pa.int64())
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)


def _all_valid(keys: list[pa.ChunkedArray], rows: int) -> pa.ChunkedArray:
    """True where every key is non-null and not NaN (such keys never compare equal)."""
    valid = pa.chunked_array([pa.repeat(pa.scalar(True), rows)], type=pa.bool_())
    for key in keys:
        ok = pc.is_valid(key)
        if pat.is_floating(key.type):
            ok = pc.and_(ok, pc.invert(pc.fill_null(pc.is_nan(key), True)))
        valid = pc.and_(valid, ok)
    return valid


def _join(
    source_keys: list[pa.ChunkedArray],
    source_valid: pa.ChunkedArray,
    target_keys: list[pa.ChunkedArray],
    target_valid: pa.ChunkedArray,
) -> tuple[pa.Array, pa.Array]:
    """Hash-join row numbers on the keys; returns (source rows, target rows) of each pair.

    Only the keys and row numbers go through the join, so any column type rides along.
    """
    names = [f"k{i}" for i in range(len(source_keys))]
    left = pa.table([*source_keys, _arange(len(source_valid))], names=[*names, "__s"])
    right = pa.table([*target_keys, _arange(len(target_valid))], names=[*names, "__t"])
    pairs = left.filter(source_valid).join(
        right.filter(target_valid), keys=names, join_type="inner"
    )
    if pairs.num_rows == 0:
        empty = pa.array([], pa.int64())
        return empty, empty
    pairs = pairs.sort_by([("__t", "ascending"), ("__s", "ascending")])
    return (
        pairs.column("__s").combine_chunks(),
        pairs.column("__t").combine_chunks(),
    )


def _first_clause(
    clauses: list[_Clause], rows: pa.Table, eligible: pa.Array | None = None
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


def _key_filters(
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


__all__ = ["IN_LIST_LIMIT", "MergeMetrics", "TableMerger"]
