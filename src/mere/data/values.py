"""Canonical text and JSON forms of typed values (partition values and statistics).

Partition values are stored in the log as text: the canonical text of a value
is what Arrow's cast to ``string`` produces (``"42"``, ``"2024-01-31"``,
``"true"``, ``"2024-01-31 10:00:00.000000"``; ``Z`` is appended for UTC
timestamps), and reading casts that text back to the column type.
Statistics use JSON numbers, booleans and strings where JSON has them, and
the canonical text for dates, timestamps and decimals.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from mere.errors import SchemaMismatch

#: String statistics longer than this are not recorded (they would bloat the log).
MAX_STAT_STRING = 256


def to_text(value: pa.Scalar) -> str | None:
    """The canonical text of a scalar (None for null)."""
    if not value.is_valid:
        return None
    if pat.is_string(value.type) or pat.is_large_string(value.type):
        return str(value.as_py())
    return str(pc.cast(value, pa.string()).as_py())


#: ``datetime.isoformat``'s ``timespec`` that writes a timestamp unit's digits.
_TIMESPECS = {"s": "seconds", "ms": "milliseconds", "us": "microseconds"}


def python_text(type_: pa.DataType) -> Callable[[Any], str] | None:
    """The text of ``type_``'s Python values as statistics hold it (:func:`stat_to_json`),
    computed in Python, or None.

    The same text without a kernel call, which costs more than a small
    commit's whole statistics otherwise: for dates, and for second, millisecond
    and microsecond timestamps (with a time zone: in UTC). Other types
    (decimals, nanoseconds) get None.
    """
    if pat.is_date(type_):
        return datetime.date.isoformat  # a date64's Python value is a date too
    if not pat.is_timestamp(type_) or type_.unit not in _TIMESPECS:
        return None
    timespec = _TIMESPECS[type_.unit]
    if type_.tz is None:
        return lambda value: str(value.isoformat(" ", timespec))
    if type_.tz == "UTC":
        return lambda value: value.replace(tzinfo=None).isoformat(" ", timespec) + "Z"
    return lambda value: (
        value.astimezone(datetime.UTC).replace(tzinfo=None).isoformat(" ", timespec) + "Z"
    )


def partition_text(value: pa.Scalar, column: str) -> str | None:
    """The canonical text of a partition value, checked to read back as the same value.

    Raises:
        SchemaMismatch: the text does not read back (a date after year 9999:
            Arrow writes ``10000-01-01`` but cannot parse it), so a file with
            this value would make the table unreadable.
    """
    text = to_text(value)
    try:
        same = from_text(text, value.type).equals(value)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        same = False
    if not same:
        raise SchemaMismatch(
            f"{value.type} value {text!r} of partition column {column!r} cannot be a "
            "partition value: its text does not read back as the same value"
        )
    return text


def from_text(text: str | None, type_: pa.DataType) -> pa.Scalar:
    """The scalar of ``type_`` whose canonical text is ``text``."""
    if text is None:
        return pa.scalar(None, type=type_)
    if pat.is_string(type_) or pat.is_large_string(type_):
        return pa.scalar(text, type=type_)
    return pc.cast(pa.scalar(text), type_)


def stat_to_json(value: pa.Scalar) -> Any:
    """A statistic as JSON, or None if it cannot be recorded faithfully."""
    if not value.is_valid:
        return None
    t = value.type
    if pat.is_integer(t) or pat.is_boolean(t):
        return value.as_py()
    if pat.is_floating(t):
        f = float(value.as_py())
        return f if math.isfinite(f) else None
    if pat.is_string(t) or pat.is_large_string(t):
        s = value.as_py()
        return s if len(s) <= MAX_STAT_STRING else None
    if pat.is_timestamp(t) and t.tz is not None and t.tz != "UTC":
        # In UTC: a zone's text has its offset in whole minutes, which before 1900
        # (local mean time, +05:53:28) is not the offset the value had.
        return to_text(value.cast(pa.timestamp(t.unit, "UTC")))
    if pat.is_date(t) or pat.is_timestamp(t) or pat.is_decimal(t):
        return to_text(value)
    return None


#: How far from the value a bound of a zoned timestamp written by an older mere may lie:
#: it was the zone's local time with the offset in whole minutes, and before standard
#: time a zone's offset had seconds (Kolkata's +05:53:28). Readers widen such bounds by it.
ZONED_BOUND_SLACK = datetime.timedelta(minutes=1)


def zoned_bounds_inexact(type_: pa.DataType) -> bool:
    """Whether bounds of a column of ``type_`` may be :data:`ZONED_BOUND_SLACK` off."""
    return bool(pat.is_timestamp(type_) and type_.tz not in (None, "UTC"))


def widened_bounds(lo: Any, hi: Any) -> tuple[Any, Any]:
    """Python bounds of a zoned timestamp widened by :data:`ZONED_BOUND_SLACK` (None where
    that passes Python's range: unknown)."""

    def moved(value: Any, by: datetime.timedelta) -> Any:
        try:
            return None if value is None else value + by
        except OverflowError:
            return None

    return moved(lo, -ZONED_BOUND_SLACK), moved(hi, ZONED_BOUND_SLACK)


def widened_bound_arrays(lo: pa.Array | None, hi: pa.Array | None) -> tuple[Any, Any]:
    """:func:`widened_bounds` for the arrays of every file's bounds (a checkpoint's columns)."""

    def moved(values: pa.Array | None, kernel: Any) -> Any:
        if values is None:
            return None
        slack = pa.scalar(ZONED_BOUND_SLACK, pa.duration(values.type.unit))
        return kernel(values, slack)

    return moved(lo, pc.subtract), moved(hi, pc.add)


def stat_from_json(value: Any, type_: pa.DataType) -> Any:
    """A statistic decoded to the Python value ``pyarrow`` uses for ``type_``.

    Returns None (unknown) for anything that does not decode.
    """
    if value is None:
        return None
    try:
        if pat.is_integer(type_):
            return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
        if pat.is_floating(type_):
            return (
                float(value)
                if isinstance(value, int | float) and not isinstance(value, bool)
                else None
            )
        if pat.is_boolean(type_):
            return value if isinstance(value, bool) else None
        if pat.is_string(type_) or pat.is_large_string(type_):
            return value if isinstance(value, str) else None
        if isinstance(value, str) and (
            pat.is_date(type_) or pat.is_timestamp(type_) or pat.is_decimal(type_)
        ):
            return from_text(value, type_).as_py()
    except (pa.ArrowException, ValueError):
        return None
    return None
