"""Output helpers for the CLI: JSON-safe values, JSON printing, and rich tables.

Machine output (``--json``) goes to stdout through :func:`emit_json` and never
through rich, so it is never coloured or wrapped. Human output is rendered
with rich, which drops colour codes by itself when stdout is not a terminal.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

#: How a null is shown in human output.
NULL_TEXT = Text("null", style="dim italic")


def json_value(value: Any) -> Any:
    """A Python value from Arrow as a JSON-encodable value.

    Dates, times and timestamps become ISO 8601 strings, decimals their exact
    text (never an exponent), durations their text, intervals DuckDB's text
    (:func:`interval_text`), binary base64, and
    non-finite floats the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
    Lists stay lists, structs objects, and maps lists of ``[key, value]`` pairs.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        if math.isnan(value):
            return "NaN"
        return "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime | date | time):  # pandas Timestamps are datetimes
        return value.isoformat()
    if isinstance(value, timedelta):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, pa.MonthDayNano):  # a tuple: before the lists
        return interval_text(value.months, value.days, value.nanoseconds)
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return str(value)


def interval_text(months: int, days: int, nanos: int) -> str:
    """A month-day-nanosecond interval as DuckDB prints it: ``1 year 2 months 3 days 04:05:06.789``.

    Each part keeps its own sign (``1 month -1 day``); the time part shows
    when it is not zero or nothing else does, with hours past 24 as they are.
    """
    years = abs(months) // 12 * (1 if months >= 0 else -1)
    parts = [
        f"{n} {unit}{'' if abs(n) == 1 else 's'}"
        for n, unit in ((years, "year"), (months - 12 * years, "month"), (days, "day"))
        if n
    ]
    if nanos or not parts:
        seconds, fraction = divmod(abs(nanos), 1_000_000_000)
        minutes, seconds = divmod(seconds, 60)
        hours, minutes = divmod(minutes, 60)
        text = f"{'-' if nanos < 0 else ''}{hours:02d}:{minutes:02d}:{seconds:02d}"
        parts.append(text + (f".{fraction:09d}".rstrip("0") if fraction else ""))
    return " ".join(parts)


def column_values(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    """Every value of an Arrow column as a JSON-encodable value.

    A column Python cannot hold (nanosecond timestamps without pandas, dates
    and timestamps outside years 1-9999, DuckDB's ``infinity``) is given as
    Arrow's text, every value of it a string.
    """
    try:
        values = column.to_pylist()
    except (ValueError, OverflowError, pa.ArrowException):
        return arrow_text(column)
    return [json_value(v) for v in values]


def arrow_text(column: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """A column's values as Arrow's text (``10183-09-21``); DuckDB's infinities as it names them."""
    texts: list[str | None] = pc.cast(column, pa.string()).to_pylist()
    kind = column.type
    if pa.types.is_date32(kind) or pa.types.is_timestamp(kind) or pa.types.is_date64(kind):
        # DuckDB's 'infinity' and '-infinity' are the storage type's largest magnitude.
        storage = pa.int32() if pa.types.is_date32(kind) else pa.int64()
        largest = 2**31 - 1 if pa.types.is_date32(kind) else 2**63 - 1
        for i, raw in enumerate(column.cast(storage).to_pylist()):
            if raw is not None and abs(raw) == largest:
                texts[i] = "infinity" if raw > 0 else "-infinity"
    return texts


def iter_rows(batch: pa.RecordBatch | pa.Table) -> Iterator[dict[str, Any]]:
    """The rows of a batch as JSON-encodable dicts, in column order (keys: :func:`json_keys`)."""
    names = json_keys(batch.schema.names)
    for values in iter_row_values(batch):
        yield dict(zip(names, values, strict=True))


def iter_row_values(batch: pa.RecordBatch | pa.Table) -> Iterator[list[Any]]:
    """The rows of a batch as lists of JSON-encodable values, in column order."""
    columns = [column_values(batch.column(i)) for i in range(batch.num_columns)]
    for i in range(batch.num_rows):
        yield [col[i] for col in columns]


def json_keys(names: Sequence[str]) -> list[str]:
    """Column names as the keys of a JSON object, which cannot repeat one.

    A name seen before gets the first free suffix ``_1``, ``_2``, ... (free:
    no column has that name), as DuckDB names a repeated column when it
    creates a table from a query; ``SELECT 1 AS a, 2 AS a`` gives ``a``, ``a_1``.
    """
    taken = set(names)
    seen: set[str] = set()
    keys = []
    for name in names:
        key = name
        if key in seen:
            n = 1
            while f"{name}_{n}" in taken:
                n += 1
            key = f"{name}_{n}"
            taken.add(key)
        seen.add(key)
        keys.append(key)
    return keys


def emit_json(payload: Any, *, lines: bool = False) -> None:
    """Print ``payload`` as JSON on stdout (compact on one line when ``lines``)."""
    if lines:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(payload, ensure_ascii=False, indent=2)
    click.echo(text)


#: The width human output is laid out for when stdout is not a terminal (and
#: ``COLUMNS`` is unset): wide, so that piped tables are not wrapped at 80.
PIPE_WIDTH = 200


def console() -> Console:
    """A rich console on the current stdout (looked up at call time, for test runners)."""
    out = Console(highlight=False)
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out = Console(highlight=False, width=PIPE_WIDTH)
    return out


def short_time(iso: str) -> str:
    """An ISO timestamp as ``YYYY-MM-DD HH:MM:SS.mmm`` in UTC, for human output."""
    moment = datetime.fromisoformat(iso)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def cell(value: Any) -> Text:
    """A JSON-encodable value as a table cell; strings are never read as rich markup.

    Control characters are escaped (:func:`escape_controls`), as in error messages.
    """
    if value is None:
        return NULL_TEXT.copy()
    if isinstance(value, bool):
        return Text("true" if value else "false")
    return Text(plain_cell(value))  # control characters escaped: data never drives the terminal


#: Control characters (C0, DEL, C1): shown escaped in human output, never sent to the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_controls(text: str) -> str:
    """``text`` with control characters escaped (``\\n``, ``\\x1b``): one line, inert."""
    return _CONTROL.sub(lambda m: _ESCAPES.get(m[0], f"\\x{ord(m[0]):02x}"), text)


def plain_cell(value: Any) -> str:
    """A JSON-encodable value as plain text on one line (``null`` for a null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return escape_controls(json.dumps(value, ensure_ascii=False))
    return escape_controls(str(value))


def human_size(size: int) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``3.2 MiB``..."""
    amount = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(amount) < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def make_table(columns: Sequence[str], *, right: Sequence[str] = ()) -> Table:
    """A rich table with the given headers; columns named in ``right`` are right-aligned."""
    table = Table(header_style="bold")
    for name in columns:
        table.add_column(
            Text(escape_controls(name)),
            justify="right" if name in right else "left",
            overflow="fold",
        )
    return table


def titled(title: str, body: RenderableType, caption: str | None = None) -> Group:
    """``body`` under a bold title line, with an optional dim caption line below.

    Unlike a rich table's own title and caption, these are not wrapped to the
    table's width.
    """
    parts: list[RenderableType] = [Text(title, style="bold"), body]
    if caption is not None:
        parts.append(Text(caption, style="dim"))
    return Group(*parts)


def key_values(rows: Sequence[tuple[str, Any]]) -> Table:
    """A two-column grid of labels and values, for a record's fields."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in rows:
        grid.add_row(Text(key), value if isinstance(value, Text) else cell(value))
    return grid


def tables_view(entries: Sequence[dict[str, Any]], title: str) -> Group:
    """A listing of tables: name, rows, files and size (``mere tables``, ``\\dt``)."""
    table = make_table(["table", "rows", "files", "size"], right=("rows", "files", "size"))
    for entry in entries:
        table.add_row(
            Text(entry["name"]),
            f"{entry['rows']:,}",
            f"{entry['files']:,}",
            human_size(entry["size_bytes"]),
        )
    return titled(title, table)
