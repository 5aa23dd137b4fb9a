"""The SQL tests need DuckDB (``mere[sql]``)."""

from __future__ import annotations

import pytest

pytest.importorskip("duckdb")
