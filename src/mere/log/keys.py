"""Where the log's objects live under the database root."""

from __future__ import annotations

import re

LOG_PREFIX = "_log/"
LATEST_HINT = "_log/_latest"
CHECKPOINT_HINT = "_log/_last_checkpoint"
VERSION_DIGITS = 20

_LOG_NAME = re.compile(r"_log/([0-9]{20})\.(json|checkpoint\.parquet)\Z")
_PART_NAME = re.compile(r"_log/([0-9]{20})\.checkpoint\.([0-9a-f]{32})\.([0-9]{5})\.parquet\Z")


def commit_key(version: int) -> str:
    """``_log/<20-digit version>.json``: zero-padded so listings come back in version order."""
    return f"{LOG_PREFIX}{version:0{VERSION_DIGITS}d}.json"


def checkpoint_key(version: int) -> str:
    return f"{LOG_PREFIX}{version:0{VERSION_DIGITS}d}.checkpoint.parquet"


def checkpoint_part_key(version: int, writer: str, number: int) -> str:
    """``_log/<version>.checkpoint.<writer id>.<n>.parquet``: one part of a columnar checkpoint.

    ``writer`` (32 hex digits) is unique to one attempt at writing the
    checkpoint, so writers racing for the same version never share a part.
    """
    return f"{LOG_PREFIX}{version:0{VERSION_DIGITS}d}.checkpoint.{writer}.{number:05d}.parquet"


def parse_checkpoint_part_key(key: str) -> int | None:
    """The version of a checkpoint part's key (:func:`checkpoint_part_key`), None for others.

    :func:`parse_log_key` does not know parts: they are not checkpoints, only
    what one names.
    """
    m = _PART_NAME.match(key)
    return int(m.group(1)) if m else None


def parse_log_key(key: str) -> tuple[int, str] | None:
    """``(version, "commit" | "checkpoint")`` for a log key, None for anything else."""
    m = _LOG_NAME.match(key)
    if not m:
        return None
    return int(m.group(1)), "commit" if m.group(2) == "json" else "checkpoint"
