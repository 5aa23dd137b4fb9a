"""Errors of the SQL layer (both are :class:`~mere.errors.MereError`)."""

from __future__ import annotations

from mere.errors import MereError


class SQLError(MereError):
    """A SQL statement could not be run: it does not parse, bind or evaluate.

    DuckDB's own error (a parser, binder, conversion or catalog error) is
    chained as ``__cause__`` and its message repeated in this one. Errors of
    mere's verbs (``TableNotFound``, ``ConstraintViolation``, conflicts, ...)
    are raised as they are, not wrapped.
    """


class UnsupportedSQL(SQLError, NotImplementedError):
    """The statement uses a construct mere's SQL does not support; nothing was changed.

    The message names the construct.
    """


__all__ = ["SQLError", "UnsupportedSQL"]
