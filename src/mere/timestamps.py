"""Moments in time as users give them, turned into mere's commit-time unit (ms since the epoch).

One rule everywhere (Python API, CLI, Spark options): an ``int`` is
milliseconds since the Unix epoch; a ``datetime`` with a time zone is that
instant; a naive ``datetime`` or an ISO 8601 string without an offset is UTC;
a ``date`` is its midnight UTC; a string is ISO 8601 (``2026-11-23``,
``2026-11-23T21:37:04Z``, ``2026-11-23 21:37:04+01:00``).
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from mere.errors import InvalidArgument

#: What a caller may pass as a moment.
Moment = datetime | date | str | int


def epoch_ms(moment: Moment) -> int:
    """Milliseconds since the epoch for ``moment`` (see the module docstring).

    Raises:
        InvalidArgument: not a moment mere can read (the message says which forms are).
    """
    if isinstance(moment, bool):
        raise InvalidArgument(f"a timestamp cannot be a bool ({moment!r})")
    if isinstance(moment, int):
        return moment
    if isinstance(moment, str):
        moment = _parse(moment)
    if isinstance(moment, datetime):
        aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
        return int(aware.timestamp() * 1000)
    if isinstance(moment, date):
        return int(datetime(moment.year, moment.month, moment.day, tzinfo=UTC).timestamp() * 1000)
    raise InvalidArgument(
        f"a timestamp is a datetime, a date, an ISO 8601 string or ms since the epoch, "
        f"not {type(moment).__name__}"
    )


def _parse(text: str) -> datetime:
    stripped = text.strip()
    try:
        # Python 3.11 reads "Z" and a space separator; a bare date gives midnight.
        return datetime.fromisoformat(stripped)
    except ValueError:
        raise InvalidArgument(
            f"{text!r} is not an ISO 8601 timestamp (e.g. 2026-11-23 or 2026-11-23T21:37:04Z)"
        ) from None


__all__ = ["Moment", "epoch_ms"]
