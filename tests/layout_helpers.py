"""What the layout differential tests share (tests/expr/test_layout_differential.py and
its Spark leg, tests/spark/test_spark_layout_differential.py): the table of awkward
values, rows drawn from it, and writing those rows in a chosen layout.

Each test draws rows from its own ``VALUES`` (the Spark leg leaves out what Spark
SQL and DuckDB spell differently), builds them into an Arrow table with
:func:`make_table`, and appends it in slices with :func:`append_in_slices` under
:func:`row_group_bytes`, so that one set of rows lands as many different layouts
of files and row groups.

A plain module at the root of ``tests``: pytest puts this folder on ``sys.path``
when it loads ``tests/conftest.py``, so the test modules import it by name.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator

import pyarrow as pa
from hypothesis import strategies as st

import mere
from mere.data import writer

I64_MIN, I64_MAX = -(2**63), 2**63 - 1
I32_MIN, I32_MAX = -(2**31), 2**31 - 1

#: Every column the differential tests know; ``k`` numbers the rows, ``p`` partitions.
SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        ("p", pa.string()),
        ("i64", pa.int64()),
        ("i32", pa.int32()),
        ("n", pa.int16()),
        ("f", pa.float64()),
        ("g", pa.float32()),
        ("s", pa.string()),
        ("b", pa.bool_()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us")),
        ("tz", pa.timestamp("us", "UTC")),
        ("dec", pa.decimal128(10, 2)),
    ]
)
PARTITION = "p"

#: The comparison operators of the filter grammars.
CMP = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])


def rows_of(values: dict[str, list[object]]) -> st.SearchStrategy[dict[str, object]]:
    """One row: each column NULL or one of its ``values``, NULL as often as any one value."""
    return st.fixed_dictionaries({c: st.sampled_from([None, *v]) for c, v in values.items()})


def make_table(rows: list[dict[str, object]], schema: pa.Schema = SCHEMA) -> pa.Table:
    """The rows as a table of ``schema``, ``k`` numbering them from 0."""
    data = {name: [r[name] for r in rows] for name in schema.names if name != "k"}
    return pa.Table.from_pydict({"k": list(range(len(rows))), **data}, schema=schema)


@contextlib.contextmanager
def row_group_bytes(size: int) -> Iterator[None]:
    """Writers cut row groups at ``size`` bytes while the block runs."""
    saved = writer.ROW_GROUP_BYTES
    writer.ROW_GROUP_BYTES = size
    try:
        yield
    finally:
        writer.ROW_GROUP_BYTES = saved


def append_in_slices(table: mere.Table, data: pa.Table, cuts: list[int]) -> None:
    """Append ``data`` to ``table`` in one commit per slice between the sorted ``cuts``."""
    bounds = [0, *cuts, data.num_rows]
    for start, stop in itertools.pairwise(bounds):
        if stop > start:
            table.append(data.slice(start, stop - start))
