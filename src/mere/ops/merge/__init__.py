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
  SQL standard, Spark and Delta Lake (DuckDB keeps the last source row),
  unless every act on it deletes it: deleting a row twice is no ambiguity.
  One source row matching several target rows is fine: each of them is
  updated (or deleted).
* Names: ``t.x`` is the target's column, ``s.x`` the source's (with the
  aliases given); a bare ``x`` must exist on one side only. Insert clauses
  see only the source.

Copy-on-write, as the other operations: only files whose statistics allow one
of the source's key values (an ``IN`` list of up to :data:`IN_LIST_LIMIT` keys,
else the key range) are read, and only files holding a row that is updated or
deleted are replaced. The read is recorded with that filter, so concurrent
writers of other keys do not conflict.

The package, in three parts, so that one bound MERGE runs on either engine:

* :mod:`~mere.ops.merge.builder` — :class:`TableMerger`, the builder: reads
  the source, parses, resolves and binds each clause as it is given, and
  builds the :class:`MergePlan` (:meth:`TableMerger.plan`).
* :mod:`~mere.ops.merge.plan` — :class:`MergePlan`, immutable and picklable:
  the bound clauses, join keys, ``on`` condition, schemas and aliases, with
  the pure functions both executors share (new rows for a clause, file
  filters from the source keys, the history's parameters).
* :mod:`~mere.ops.merge.arrow` — the one-machine executor
  (:func:`~mere.ops.merge.arrow.run_merge`), staging only through the
  transaction's stage. Spark's executor is :mod:`mere.spark._merge`.
"""

from mere.ops.merge.arrow import run_merge
from mere.ops.merge.builder import TableMerger
from mere.ops.merge.plan import (
    IN_LIST_LIMIT,
    KeyPair,
    MergeClause,
    MergeMetrics,
    MergePlan,
    all_valid,
    as_chunked,
    choose_files,
    first_clause,
    key_filters,
    multiple_matches,
)

__all__ = [
    "IN_LIST_LIMIT",
    "KeyPair",
    "MergeClause",
    "MergeMetrics",
    "MergePlan",
    "TableMerger",
    "all_valid",
    "as_chunked",
    "choose_files",
    "first_clause",
    "key_filters",
    "multiple_matches",
    "run_merge",
]
