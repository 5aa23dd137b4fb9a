"""Where the log's objects live under the database root."""

from __future__ import annotations

import re

LOG_PREFIX = "_log/"
LATEST_HINT = "_log/_latest"
CHECKPOINT_HINT = "_log/_last_checkpoint"
VERSION_DIGITS = 20

_LOG_NAME = re.compile(r"_log/(\d{20})\.(json|checkpoint\.parquet)\Z")


def commit_key(version: int) -> str:
    """``_log/<20-digit version>.json``: zero-padded so listings come back in version order."""
    return f"{LOG_PREFIX}{version:0{VERSION_DIGITS}d}.json"


def checkpoint_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:0{VERSION_DIGITS}d}.checkpoint.parquet"


def parse_log_key(key: str) -> tuple[int, str] | None:
    """``(version, "commit" | "checkpoint")`` for a log key, None for anything else."""
    m = _LOG_NAME.match(key)
    if not m:
        return None
    return int(m.group(1)), "commit" if m.group(2) == "json" else "checkpoint"
