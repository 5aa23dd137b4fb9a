"""Names and values that try to escape the database root or collide.

No user string becomes a path segment unchecked (DESIGN.md §11). On a
LocalStore in a fresh directory, for table names, column names, partition
column names and partition values built to escape (``..``, ``/``, ``%2F``,
NUL, backslashes, very long text, Unicode look-alikes and direction marks):

* a name is either refused (InvalidName, TableExists) with nothing written,
  or accepted and read back exactly;
* every file written lies under the database root, and a partition value
  occupies exactly one path segment;
* the value read back is the value written (the log, not the path, is
  authoritative).
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidKey, StorageError

HOSTILE = [
    "../x",
    "..",
    ".",
    "/etc/passwd",
    "a/b",
    "%2F",
    "%2e%2e",
    "a\x00b",
    "a\\b",
    "x" * 129,
    "\uff4frders",  # fullwidth o
    "\u043erders",  # Cyrillic o
    "orders\u202e",  # right-to-left override
    "",
    " ",
    "1abc",
    "a b",
    "_log/x",
]
LAYOUT = re.compile(
    r"_log/(\d{20}\.json|\d{20}\.checkpoint\.parquet|_latest|_last_checkpoint|\.mere-turns)"
    r"|tables/[0-9a-f]{32}/([^/]+/)*part-[0-9a-f]{32}\.parquet"
)


def files_under(path: Path) -> set[Path]:
    return {Path(d) / f for d, _, files in os.walk(path) for f in files}


def assert_confined(outer: Path, root: Path) -> None:
    """Every file below ``outer`` is below ``root`` (resolved, symlinks included)."""
    real_root = root.resolve()
    for f in files_under(outer):
        assert f.resolve().is_relative_to(real_root), f"{f} is outside the database root"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sandbox" / "db"


@pytest.fixture
def db(root: Path) -> mere.Database:
    return mere.connect(str(root))


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_table_names_are_refused(db: mere.Database, root: Path, name: str) -> None:
    before = files_under(root.parent.parent)
    version = db.version
    with pytest.raises(mere.InvalidName):
        db.create_table(name, pa.schema([("x", pa.int64())]))
    assert db.version == version
    assert files_under(root.parent.parent) == before


def test_table_names_colliding_by_case_are_refused(db: mere.Database) -> None:
    db.create_table("Orders", pa.schema([("x", pa.int64())]))
    with pytest.raises(mere.TableExists):
        db.create_table("orders", pa.schema([("x", pa.int64())]))
    with db.transaction() as tx, pytest.raises(mere.TableExists):
        tx.create_table("ORDERS", pa.schema([("x", pa.int64())]))


@pytest.mark.parametrize("name", [n for n in HOSTILE if n] + ["x" * 255, "é" * 200])
def test_hostile_column_names_are_refused_or_kept_out_of_paths(
    db: mere.Database, root: Path, name: str
) -> None:
    schema = pa.schema([pa.field(name, pa.int64())])
    try:
        db.create_table("t", schema)
    except mere.InvalidName:
        return
    db.table("t").append([{name: 7}])
    assert db.table("t").scan().to_pylist() == [{name: 7}]
    assert_layout(root)


def assert_layout(root: Path) -> None:
    """Every file under the root (and none elsewhere) is where the format puts files."""
    assert_confined(root.parent.parent, root)
    for f in files_under(root):
        relative = f.relative_to(root).as_posix()
        assert LAYOUT.fullmatch(relative), relative


@pytest.mark.parametrize("name", ["tables", "_log", "part", "TABLES", "x" * 128])
def test_names_like_the_layout_are_just_names(db: mere.Database, root: Path, name: str) -> None:
    db.create_table(name, pa.schema([("tables", pa.string()), ("i", pa.int64())]))
    db.table(name).append([{"tables": "_log", "i": 1}])
    assert db.table(name).scan().to_pylist() == [{"tables": "_log", "i": 1}]
    assert_layout(root)


@pytest.mark.parametrize("name", [*HOSTILE, "A", "é"])
def test_hostile_partition_column_names_are_refused(db: mere.Database, name: str) -> None:
    if name == "A":
        schema = pa.schema([("a", pa.string()), ("A", pa.string())])
        with pytest.raises(mere.InvalidName):
            db.create_table("t", schema, partition_by=["A"])
        return
    with pytest.raises((mere.InvalidName, mere.SchemaMismatch)):
        db.create_table("t", pa.schema([(name, pa.string())]), partition_by=[name])


partition_values = st.one_of(
    st.sampled_from(
        ["..", ".", "/", "../../../etc", "%2F", "%", "a\x00b", "\\", "é/../x", "\u202e", "", " "]
    ),
    st.text(min_size=0, max_size=40),
    st.text(alphabet="./%\\\x00=:", max_size=12),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(partition_values, min_size=1, max_size=6))
def test_partition_values_stay_in_one_segment_under_the_root(
    tmp_path: Path, values: list[str]
) -> None:
    sandbox = tmp_path / uuid.uuid4().hex  # one per example
    root = sandbox / "db"
    db = mere.connect(str(root))
    db.create_table("t", pa.schema([("p", pa.string()), ("i", pa.int64())]), partition_by=["p"])
    db.table("t").append([{"p": v, "i": i} for i, v in enumerate(values)])
    got = sorted((r["i"], r["p"]) for r in db.table("t").scan().to_pylist())
    assert got == sorted(enumerate(values))
    assert_confined(sandbox, root)
    table_dir = root / "tables" / db.snapshot().table("t").id
    for f in files_under(table_dir):
        parts = f.relative_to(table_dir).parts
        assert len(parts) == 2, parts  # p=<one segment>/part-....parquet
        assert parts[0].startswith("p=")  # so never "." or ".." itself
    for i, v in enumerate(values):  # filters on the value find exactly its row
        quoted = v.replace("'", "''")
        if "\x00" not in v:
            rows = db.table("t").scan(filter=f"p = '{quoted}'").column("i").to_pylist()
            assert i in rows
    db.close()


def test_a_partition_value_too_long_for_the_filesystem(db: mere.Database, root: Path) -> None:
    """The defined outcome: InvalidKey (a StorageError), nothing committed, no file left."""
    db.create_table("t", pa.schema([("p", pa.string()), ("i", pa.int64())]), partition_by=["p"])
    db.table("t").append([{"p": "x" * 253, "i": 1}])  # "p=" + 253 bytes: the 255-byte limit
    version = db.version
    before = files_under(root)
    with pytest.raises(InvalidKey, match="too long"):
        db.table("t").append([{"p": "x" * 254, "i": 2}])
    assert issubclass(InvalidKey, StorageError)
    assert db.version == version
    assert files_under(root) == before
    assert db.table("t").scan().num_rows == 1
