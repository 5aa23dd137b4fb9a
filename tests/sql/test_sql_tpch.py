"""TPC-H's 22 queries through db.sql equal DuckDB's answers on the same Parquet files.

The data (scale factor 0.01, from ``tpchgen-cli``) is loaded into mere with
``lineitem`` and ``orders`` partitioned and cut into several files, so the
queries run through partition pruning, statistics skipping and pushdown.
"""

from __future__ import annotations

import importlib.util
import math
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import mere

ROOT = Path(__file__).resolve().parents[2]


def load_queries() -> ModuleType:
    name = "tpch_queries"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "tpch_queries.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tpch = load_queries()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if (
        shutil.which("tpchgen-cli") is None
        and not (Path(sys.executable).parent / "tpchgen-cli").exists()
    ):
        pytest.skip("tpchgen-cli is not installed")
    return tpch.tpchgen(tmp_path_factory.mktemp("tpch") / "sf0.01", 0.01)


@pytest.fixture(scope="module")
def loaded(data: Path, tmp_path_factory: pytest.TempPathFactory) -> mere.Database:
    db = mere.connect(tmp_path_factory.mktemp("db") / "db", target_file_size=256 * 1024)
    tpch.load(db, data)
    return db


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


@pytest.mark.parametrize("number", sorted(tpch.QUERIES))
def test_tpch_query_matches_duckdb(loaded: mere.Database, data: Path, number: int) -> None:
    query = tpch.QUERIES[number]
    expected = tpch.duckdb_on_parquet(data).sql(query).to_arrow_table()
    got = loaded.sql(query)
    assert got.schema.names == expected.schema.names
    assert got.num_rows == expected.num_rows
    for mine, theirs in zip(got.to_pylist(), expected.to_pylist(), strict=True):
        assert all(same(mine[k], theirs[k]) for k in mine), (mine, theirs)
    assert expected.num_rows > 0  # every query returns rows at SF 0.01


def test_lineitem_is_in_several_files(loaded: mere.Database) -> None:
    assert len(loaded.snapshot().table("lineitem").files) > 4
