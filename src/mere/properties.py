"""Database and table properties mere reads, with their defaults, parsing and validation.

They live in the ``database`` action (docs/format.md §2.3): set at creation
(``connect(checkpoint_interval=...)``) and changed later with
``db.set_properties``. One module knows them, so that what a transaction
accepts and what the readers of a property understand cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta

from mere.errors import InvalidArgument

#: How often writers checkpoint, in commits (decimal text).
CHECKPOINT_INTERVAL_PROPERTY = "checkpointInterval"
DEFAULT_CHECKPOINT_INTERVAL = 100

#: Default minimum retention for vacuum and expire (overridden by the database
#: property below, or by the ``min_retention`` keyword).
DEFAULT_MIN_RETENTION = timedelta(hours=1)
#: Database property holding the minimum retention, as a duration (``"1h"``, ``"7d"``, ``"3600"``).
MIN_RETENTION_PROPERTY = "vacuumMinRetention"

#: Table property: the size compaction packs the table's files up to (decimal
#: bytes; absent: the database's target file size).
TARGET_FILE_SIZE_PROPERTY = "targetFileSize"

#: Data files of at most this many bytes are inlined in their commit (decimal
#: text; absent or 0: never). Setting it moves the database to format version 3.
INLINE_LIMIT_PROPERTY = "inlineLimit"
#: The limit a user who turns inlining on without a size usually wants.
DEFAULT_INLINE_LIMIT = 64 * 1024
#: The most inlined bytes a table keeps before a checkpoint moves them to
#: ordinary data files (decimal text).
INLINE_FLUSH_PROPERTY = "inlineFlushBytes"
DEFAULT_INLINE_FLUSH = 8 * 1024 * 1024
#: Inlined data files are at most this large, whatever the property says.
MAX_INLINE_LIMIT = 1024 * 1024
#: A table's inlined bytes stay well below what one Arrow binary column holds (2 GiB).
MAX_INLINE_FLUSH = 256 * 1024 * 1024

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d|w)?", re.IGNORECASE)
_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}


def parse_duration(text: str) -> timedelta:
    """A duration written as ``90``, ``90s``, ``15m``, ``1h30m``, ``7d``, ``2w`` or ``500ms``.

    A bare number means seconds.

    Raises:
        ValueError: the text is not a duration.
    """
    source = text.strip()
    if not source:
        raise InvalidArgument("an empty duration")
    seconds = 0.0
    pos = 0
    while pos < len(source):
        match = _DURATION_PART.match(source, pos)
        if match is None or match.end() == pos:
            raise InvalidArgument(
                f"{text!r} is not a duration (examples: 3600, 90s, 15m, 1h30m, 7d, 2w)"
            )
        unit = (match.group(2) or "s").lower()
        seconds += float(match.group(1)) * _UNITS[unit]
        pos = match.end()
        while pos < len(source) and source[pos] == " ":
            pos += 1
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidArgument(
            f"{text!r} is a longer duration than can be held (at most 999999999 days)"
        ) from None


def minimum_retention(
    properties: Mapping[str, str], override: timedelta | None = None
) -> timedelta:
    """The minimum retention: the override, else the database property, else 1 hour.

    Raises:
        ValueError: the database property is not a duration.
    """
    if override is not None:
        return override
    text = properties.get(MIN_RETENTION_PROPERTY)
    if text is None:
        return DEFAULT_MIN_RETENTION
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise InvalidArgument(f"database property {MIN_RETENTION_PROPERTY}: {exc}") from None


def checkpoint_interval(properties: Mapping[str, str]) -> int:
    """The checkpoint interval the properties ask for (the default when unset or unusable).

    Tolerant, because a log written by another writer may hold anything; what
    mere itself writes is checked by :func:`check_database_properties`.
    """
    try:
        return max(
            1, int(properties.get(CHECKPOINT_INTERVAL_PROPERTY, DEFAULT_CHECKPOINT_INTERVAL))
        )
    except ValueError:
        return DEFAULT_CHECKPOINT_INTERVAL


def _whole(properties: Mapping[str, str], name: str, default: int) -> int:
    text = properties.get(name)
    if text is None or not (text.isascii() and text.isdigit()):
        return default
    return int(text)


def inline_limit(properties: Mapping[str, str]) -> int:
    """The size up to which data files are inlined (0: never; tolerant like the interval)."""
    return min(_whole(properties, INLINE_LIMIT_PROPERTY, 0), MAX_INLINE_LIMIT)


def inline_flush_bytes(properties: Mapping[str, str]) -> int:
    """How many inlined bytes a table holds before a checkpoint flushes them to files."""
    return min(_whole(properties, INLINE_FLUSH_PROPERTY, DEFAULT_INLINE_FLUSH), MAX_INLINE_FLUSH)


def check_database_properties(properties: Mapping[str, str]) -> None:
    """Raise ValueError when a property mere reads has a value it cannot use."""
    for name, most in (
        (INLINE_LIMIT_PROPERTY, MAX_INLINE_LIMIT),
        (INLINE_FLUSH_PROPERTY, MAX_INLINE_FLUSH),
    ):
        text = properties.get(name)
        if text is not None and not (text.isascii() and text.isdigit() and int(text) <= most):
            raise InvalidArgument(
                f"database property {name} must be a whole number of bytes up to {most}, "
                f"not {text!r}"
            )
    interval = properties.get(CHECKPOINT_INTERVAL_PROPERTY)
    whole = interval is None or (interval.isascii() and interval.isdigit())
    if interval is not None and not (whole and int(interval) >= 1):
        raise InvalidArgument(
            f"database property {CHECKPOINT_INTERVAL_PROPERTY} must be a whole number >= 1, "
            f"not {interval!r}"
        )
    minimum_retention(properties)


def check_table_properties(properties: Mapping[str, str]) -> None:
    """Raise InvalidArgument when a table property mere reads has a value it cannot use,
    so that a bad value is refused where it is set, not at the first compaction."""
    text = properties.get(TARGET_FILE_SIZE_PROPERTY)
    if text is not None and not (text.isascii() and text.isdigit() and int(text) >= 1):
        raise InvalidArgument(
            f"table property {TARGET_FILE_SIZE_PROPERTY} must be a whole number of bytes >= 1, "
            f"not {text!r}"
        )
