"""Every core read path gives DuckDB's answer, whatever the layout of files and row groups.

Hypothesis builds a table of awkward values (integers at their limits, NaN, ±inf and
-0.0, NULLs, empty and non-ASCII strings, dates and timestamps far from today,
decimals at their precision, a partition column), writes it as a random number of
appends with random file and row-group sizes, and asks random filters from a small
grammar. The rows DuckDB returns for ``SELECT k FROM t WHERE <filter>`` over the same
Arrow table are the reference for:

* ``scan`` and ``scan_batches``;
* the row counts of ``delete`` and ``update`` (in a transaction that is then aborted);
* ``scan`` after ``compact``;
* ``export_delta`` read back by the ``deltalake`` package (all rows, filtered by
  DuckDB; and, for filters on non-float columns, deltalake's own dataset with the
  filter pushed down to its file statistics).

Errors: integer overflow and failing casts raise InvalidExpression in mere. A path
may raise it only when DuckDB also fails to compute one of the filter's risky
sub-expressions over all rows; and when DuckDB itself fails on the WHERE clause the
rows are not compared (which rows are computed, and so whether an error shows,
depends on evaluation order and on skipping, in both engines).

Division by zero (NULL in mere, infinity in DuckDB) is left out of the grammar.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st

import mere
from layout_helpers import (
    CMP,
    I32_MAX,
    I32_MIN,
    I64_MAX,
    I64_MIN,
    PARTITION,
    SCHEMA,
    append_in_slices,
    make_table,
    row_group_bytes,
    rows_of,
)
from mere.errors import InvalidExpression
from mere.expr import parse, referenced_columns
from mere.storage import MemoryStore

UTC = dt.UTC
NAN, INF = math.nan, math.inf

TIMESTAMPS = [
    dt.datetime(1, 1, 1),
    dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 2, 29, 12, 0),
    dt.datetime(2024, 3, 1, 0, 0, 0, 1),
    dt.datetime(2024, 12, 31, 23, 30),
    dt.datetime(9999, 12, 31, 23, 59, 59),
]
VALUES: dict[str, list[object]] = {
    "p": ["x", "y", "ü"],
    "i64": [I64_MIN, I64_MIN + 1, -1, 0, 1, 7, I64_MAX - 1, I64_MAX],
    "i32": [I32_MIN, -5, 0, 3, I32_MAX - 1, I32_MAX],
    "n": [-3, -1, 0, 1, 2, 5],
    "f": [NAN, INF, -INF, -0.0, 0.0, 1.5, -2.5, 5.0, 1e308, -1e308, 5e-324],
    "g": [NAN, INF, -0.0, 0.0, 1.5, -2.0],
    "s": ["", "a", "A", "ab", "b", "é", "É", "😀", " a ", "a_b", "%x", "ba"],
    "b": [True, False],
    "d": [
        dt.date(1, 1, 1),
        dt.date(1969, 12, 31),
        dt.date(1970, 1, 1),
        dt.date(2024, 2, 29),
        dt.date(2024, 3, 1),
        dt.date(9999, 12, 31),
    ],
    "ts": list(TIMESTAMPS),
    "tz": [v.replace(tzinfo=UTC) for v in TIMESTAMPS],
    "dec": [
        Decimal("-99999999.99"),
        Decimal("-2.25"),
        Decimal("0.00"),
        Decimal("1.50"),
        Decimal("2.50"),
        Decimal("99999999.99"),
    ],
}

ROW = rows_of(VALUES)


# --- the filter grammar -------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """A predicate, and the sub-expressions of it that may fail (overflow, casts)."""

    sql: str
    risky: tuple[str, ...] = ()


def _q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


FLOAT_LITERALS = [
    "CAST('NaN' AS DOUBLE)",
    "'nan'::DOUBLE",
    "CAST('inf' AS DOUBLE)",
    "CAST('-inf' AS DOUBLE)",
    "1e308",
    "-1e308",
    "0.0",
    "-0.0",
    "1.5",
    "5",
    "-2.5e0",
]
FLOAT32_LITERALS = ["CAST('NaN' AS REAL)", "CAST('inf' AS REAL)", "0", "-0.0", "1.5", "-2"]
INT64_LITERALS = [str(I64_MIN), str(I64_MIN + 1), "-1", "0", "7", str(I64_MAX - 1), str(I64_MAX)]
INT32_LITERALS = [str(I32_MIN), "-5", "0", "3", str(I32_MAX), "2147483648", "1.5"]
STRING_LITERALS = ["''", "'a'", "'A'", "'ab'", "'é'", "'😀'", "' a '", "'b'", "'a_b'", "'z'"]
DATE_LITERALS = [
    "DATE '0001-01-01'",
    "DATE '1970-01-01'",
    "'2024-02-29'",
    "DATE '9999-12-31'",
    "TIMESTAMP '2024-02-29 12:00:00'",
]
TS_LITERALS = [
    "TIMESTAMP '1969-12-31 23:59:59.999999'",
    "'2024-02-29 12:00:00'",
    "'2024-03-01'",
    "DATE '2024-03-01'",
    "TIMESTAMP '9999-12-31 23:59:59'",
    "TIMESTAMP '0001-01-01 00:00:00'",
]
DEC_LITERALS = ["1.5", "2.50", "-2.25", "0", "99999999.99", "-100000000", "0.005", "1e2"]

#: (value expressions, literals they are compared with) per family of types.
FAMILIES: dict[str, tuple[list[str], list[str]]] = {
    "float": (
        [
            "f",
            "f + 1",
            "f * 2",
            "-f",
            "abs(f)",
            "f / 4",
            "CAST(g AS DOUBLE)",
            "CAST(n AS DOUBLE)",
            "CAST(dec AS DOUBLE)",
        ],
        FLOAT_LITERALS,
    ),
    "float32": (["g"], FLOAT32_LITERALS),
    "int64": (["i64", "n", "CAST(n AS BIGINT) * 3", "i64 // 2", "i64 % 5"], INT64_LITERALS),
    "int32": (["i32", "n + 1", "n * n", "-n", "abs(n)"], INT32_LITERALS),
    "string": (
        [
            "s",
            "p",
            "lower(s)",
            "upper(s)",
            "trim(s)",
            "ltrim(s)",
            "substring(s, 2, 2)",
            "s || p",
            "coalesce(s, p)",
        ],
        STRING_LITERALS,
    ),
    "date": (["d", "CAST(ts AS DATE)"], DATE_LITERALS),
    "timestamp": (
        [
            "ts",
            "date_trunc('month', ts)",
            "date_trunc('day', d)",
            "date_trunc('week', ts)",
            "date_trunc('hour', ts)",
        ],
        TS_LITERALS,
    ),
    "timestamptz": (
        ["tz", "date_trunc('quarter', tz)"],
        ["'2024-02-29 12:00:00'", "TIMESTAMPTZ '2024-03-01 00:00:00+00'"],
    ),
    "decimal": (["dec", "dec + 1", "-dec", "CAST(n AS DECIMAL(4, 1))"], DEC_LITERALS),
    "part": (
        ["year(d)", "month(ts)", "day(tz)", "hour(ts)", "quarter(d)", "length(s)", "n"],
        ["1", "2", "12", "2024", "9999", "0", "-1"],
    ),
}
#: Values that may fail at run time (overflow, casts out of range, NaN to an integer).
RISKY_VALUES = [
    "i32 + 1",
    "i64 - 1",
    "i32 * 2",
    "-i64",
    "CAST(f AS BIGINT)",
    "CAST(f AS INTEGER)",
    "CAST(dec AS INTEGER)",
    "CAST(dec AS DECIMAL(3, 0))",
    "CAST(i64 AS INTEGER)",
]


@st.composite
def comparisons(draw: st.DrawFn) -> Filter:
    family = draw(st.sampled_from(sorted(FAMILIES)))
    values, literals = FAMILIES[family]
    left = draw(st.sampled_from(values))
    right = draw(st.one_of(st.sampled_from(literals), st.sampled_from(values)))
    if draw(st.booleans()):
        left, right = right, left
    return Filter(f"{left} {draw(CMP)} {right}")


@st.composite
def risky_comparisons(draw: st.DrawFn) -> Filter:
    value = draw(st.sampled_from(RISKY_VALUES))
    literal = draw(st.sampled_from(["0", "1", "2", "-1", "2147483647"]))
    return Filter(f"{value} {draw(CMP)} {literal}", (value,))


@st.composite
def in_lists(draw: st.DrawFn) -> Filter:
    family = draw(st.sampled_from(["float", "int64", "string", "date", "decimal", "float32"]))
    values, literals = FAMILIES[family]
    items = draw(st.lists(st.sampled_from([*literals, "NULL"]), min_size=1, max_size=4))
    word = draw(st.sampled_from(["IN", "NOT IN"]))
    return Filter(f"{draw(st.sampled_from(values))} {word} ({', '.join(items)})")


@st.composite
def betweens(draw: st.DrawFn) -> Filter:
    family = draw(st.sampled_from(["float", "int64", "string", "date", "timestamp", "decimal"]))
    values, literals = FAMILIES[family]
    low, high = draw(st.sampled_from(literals)), draw(st.sampled_from(literals))
    word = draw(st.sampled_from(["BETWEEN", "NOT BETWEEN"]))
    return Filter(f"{draw(st.sampled_from(values))} {word} {low} AND {high}")


@st.composite
def distincts(draw: st.DrawFn) -> Filter:
    family = draw(st.sampled_from(["float", "int64", "string", "date", "decimal"]))
    values, literals = FAMILIES[family]
    right = draw(st.sampled_from([*literals, "NULL", *values]))
    word = draw(st.sampled_from(["IS DISTINCT FROM", "IS NOT DISTINCT FROM"]))
    return Filter(f"{draw(st.sampled_from(values))} {word} {right}")


PREDICATES = st.sampled_from(
    [
        "b",
        "NOT b",
        "b IS TRUE",
        "b IS NOT FALSE",
        "b = FALSE",
        "isnan(f)",
        "NOT isnan(f)",
        "isnan(g)",
        "isinf(f)",
        "isfinite(f)",
        "starts_with(s, 'a')",
        "starts_with(p, 'x')",
        "ends_with(s, 'b')",
        "contains(s, '_')",
        "s LIKE 'a%'",
        "s LIKE '%b'",
        "s LIKE 'a\\_b' ESCAPE '\\'",
        "s LIKE '_'",
        "s NOT LIKE '%a%'",
        "s ILIKE 'a%'",
        "s ILIKE 'É'",
        "p LIKE 'x%'",
        "TRUE",
        "NULL",
    ]
).map(Filter)
NULL_TESTS = st.tuples(
    st.sampled_from([c for c in SCHEMA.names if c != "k"] + ["f + 1", "lower(s)"]),
    st.sampled_from(["IS NULL", "IS NOT NULL"]),
).map(lambda t: Filter(f"{t[0]} {t[1]}"))

LEAVES = st.one_of(
    comparisons(),
    comparisons(),
    comparisons(),
    in_lists(),
    betweens(),
    distincts(),
    PREDICATES,
    PREDICATES,
    NULL_TESTS,
    risky_comparisons(),
)


def _combine(word: str):
    def build(items: list[Filter]) -> Filter:
        return Filter(
            f" {word} ".join(f"({i.sql})" for i in items), tuple(r for i in items for r in i.risky)
        )

    return build


FILTERS = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(_combine("AND")),
        st.lists(inner, min_size=2, max_size=3).map(_combine("OR")),
        inner.map(lambda f: Filter(f"NOT ({f.sql})", f.risky)),
    ),
    max_leaves=4,
)


# --- the layout ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    rows: list[dict[str, object]]
    cuts: list[int]  # append boundaries
    target_file_size: int
    row_group_bytes: int
    filters: list[Filter]
    local: bool = False  # a local directory (fsync on every commit: slow), else memory://
    inline_limit: int = 0  # files of at most this many bytes are inlined in the log (0: none)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    rows = draw(st.lists(ROW, min_size=1, max_size=30))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(rows)), max_size=3))))
    return Case(
        rows,
        cuts,
        draw(st.sampled_from([1, 1500, 4000, 1 << 20])),
        draw(st.sampled_from([1, 300, 1200, 64 << 20])),
        draw(st.lists(FILTERS, min_size=1, max_size=4)),
        local=draw(st.integers(0, 9)) == 0,
        inline_limit=draw(st.sampled_from([0, 0, 2500, 65536])),
    )


# --- the reference, and mere's paths --------------------------------------------------------


class DuckFailed(Exception):
    pass


def duck_keys(con: duckdb.DuckDBPyConnection, sql: str, table: str = "t") -> list[int]:
    try:
        return sorted(r[0] for r in con.execute(f"SELECT k FROM {table} WHERE {sql}").fetchall())
    except duckdb.Error as e:
        raise DuckFailed(str(e)) from None


def duck_fails_somewhere(con: duckdb.DuckDBPyConnection, risky: tuple[str, ...]) -> bool:
    """Whether DuckDB fails computing one of ``risky`` over every row of t."""
    for value in risky:
        try:
            con.execute(f"SELECT {value} FROM t").fetchall()
        except duckdb.Error:
            return True
    return False


def keys_of(table: pa.Table) -> list[int]:
    return sorted(table.column("k").to_pylist())


def _share(part: int, whole: int) -> str:
    if part == 0:
        return "no row"
    return "every row" if part == whole else "some rows"


def check_path(
    name: str, run, expected: list[int] | None, con, flt: Filter, errors: list[str]
) -> None:
    """Run one path; compare with DuckDB's rows (None: DuckDB failed, anything goes)."""
    try:
        got = run()
    except InvalidExpression as e:
        event(f"{name} raises InvalidExpression")
        if expected is not None and not duck_fails_somewhere(con, flt.risky):
            errors.append(f"{name}: raised {e} but DuckDB computes every part of {flt.sql!r}")
        return
    if expected is not None and got != expected:
        errors.append(f"{name}: {got} != DuckDB's {expected} for {flt.sql!r}")


def aborted_count(db: mere.Database, verb: str, sql: str) -> list[int]:
    """The rows a delete or update would touch, as a list of that length (then aborted)."""
    tx = db.transaction()
    try:
        table = tx.table("t")
        count = table.delete(sql) if verb == "delete" else table.update(sql, {"n": "n"})
    finally:
        tx.abort()
    return list(range(count))


# --- reading Delta exports with deltalake, in a helper process --------------------------------

_DELTA_WORKER = r"""
import json, sys
import deltalake
import pyarrow as pa, pyarrow.ipc as ipc
from mere.expr import bind, parse, to_arrow
for line in sys.stdin:
    request = json.loads(line)
    reply = {}
    try:
        table = deltalake.DeltaTable(request["path"])
        data = table.to_pyarrow_table()
        with ipc.new_file(request["out"], data.schema) as out:
            out.write_table(data)
        dataset = table.to_pyarrow_dataset()
        reply["filtered"] = {}
        for sql in request["filters"]:
            try:
                expr = to_arrow(bind(parse(sql), dataset.schema))
                rows = dataset.to_table(columns=["k"], filter=expr).column("k").to_pylist()
                reply["filtered"][sql] = sorted(rows)
            except Exception as e:
                reply["filtered"][sql] = "error: " + repr(e)
        reply["scanned"] = {}
        for sql in request.get("scan_filters", []):  # deltalake's DataFusion engine
            rows = pa.table(table.scan(columns=["k"], predicate=sql).read_all())
            reply["scanned"][sql] = sorted(rows.column("k").to_pylist())
    except Exception as e:
        reply["error"] = repr(e)
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
"""


class DeltaReader:
    """One ``deltalake`` process for the whole module (it can abort at exit: ignored)."""

    def __init__(self) -> None:
        src = str(Path(mere.__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _DELTA_WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )

    def read(
        self, path: Path, out: Path, filters: list[str], scan_filters: Sequence[str] = ()
    ) -> dict[str, object]:
        """Read the table at ``path`` into ``out`` (Arrow IPC); the keys of each filter's rows.

        ``filters`` (mere's SQL) run on deltalake's pyarrow dataset; ``scan_filters``
        (DataFusion's SQL) on its ``scan``.
        """
        assert self.process.stdin is not None and self.process.stdout is not None
        request = {
            "path": str(path),
            "out": str(out),
            "filters": filters,
            "scan_filters": list(scan_filters),
        }
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, "the deltalake reader process died"
        reply: dict[str, object] = json.loads(line)
        return reply

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


@pytest.fixture(scope="module")
def delta_reader() -> Iterator[DeltaReader]:
    reader = DeltaReader()
    yield reader
    reader.close()


# --- the test ---------------------------------------------------------------------------------

#: The issue's layout: [5.0, NaN] in one file, [7.0] in another; filters on NaN.
NAN_ROWS = [
    {**dict.fromkeys(VALUES), "f": 5.0},
    {**dict.fromkeys(VALUES), "f": NAN},
    {**dict.fromkeys(VALUES), "f": 7.0},
]
NAN_FILTERS = [Filter("f <> 5"), Filter("f > 1e308"), Filter("f = 'NaN'::DOUBLE")]


def run_case(case: Case, root: Path, delta_reader: DeltaReader) -> list[str]:
    """Every path's disagreements with DuckDB for one case (empty: all agree)."""
    table = make_table(case.rows)
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("t", table)
    expected: dict[str, list[int] | None] = {}
    for flt in case.filters:
        try:
            expected[flt.sql] = duck_keys(con, flt.sql)
            event(f"DuckDB selects {_share(len(expected[flt.sql] or []), table.num_rows)}")
        except DuckFailed:
            expected[flt.sql] = None
            event("DuckDB fails")

    uri = str(root / "db") if case.local else f"memory://{uuid.uuid4().hex}"
    db = mere.connect(uri, target_file_size=case.target_file_size)
    if case.inline_limit:
        db.set_properties({"inlineLimit": str(case.inline_limit)})
    try:
        return run_paths(db, case, root, delta_reader, table, con, expected)
    finally:
        if not case.local:
            MemoryStore.forget(uri.removeprefix("memory://"))


def run_paths(
    db: mere.Database,
    case: Case,
    root: Path,
    delta_reader: DeltaReader,
    table: pa.Table,
    con: duckdb.DuckDBPyConnection,
    expected: dict[str, list[int] | None],
) -> list[str]:
    """Write ``table`` into ``db`` in the case's layout and run every path on it."""
    errors: list[str] = []
    with row_group_bytes(case.row_group_bytes):
        db.create_table("t", SCHEMA, partition_by=[PARTITION])
        t = db.table("t")
        append_in_slices(t, table, case.cuts)
        files = t.describe()["files"]
        note(f"files: {files}")
        event(f"files: {min(files, 5)}{'+' if files >= 5 else ''}")
        for flt in case.filters:
            want, sql = expected[flt.sql], flt.sql
            count = None if want is None else list(range(len(want)))
            paths = {
                "scan": (lambda sql=sql: keys_of(t.scan(filter=sql)), want),
                "scan_batches": (
                    lambda sql=sql: keys_of(t.scan_batches(filter=sql).read_all()),
                    want,
                ),
                "delete": (lambda sql=sql: aborted_count(db, "delete", sql), count),
                "update": (lambda sql=sql: aborted_count(db, "update", sql), count),
            }
            for name, (run, reference) in paths.items():
                check_path(name, run, reference, con, flt, errors)
        t.compact(target_file_size=max(case.target_file_size, 3000))
        for flt in case.filters:
            check_path(
                "compact+scan",
                lambda sql=flt.sql: keys_of(t.scan(filter=sql)),
                expected[flt.sql],
                con,
                flt,
                errors,
            )
    if table.num_rows:
        errors += check_delta(t, case, root, delta_reader, table, expected)
    return errors


def check_delta(
    t: mere.Table,
    case: Case,
    root: Path,
    delta_reader: DeltaReader,
    table: pa.Table,
    expected: dict[str, list[int] | None],
) -> list[str]:
    """export_delta, read back by deltalake: the same rows, and the same filtered rows."""
    errors: list[str] = []
    t.export_delta(root / "delta")
    reply = delta_reader.read(root / "delta", root / "delta.arrow", [f.sql for f in case.filters])
    if "error" in reply:
        return [f"deltalake could not read the export: {reply['error']}"]
    with ipc.open_file(root / "delta.arrow") as source:
        data = source.read_all()
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("delta", data)
    filtered = reply["filtered"]
    assert isinstance(filtered, dict)
    for flt in case.filters:
        want = expected[flt.sql]
        if want is None:
            continue
        try:
            got = duck_keys(con, flt.sql, table="delta")
        except DuckFailed as e:
            errors.append(f"delta export: DuckDB fails on the export but not on the table: {e}")
            continue
        if got != want:
            errors.append(f"delta export: {got} != {want} for {flt.sql!r}")
        # deltalake's own dataset prunes files by the exported statistics: checked
        # for the columns whose statistics it exports (DELTA_PUSHDOWN_COLUMNS).
        if referenced_columns(parse(flt.sql)) <= DELTA_PUSHDOWN_COLUMNS:
            pushed = filtered.get(flt.sql)
            if isinstance(pushed, list) and pushed != want:
                errors.append(f"deltalake dataset: {pushed} != {want} for {flt.sql!r}")
    return errors


#: Columns whose Delta statistics deltalake's dataset uses soundly. Not floats: the
#: exported min/max leave NaN out. Not decimals, booleans and timestamps without a
#: zone: export_delta writes no min/max for them, and deltalake then assumes
#: ``col >= NULL`` and skips every file.
#: Nor ``tz``: its values include year 1, which export_delta spells "1-01-01T..."
#: (strftime's %Y does not pad on Linux); deltalake reads that as NULL.
DELTA_PUSHDOWN_COLUMNS = {"k", "p", "i64", "i32", "n", "s", "d"}


@settings(
    # About a second an example; MERE_DIFFERENTIAL_EXAMPLES=2000 for a long hunt.
    max_examples=int(os.environ.get("MERE_DIFFERENTIAL_EXAMPLES", "40")),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@example(case=Case(NAN_ROWS, [2], 1 << 20, 64 << 20, NAN_FILTERS, local=True))
@example(case=Case(NAN_ROWS, [], 1 << 20, 64 << 20, NAN_FILTERS, local=True))
@example(case=Case(NAN_ROWS, [], 1 << 20, 1, NAN_FILTERS))  # one row group per row
@example(case=Case(NAN_ROWS, [1], 1 << 20, 64 << 20, NAN_FILTERS, local=True, inline_limit=65536))
@example(case=Case([], [], 1 << 20, 64 << 20, [Filter("TRUE"), Filter("f > 0 OR f IS NULL")]))
@given(case=cases())
def test_every_path_agrees_with_duckdb(case: Case, delta_reader: DeltaReader) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        errors = run_case(case, Path(tmp), delta_reader)
    assert not errors, "\n".join(errors)


def test_deltalake_scan_keeps_nan(tmp_path: Path, delta_reader: DeltaReader) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("t", SCHEMA, partition_by=[PARTITION])
    table = make_table(NAN_ROWS)
    db.table("t").append(table.slice(0, 2))
    db.table("t").append(table.slice(2))
    db.table("t").export_delta(tmp_path / "delta")
    # NaN <> 5 is TRUE in every engine's semantics (IEEE's included).
    reply = delta_reader.read(
        tmp_path / "delta", tmp_path / "delta.arrow", ["f <> 5", "isnan(f)"], ["f <> 5"]
    )
    assert reply.get("filtered") == {"f <> 5": [1, 2], "isnan(f)": [1]}  # pyarrow: right
    assert reply.get("scanned") == {"f <> 5": [1, 2]}  # DataFusion too


def test_deltalake_pushdown_without_statistics(tmp_path: Path, delta_reader: DeltaReader) -> None:
    row = {**dict.fromkeys(VALUES), "dec": Decimal("1.50")}
    db = mere.connect(tmp_path / "db")
    db.create_table("t", SCHEMA, partition_by=[PARTITION])
    db.table("t").append(make_table([row]))
    db.table("t").export_delta(tmp_path / "delta")
    reply = delta_reader.read(tmp_path / "delta", tmp_path / "delta.arrow", ["dec = 1.5"])
    assert reply.get("filtered") == {"dec = 1.5": [0]}


def test_deltalake_pushdown_of_early_timestamps(tmp_path: Path, delta_reader: DeltaReader) -> None:
    row = {**dict.fromkeys(VALUES), "tz": dt.datetime(1, 1, 1, tzinfo=UTC)}
    db = mere.connect(tmp_path / "db")
    db.create_table("t", SCHEMA, partition_by=[PARTITION])
    db.table("t").append(make_table([row]))
    db.table("t").export_delta(tmp_path / "delta")
    sql = "tz < TIMESTAMPTZ '2024-03-01 00:00:00+00'"
    reply = delta_reader.read(tmp_path / "delta", tmp_path / "delta.arrow", [sql])
    assert reply.get("filtered") == {sql: [0]}
