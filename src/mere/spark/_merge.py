"""MERGE with Spark: the source is a DataFrame, the join runs on the executors.

The builder and its semantics are those of the one-machine MERGE
(:class:`mere.ops.merge.TableMerger`, which binds and checks every
expression here too, against the DataFrame's schema, and builds the
:class:`~mere.ops.merge.MergePlan` this module runs: its public fields and
functions are all the executors see, shipped to them pickled). What changes
is where the work happens:

1. Executors evaluate the source's join keys with mere's evaluator (the
   key's common type, NULL for keys that never match: NULL or NaN) and
   summarise them per partition; the driver turns the summaries into the
   same file filter as the one-machine MERGE (an IN list of up to
   :data:`~mere.ops.merge.IN_LIST_LIMIT` keys, else the key range, plus the
   conjuncts of ``on`` over the target only) and records the read in the
   transaction, so conflict detection is exactly that of ``TxTable.merge``.
2. Executors read the candidate files with mere's reader (each row tagged
   with its file and row number), Spark joins them with the source on the
   keys, and executors evaluate ``on`` and the WHEN clauses on the pairs with
   mere's evaluator: results equal the one-machine MERGE's.
3. A Spark aggregate finds target rows acted on more than once, not all
   deletes (a :class:`~mere.errors.ConstraintViolation` before anything is written), and
   the files holding an updated or deleted row. Only those files are
   rewritten (their untouched rows plus the updated ones, in file order),
   together with the inserted rows, by the executor write path of
   :func:`mere.spark.write`; the driver removes the rewritten files and adds
   the new ones in the transaction.

The source is materialised once (persisted, each row numbered), so the key
summary and the join see the same rows even if the DataFrame is not
deterministic. Rows cross Spark in Spark's types, so a table with
nanosecond timestamps is refused (Spark keeps microseconds).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructField, StructType

from mere import expr as sqlexpr
from mere.data.reader import iter_file
from mere.errors import InvalidArgument, SchemaMismatch
from mere.log.actions import AddFile, TableMeta
from mere.ops.merge import (
    IN_LIST_LIMIT,
    MergeMetrics,
    MergePlan,
    TableMerger,
    all_valid,
    as_chunked,
    choose_files,
    first_clause,
    key_filters,
    multiple_matches,
)
from mere.ops.rewrite import match_mask
from mere.spark import _core
from mere.spark._files import WriteTarget, add_from_json, add_to_json, delete_files
from mere.spark._types import (
    spark_arrow_schema,
    spark_schema,
    spark_type,
    table_schema_from_spark,
    to_spark_table,
)
from mere.spark._write import check_uri, run_write_job
from mere.storage import open_store
from mere.txn.context import run_statement
from mere.txn.transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from mere.database import Database

_IDS = ["__sid", "__file", "__row", "__action"]


@dataclass(frozen=True)
class _Job:
    """What the executors need: the merge's plan (no transaction, no rows) and the layouts.

    Rows cross Spark under positional names: ``__t<i>`` for target columns,
    ``__s<i>`` for source columns, ``__sk<j>``/``__tk<j>`` for the join keys.
    """

    uri: str
    table: TableMeta
    plan: MergePlan
    source_schema: pa.Schema  # the DataFrame's schema in Arrow types (original names)

    @property
    def key_types(self) -> tuple[pa.DataType, ...]:
        return self.plan.key_types

    @property
    def target_wire(self) -> pa.Schema:
        return _wire(self.table.schema, "__t")

    @property
    def source_wire(self) -> pa.Schema:
        return _wire(self.source_schema, "__s")

    def key_wire(self, prefix: str) -> pa.Schema:
        keys = pa.schema([pa.field(f"{prefix}{j}", t) for j, t in enumerate(self.key_types)])
        return _wire(keys, prefix)


def _wire(schema: pa.Schema, prefix: str) -> pa.Schema:
    """The Arrow schema Spark exchanges for ``schema``, columns named ``<prefix><i>``."""
    struct = StructType(
        [StructField(f"{prefix}{i}", spark_type(f.type), True) for i, f in enumerate(schema)]
    )
    return spark_arrow_schema(struct)


def _struct(schema: pa.Schema) -> StructType:
    return StructType([StructField(f.name, spark_type(f.type), True) for f in schema])


def _decode(table: pa.Table, wire: pa.Schema, schema: pa.Schema) -> pa.Table:
    """The ``wire`` columns of ``table`` back in ``schema`` (names and exact types)."""
    columns = [table.column(w.name).cast(f.type) for w, f in zip(wire, schema, strict=True)]
    return pa.Table.from_arrays(columns, schema=schema)


def _encode(table: pa.Table, wire: pa.Schema) -> list[pa.ChunkedArray]:
    """``table``'s columns (in wire order) in the types Spark expects."""
    return list(to_spark_table(table, wire).columns)


def _keys(job: _Job, exprs: list[sqlexpr.Expr], rows: pa.Table) -> list[pa.ChunkedArray]:
    """The join keys of ``rows``, NULL where some key of the row never matches (NULL, NaN)."""
    keys = [
        as_chunked(sqlexpr.evaluate(e, rows)).cast(t)
        for e, t in zip(exprs, job.key_types, strict=True)
    ]
    valid = all_valid(keys, rows.num_rows)
    return [pc.if_else(valid, k, pa.scalar(None, k.type)) for k in keys]


def _check_spark_exact(schema: pa.Schema) -> None:
    def nanos(t: pa.DataType) -> bool:
        if pat.is_timestamp(t) or pat.is_duration(t):
            return bool(t.unit == "ns")
        return any(nanos(t.field(i).type) for i in range(t.num_fields))

    for f in schema:
        if nanos(f.type):
            raise SchemaMismatch(
                f"column {f.name!r} holds nanoseconds, which rows lose on their way through "
                "Spark (it keeps microseconds)",
                help="merge into this table on one machine with TxTable.merge",
            )


# --- executor tasks ---------------------------------------------------------------------


def _prepare_source(job: _Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Source rows under wire names, with their join keys evaluated by mere (``__sk<j>``)."""
    plan = job.plan
    names = job.source_schema.names
    source_wire, key_wire = job.source_wire, job.key_wire("__sk")
    out = pa.schema(list(source_wire) + list(key_wire))
    for batch in batches:
        raw = pa.Table.from_batches([batch])
        table = pa.Table.from_arrays(raw.columns, names=names).cast(job.source_schema)
        prefixed = pa.Table.from_arrays(table.columns, schema=plan.prefixed_source_schema)
        keys = _keys(job, [k.source_key for k in plan.keys], prefixed)
        columns = _encode(table, source_wire)
        columns += _encode(pa.Table.from_arrays(keys, schema=_key_schema(job)), key_wire)
        yield from pa.Table.from_arrays(columns, schema=out).to_batches()


def _key_schema(job: _Job) -> pa.Schema:
    return pa.schema([pa.field(f"k{j}", t) for j, t in enumerate(job.key_types)])


def _summarize(job: _Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One partition's row count and valid source keys: per key, (overflowed, distinct
    values or min/max). The values are None when a key overflowed and has no order.
    """
    key_wire = job.key_wire("__sk")
    state: list[tuple[bool, pa.Array | None]] = [(False, pa.array([], t)) for t in job.key_types]
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        keys = _decode(pa.Table.from_batches([batch]), key_wire, _key_schema(job))
        valid = all_valid(list(keys.columns), keys.num_rows)
        for j, column in enumerate(keys.columns):
            overflowed, seen = state[j]
            if seen is None:
                continue
            values = pa.concat_arrays([seen, *column.filter(valid).chunks])
            values = values if overflowed else pc.unique(values)
            if overflowed or len(values) > IN_LIST_LIMIT:
                try:
                    lo, hi = pc.min_max(values).values()
                    state[j] = (True, pa.array([lo.as_py(), hi.as_py()], values.type))
                except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
                    state[j] = (True, None)
            else:
                state[j] = (False, values)
    yield pa.RecordBatch.from_pydict(
        {"summary": [pickle.dumps(state)], "rows": [rows]},
        pa.schema([pa.field("summary", pa.binary()), pa.field("rows", pa.int64())]),
    )


def _read_target(
    job: _Job, files: list[tuple[int, str]], batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """The rows of ``files[i]`` for each ``i`` of the batches: wire columns, keys, and
    (file number, row number); ``files`` holds (file number, add action as JSON).
    """
    plan, table = job.plan, job.table
    store = open_store(job.uri)
    target_wire, key_wire = job.target_wire, job.key_wire("__tk")
    prefixed_schema = plan.prefixed_target_schema
    out = _target_rows_schema(job)
    for batch in batches:
        for i in batch.column(0).to_pylist():
            number, text = files[i]
            start = 0
            for piece in iter_file(store, table, add_from_json(text), table.schema.names):
                prefixed = pa.Table.from_arrays(piece.columns, schema=prefixed_schema)
                keys = _keys(job, [k.target_key for k in plan.keys], prefixed)
                n = piece.num_rows
                columns = _encode(piece, target_wire)
                columns += _encode(pa.Table.from_arrays(keys, schema=_key_schema(job)), key_wire)
                columns += [
                    pa.chunked_array([pa.repeat(pa.scalar(number, pa.int64()), n)]),
                    pa.chunked_array([pa.array(range(start, start + n), pa.int64())]),
                ]
                start += n
                yield from pa.Table.from_arrays(columns, schema=out).to_batches()


def _target_rows_schema(job: _Job) -> pa.Schema:
    """Target rows on the wire: columns, keys, file number and row number in the file."""
    ids = [pa.field("__file", pa.int64()), pa.field("__row", pa.int64())]
    return pa.schema(list(job.target_wire) + list(job.key_wire("__tk")) + ids)


def _match(job: _Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Joined pairs for which ``on`` is TRUE: ids, the acting clause (-1: none), new rows."""
    plan = job.plan
    target_wire, source_wire = job.target_wire, job.source_wire
    prefixed_target, prefixed_source = plan.prefixed_target_schema, plan.prefixed_source_schema
    joined_schema = plan.joined_schema
    out = _pairs_schema(job)
    for batch in batches:
        rows = pa.Table.from_batches([batch])
        target = _decode(rows, target_wire, prefixed_target)
        source = _decode(rows, source_wire, prefixed_source)
        joined = pa.Table.from_arrays(target.columns + source.columns, schema=joined_schema)
        on = match_mask(plan.on, joined).combine_chunks()
        joined = joined.filter(on)
        ids = rows.select(["__sid", "__file", "__row"]).filter(on)
        action = first_clause(plan.matched, joined)
        ids = ids.append_column("__action", action)
        updates = _updates(plan)
        others = ids.filter(pc.invert(pc.is_in(action, pa.array(updates, pa.int64()))))
        nulls = [pa.nulls(others.num_rows, f.type) for f in target_wire]
        pieces = [pa.Table.from_arrays(list(others.columns) + nulls, schema=out)]
        for k in updates:
            chosen = pc.equal(action, k)
            new = plan.new_rows(plan.matched[k], joined.filter(chosen), from_target=True)
            columns = list(ids.filter(chosen).columns) + _encode(new, target_wire)
            pieces.append(pa.Table.from_arrays(columns, schema=out))
        yield from pa.concat_tables(pieces).to_batches()


def _updates(plan: MergePlan) -> list[int]:
    """The positions of the WHEN MATCHED clauses that update (the others delete)."""
    return [k for k, c in enumerate(plan.matched) if c.action == "update"]


def _pairs_schema(job: _Job) -> pa.Schema:
    ids = [pa.field(name, pa.int64()) for name in _IDS]
    return pa.schema(ids + list(job.target_wire))


def _insert(job: _Job, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows WHEN NOT MATCHED clauses insert for unmatched source rows (target names)."""
    plan = job.plan
    out = spark_arrow_schema(spark_schema(job.table.schema))
    prefixed_source = plan.prefixed_source_schema
    for batch in batches:
        source = _decode(pa.Table.from_batches([batch]), job.source_wire, prefixed_source)
        action = first_clause(plan.not_matched, source)
        for k, clause in enumerate(plan.not_matched):
            new = plan.new_rows(clause, source.filter(pc.equal(action, k)), from_target=False)
            if new.num_rows:
                yield from to_spark_table(new, out).to_batches()


# --- the driver -------------------------------------------------------------------------


class SparkMerger:
    """A MERGE from a Spark DataFrame being built: add ``when_*`` clauses, then :meth:`execute`.

    Made by :func:`mere.spark.merge`. The clauses are those of
    :class:`~mere.ops.merge.TableMerger` (same arguments, same checks, made as
    soon as a clause is given); :meth:`execute` runs the merge with Spark.
    With ``commit``, the merge commits ``tx`` on its own; ``owner`` is a
    database opened for it, closed once the merge has run (or failed).
    """

    def __init__(
        self,
        spark: SparkSession,
        tx: Transaction,
        table: str,
        source: DataFrame,
        on: str,
        *,
        source_alias: str = "s",
        target_alias: str = "t",
        commit: bool = False,
        owner: Database | None = None,
    ) -> None:
        if not isinstance(source, DataFrame):
            raise SchemaMismatch(
                f"mere.spark.merge needs a Spark DataFrame as the source, not a "
                f"{type(source).__name__}",
                help="merge Arrow or pandas data with db.table(name).merge(...)",
            )
        self._spark = spark
        self._tx = tx
        self._name = table
        self._uri = check_uri(_core.tx_uri(tx))
        self._meta = _core.tx_table_meta(tx, table)
        spark_schema(self._meta.schema)  # a table Spark cannot hold fails here
        _check_spark_exact(self._meta.schema)
        self._source = source
        self._source_schema = table_schema_from_spark(source.schema)
        self._table = tx.table(table)
        self._merger = TableMerger(
            self._table,
            self._source_schema.empty_table(),
            on,
            source_alias=source_alias,
            target_alias=target_alias,
        )
        self._commit = commit
        self._owner = owner
        self._executed = False

    def when_matched_update(self, set: Mapping[str, Any], cond: str | None = None) -> SparkMerger:
        """Update matched target rows: ``set`` maps target columns to SQL or literals."""
        self._merger.when_matched_update(set, cond)
        return self

    def when_matched_update_all(self, cond: str | None = None) -> SparkMerger:
        """Set every target column from the source column of that name (matched rows)."""
        self._merger.when_matched_update_all(cond)
        return self

    def when_matched_delete(self, cond: str | None = None) -> SparkMerger:
        """Delete matched target rows (those for which ``cond`` is TRUE, if given)."""
        self._merger.when_matched_delete(cond)
        return self

    def when_not_matched_insert(
        self, values: Mapping[str, Any], cond: str | None = None
    ) -> SparkMerger:
        """Insert a row for each source row that matched nothing (see ``TableMerger``)."""
        self._merger.when_not_matched_insert(values, cond)
        return self

    def when_not_matched_insert_all(self, cond: str | None = None) -> SparkMerger:
        """Insert unmatched source rows, every target column from the source by name."""
        self._merger.when_not_matched_insert_all(cond)
        return self

    def execute(self) -> MergeMetrics:
        """Run the merge with Spark (and, when given a URI, commit it); return what it did.

        Raises:
            ValueError: no clause was given, or the merge already ran.
            ConstraintViolation: a target row matches several source rows that
                act on it (nothing is written).
            ConflictError: (own transaction only) a concurrent commit conflicts.
            pyspark.errors.PySparkException: an executor failed evaluating or
                writing rows (a lossy value, a NULL into a NOT NULL column);
                the job's files are deleted.
        """
        if self._executed:
            raise InvalidArgument("this merge was already executed; build a new one")
        try:
            plan = self._merger.plan()  # no clause: InvalidArgument
            self._executed = True
            return run_statement(self._tx, lambda _: self._run(plan), autocommit=self._commit)
        finally:
            if self._owner is not None and self._executed:
                self._owner.close()  # the database mere.spark.merge opened for its transaction

    # --- running it -----------------------------------------------------------------

    def _run(self, plan: MergePlan) -> MergeMetrics:
        job = _Job(uri=self._uri, table=self._meta, plan=plan, source_schema=self._source_schema)
        persisted: list[DataFrame] = []
        try:
            return self._merge(job, persisted)
        finally:
            for df in persisted:
                df.unpersist()

    def _merge(self, job: _Job, persisted: list[DataFrame]) -> MergeMetrics:
        plan, tx, spark = job.plan, self._tx, self._spark
        keys = len(plan.keys)
        source_struct = _struct(pa.schema(list(job.source_wire) + list(job.key_wire("__sk"))))
        source = (
            self._source.mapInArrow(lambda it: _prepare_source(job, it), source_struct)
            .withColumn("__sid", F.monotonically_increasing_id())
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        persisted.append(source)

        # 1. The candidate files, chosen (and recorded as read) on the driver.
        num_source, files = self._plan(job, source)

        # 2. Pairs for which `on` is TRUE, with the clause acting on each.
        pairs: DataFrame | None = None
        if files:
            target = self._read_target(job, list(enumerate(files)))
            condition = [source[f"__sk{j}"] == target[f"__tk{j}"] for j in range(keys)]
            joined = source.join(target, condition, "inner")
            pairs_struct = _struct(_pairs_schema(job))
            pairs = joined.mapInArrow(lambda it: _match(job, it), pairs_struct).persist(
                StorageLevel.MEMORY_AND_DISK
            )
            persisted.append(pairs)

        # 3. Several actions on one target row are an error; find the touched files.
        updates = _updates(plan)
        touched: list[int] = []
        updated = deleted = 0
        if pairs is not None:
            acted = pairs.where(F.col("__action") >= 0)
            is_update = F.col("__action").isin(updates) if updates else F.lit(False)
            per_row = acted.groupBy("__file", "__row").agg(
                F.count(F.lit(1)).alias("acts"),
                F.sum(F.when(is_update, 1).otherwise(0)).alias("updates"),
            )
            # A row acted on more than once is an error unless every act deletes it.
            ambiguous = (F.col("acts") > 1) & (F.col("updates") > 0)
            per_file = (
                per_row.groupBy("__file")
                .agg(
                    F.sum(F.when(ambiguous, 1).otherwise(0)).alias("ambiguous"),
                    F.count(F.lit(1)).alias("rows"),
                    F.sum("updates").alias("updated"),
                )
                .collect()
            )
            if any(r["ambiguous"] for r in per_file):
                raise multiple_matches(plan.on_text)
            touched = sorted(r["__file"] for r in per_file)
            updated = sum(r["updated"] for r in per_file)
            deleted = sum(r["rows"] for r in per_file) - updated

        # 4. The new rows: touched files rewritten, unmatched source rows inserted.
        parts: list[DataFrame] = []
        wire_names = job.target_wire.names
        if touched:
            assert pairs is not None
            acted_ids = pairs.where(F.col("__action") >= 0).select("__file", "__row")
            kept = self._read_target(job, [(i, files[i]) for i in touched]).join(
                acted_ids, ["__file", "__row"], "left_anti"
            )
            new = pairs.where(F.col("__action").isin(updates)) if updates else None
            columns = ["__file", "__row", *wire_names]
            rows = kept.select(*columns)
            if new is not None:
                rows = rows.unionByName(new.select(*columns))
            names = job.table.schema.names
            parts.append(
                rows.repartition(max(1, min(len(touched), 4 * _parallelism(spark))), "__file")
                .sortWithinPartitions("__file", "__row")
                .select(*[F.col(w).alias(n) for w, n in zip(wire_names, names, strict=True)])
            )
        if plan.not_matched:
            unmatched = source
            if pairs is not None:
                unmatched = source.join(pairs.select("__sid"), "__sid", "left_anti")
            wire = pa.schema(list(job.source_wire))
            out = spark_schema(job.table.schema)
            parts.append(unmatched.select(*wire.names).mapInArrow(lambda it: _insert(job, it), out))
        adds: list[AddFile] = []
        if parts:
            result = parts[0]
            for part in parts[1:]:
                result = result.unionByName(part)
            adds = run_write_job(result, WriteTarget(self._uri, self._meta, tx.target_file_size))

        # 5. One change of the transaction: the touched files out, the new ones in.
        removed = [files[i] for i in touched]
        written = sum(a.rows for a in adds)
        copied = sum(f.rows for f in removed) - updated - deleted
        try:
            _core.remove_files(tx, self._name, removed)
            if adds:
                tx.add_files(self._name, adds, operation="MERGE")
        except BaseException:
            delete_files(open_store(self._uri), self._meta, [a.path for a in adds])
            raise
        metrics = MergeMetrics(
            num_source_rows=num_source,
            num_target_rows_inserted=written - copied - updated,
            num_target_rows_updated=updated,
            num_target_rows_deleted=deleted,
            num_target_rows_copied=copied,
            num_target_files_added=len(adds),
            num_target_files_removed=len(removed),
        )
        _core.record_operation(tx, self._name, "MERGE", **plan.history_parameters(metrics))
        return metrics

    def _plan(self, job: _Job, source: DataFrame) -> tuple[int, list[AddFile]]:
        """The source's rows, and the target files that may hold a matching row.

        The files are chosen from summaries of the source keys (this job also
        materialises the persisted source).
        """
        plan = job.plan
        key_columns = [f"__sk{j}" for j in range(len(job.key_types))]
        rows = (
            source.select(*key_columns)
            .mapInArrow(lambda it: _summarize(job, it), "summary binary, rows long")
            .collect()
        )
        summaries: list[list[tuple[bool, pa.Array | None]]] = [
            pickle.loads(r["summary"]) for r in rows
        ]
        num_source = sum(r["rows"] for r in rows)
        # Values are filtered on every key being valid: one key has values iff a row had.
        if not any(s[0][1] is None or len(s[0][1]) for s in summaries):
            return num_source, []
        exact: list[sqlexpr.Expr] = []
        ranged: list[sqlexpr.Expr] = []
        for j, (key, type_) in enumerate(zip(plan.keys, job.key_types, strict=True)):
            parts = [s[j] for s in summaries]
            if any(values is None for _, values in parts):
                continue
            values = pa.chunked_array([v for _, v in parts], type=type_)
            in_list, key_range = key_filters(key.target_column, values)
            if any(overflowed for overflowed, _ in parts):
                in_list = key_range
            exact += [in_list] if in_list is not None else []
            ranged += [key_range] if key_range is not None else []
        stage, table_id = self._table.stage, self._table.table_id
        files = choose_files(
            plan.file_filters(exact, ranged),
            lambda where: stage.plan_read(table_id, None, where)[1],
        )
        return num_source, files

    def _read_target(self, job: _Job, files: list[tuple[int, AddFile]]) -> DataFrame:
        """The rows of ``files`` (numbered as given), read by mere's reader on the executors."""
        spark = self._spark
        slices = max(1, min(len(files), 4 * _parallelism(spark)))
        listing = [(i, add_to_json(f)) for i, f in files]
        return spark.range(0, len(listing), 1, slices).mapInArrow(
            lambda it: _read_target(job, listing, it), _struct(_target_rows_schema(job))
        )


def _parallelism(spark: SparkSession) -> int:
    return int(spark.sparkContext.defaultParallelism)
