"""Validation of user-supplied names, and encoding of partition values in paths.

No user string becomes a path segment unchecked (DESIGN.md §11): table names
never appear in paths at all (tables live under their generated id), partition
column names must be plain identifiers, and partition values are escaped the
way Hive and Spark escape them, so a value such as ``../x`` or ``a/b`` stays
inside its one path segment.
"""

from __future__ import annotations

import re

from mere.errors import InvalidName

MAX_TABLE_NAME = 128
MAX_COLUMN_NAME = 255

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_table_name(name: object) -> str:
    """Return ``name`` if it is a valid table name, else raise InvalidName.

    Table names are ASCII identifiers (letters, digits, underscore; not
    starting with a digit), at most 128 characters. Names are case-sensitive,
    but two tables may not differ only in case (see :func:`name_key`).
    """
    if not isinstance(name, str):
        raise InvalidName(f"table name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidName("table name must not be empty")
    if len(name) > MAX_TABLE_NAME:
        raise InvalidName(
            f"table name is longer than {MAX_TABLE_NAME} characters: {name[:40]!r}..."
        )
    if not _IDENTIFIER.match(name):
        raise InvalidName(
            f"invalid table name {name!r}: use letters, digits and underscores, "
            "not starting with a digit"
        )
    return name


#: Names mere gives the relations of its own SQL statements (``__mere_target``, ...).
RESERVED_TABLE_PREFIX = "__mere_"


def check_new_table_name(name: object) -> str:
    """:func:`check_table_name` for a table being created: names starting with
    :data:`RESERVED_TABLE_PREFIX` are mere's own in SQL, where such a table could not
    be read."""
    check_table_name(name)
    assert isinstance(name, str)
    if name.lower().startswith(RESERVED_TABLE_PREFIX):
        raise InvalidName(
            f"invalid table name {name!r}: names starting with {RESERVED_TABLE_PREFIX!r} are "
            "reserved for mere's own SQL"
        )
    return name


def name_key(name: str) -> str:
    """The key under which names collide: table and column names are unique ignoring case."""
    return name.casefold()


def check_column_name(name: object, *, partition: bool = False) -> str:
    """Return ``name`` if it is a valid column name, else raise InvalidName.

    Data columns may hold any printable text (no NUL or control characters),
    at most 255 characters. Partition columns also name a path segment, so
    they must be identifiers like table names.
    """
    if not isinstance(name, str):
        raise InvalidName(f"column name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidName("column name must not be empty")
    if len(name) > MAX_COLUMN_NAME:
        raise InvalidName(f"column name is longer than {MAX_COLUMN_NAME} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in name):
        raise InvalidName(f"column name {name!r} contains a control character")
    if partition and not _IDENTIFIER.match(name):
        raise InvalidName(
            f"invalid partition column name {name!r}: partition columns must be "
            "identifiers (letters, digits and underscores)"
        )
    return name


# Hive's escapePathName set: what Spark escapes in partition directory names.
_ESCAPED = set("\"#%'*/:=?\\{[]^") | {chr(c) for c in range(32)} | {"\x7f"}

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def escape_partition_value(value: str | None) -> str:
    """Encode a partition value as one path segment, as Hive and Spark do.

    ``None`` becomes ``__HIVE_DEFAULT_PARTITION__``; the empty string too (as
    in Spark). Non-ASCII characters are kept, which is what Spark's unescaping
    expects.
    """
    if value is None or value == "":
        return NULL_PARTITION
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED else ch for ch in value)
