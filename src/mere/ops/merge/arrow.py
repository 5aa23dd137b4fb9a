"""The Arrow MERGE executor: runs a :class:`~mere.ops.merge.plan.MergePlan` on one machine.

Copy-on-write, as the other operations: only files whose statistics allow one
of the source's key values (an ``IN`` list of up to
:data:`~mere.ops.merge.plan.IN_LIST_LIMIT` keys, else the key range, plus the
target-only conjuncts of ``on``) are read, and only files holding a row that
is updated or deleted are replaced. The read is recorded with that filter, so
concurrent writers of other keys do not conflict.

Everything is computed before anything is staged, and the transaction is
changed only through its stage (:mod:`mere.txn.stage`): a failure leaves it
as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from mere import expr as sqlexpr
from mere.data.reader import read_file
from mere.ops.merge.plan import (
    MergeMetrics,
    MergePlan,
    all_valid,
    as_chunked,
    choose_files,
    first_clause,
    key_filters,
    multiple_matches,
)
from mere.ops.rewrite import match_mask
from mere.txn.keys import canonical_floats

if TYPE_CHECKING:
    from mere.log.actions import AddFile
    from mere.txn.transaction import TxTable


def run_merge(plan: MergePlan, source: pa.Table, table: TxTable) -> MergeMetrics:
    """Merge ``source`` (rows in ``plan.source_schema``) into ``table``; return what it did.

    Call it inside a statement of the table's transaction (``run_statement``),
    which undoes everything staged here if it raises.

    Raises:
        ConstraintViolation: a target row is acted on by several source rows,
            or a NULL goes into a NOT NULL column.
        SchemaMismatch: a value does not fit its column.
        InvalidExpression: evaluating an expression failed (overflow, a cast).
    """
    stage, table_id = table.stage, table.table_id
    schema = plan.target_schema
    prefixed_source = _rename(source, plan.prefixed_source_schema)

    # 1. The target files that may hold a matching row, read with a recorded filter.
    source_keys = [as_chunked(sqlexpr.evaluate(k.source_key, prefixed_source)) for k in plan.keys]
    valid_source = all_valid(source_keys, source.num_rows)
    files: list[AddFile] = []
    if pc.any(valid_source).as_py():
        files = _plan_read(plan, table, source_keys, valid_source)
    store, meta = stage.store, stage.meta(table_id)
    parts = [read_file(store, meta, add, schema.names) for add in files]
    target = pa.concat_tables(parts) if parts else schema.empty_table()
    file_of_row = pa.chunked_array(
        [pa.repeat(pa.scalar(i, pa.int64()), p.num_rows) for i, p in enumerate(parts)],
        type=pa.int64(),
    ).combine_chunks()
    prefixed_target = _rename(target, plan.prefixed_target_schema)

    # 2. Join on the keys, then keep the pairs for which the whole condition is TRUE.
    target_keys = [as_chunked(sqlexpr.evaluate(k.target_key, prefixed_target)) for k in plan.keys]
    source_idx, target_idx = _join(
        source_keys, valid_source, target_keys, all_valid(target_keys, target.num_rows)
    )
    joined = _combine(prefixed_source.take(source_idx), prefixed_target.take(target_idx))
    on_mask = match_mask(plan.on, joined).combine_chunks()
    joined = joined.filter(on_mask)
    source_idx, target_idx = source_idx.filter(on_mask), target_idx.filter(on_mask)

    # 3. WHEN MATCHED: the first clause whose condition holds acts on each pair.
    action = first_clause(plan.matched, joined)
    acted = pc.not_equal(action, -1)
    acted_targets = target_idx.filter(acted)
    deletes = [k for k, clause in enumerate(plan.matched) if clause.action == "delete"]
    deleting = pc.is_in(action, value_set=pa.array(deletes, action.type))
    if len(pc.unique(acted_targets)) != len(acted_targets):
        # Acting on a row twice is ambiguous unless every act deletes it: several updates
        # could disagree (Delta Lake takes only a lone unconditional delete; DuckDB all).
        counts = pc.value_counts(acted_targets)
        several = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
        updating = pc.and_(acted, pc.invert(deleting))
        if pc.any(pc.and_(updating, pc.is_in(target_idx, value_set=several))).as_py():
            raise multiple_matches(plan.on_text)
    deleted = len(pc.unique(target_idx.filter(deleting)))
    updated_parts: list[pa.Table] = []
    for k, clause in enumerate(plan.matched):
        chosen = pc.equal(action, k)
        if clause.action == "delete":
            continue
        pairs = joined.filter(chosen)
        rows = plan.new_rows(clause, pairs, from_target=True)
        updated_parts.append(rows.append_column("__order", target_idx.filter(chosen)))
    updated = sum(p.num_rows for p in updated_parts)

    # 4. WHEN NOT MATCHED: source rows no pair kept.
    matched_sources = pc.unique(source_idx)
    all_sources = _arange(source.num_rows)
    unmatched = pc.invert(pc.is_in(all_sources, value_set=matched_sources))
    insert_action = first_clause(plan.not_matched, prefixed_source, unmatched)
    inserted_parts = [
        plan.new_rows(c, prefixed_source.filter(pc.equal(insert_action, k)), from_target=False)
        for k, c in enumerate(plan.not_matched)
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
    before = len(stage.own_files(table_id))
    if replacement.num_rows:
        stage.write_rows(table_id, replacement)
    if inserted.num_rows:
        stage.write_rows(table_id, inserted)
    added_files = len(stage.own_files(table_id)) - before
    metrics = MergeMetrics(
        num_source_rows=source.num_rows,
        num_target_rows_inserted=inserted.num_rows,
        num_target_rows_updated=updated,
        num_target_rows_deleted=deleted,
        num_target_rows_copied=copied.num_rows,
        num_target_files_added=added_files,
        num_target_files_removed=len(removed_files),
    )
    stage.record_operation("MERGE", table_id, **plan.history_parameters(metrics))
    return metrics


def _plan_read(
    plan: MergePlan, table: TxTable, source_keys: list[pa.ChunkedArray], valid: pa.ChunkedArray
) -> list[AddFile]:
    """Choose (and record as read) the target files that may match a source key.

    The filter is the most precise one that binds: an IN list per key, else
    the key range, else the target-only conjuncts of ``on``, else none.
    """
    exact: list[sqlexpr.Expr] = []
    ranged: list[sqlexpr.Expr] = []
    for key, values in zip(plan.keys, source_keys, strict=True):
        in_list, key_range = key_filters(key.target_column, values.filter(valid))
        exact += [in_list] if in_list is not None else []
        ranged += [key_range] if key_range is not None else []
    stage, table_id = table.stage, table.table_id
    return choose_files(
        plan.file_filters(exact, ranged),
        lambda where: stage.plan_read(table_id, None, where)[1],
    )


def _rename(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.Table.from_arrays(table.columns, schema=schema)


def _combine(left: pa.Table, right: pa.Table) -> pa.Table:
    return pa.Table.from_arrays(
        left.columns + right.columns, names=left.column_names + right.column_names
    )


def _arange(n: int) -> pa.Array:
    """0, 1, ..., n - 1 as int64 (without numpy)."""
    if n == 0:
        return pa.array([], pa.int64())
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)


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
    # The join hashes bits: one zero and one NaN on both sides, as SQL compares them.
    left = canonical_floats(
        pa.table([*source_keys, _arange(len(source_valid))], names=[*names, "__s"]), names
    )
    right = canonical_floats(
        pa.table([*target_keys, _arange(len(target_valid))], names=[*names, "__t"]), names
    )
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


__all__ = ["run_merge"]
