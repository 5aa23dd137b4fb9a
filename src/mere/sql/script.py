"""A SQL script as statements: splitting, classifying, parameters and time travel.

sqlglot's tokenizer (DuckDB dialect) does the lexing, so semicolons, ``?``
and ``FOR`` inside strings, quoted names and comments are never mistaken for
syntax. Nothing here formats values into SQL text.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlglot.dialects.duckdb import DuckDB
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from mere.errors import InvalidArgument
from mere.sql.errors import SQLError, UnsupportedSQL
from mere.timestamps import epoch_ms

Kind = Literal["query", "command", "transaction"]
Params = Sequence[Any] | Mapping[str, Any] | None

_QUERY_STARTS = {"SELECT", "WITH", "VALUES", "FROM", "TABLE", "(", "EXPLAIN", "SUMMARIZE"}
_COMMANDS = {"INSERT", "UPDATE", "DELETE", "MERGE", "CREATE", "DROP", "ALTER"}
_TRANSACTION = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE"}
_NAME_TOKENS = (TokenType.VAR, TokenType.IDENTIFIER)


@dataclass
class Statement:
    """One statement of a script, with the parameters that belong to it."""

    text: str
    tokens: list[Token]
    kind: Kind
    keyword: str
    params: Sequence[Any] | Mapping[str, Any] | None = None
    placeholders: list[int | str] = field(default_factory=list)  # in order of appearance

    def words(self) -> list[str]:
        """The statement's tokens as upper-case text (for transaction control)."""
        return [t.text.upper() for t in self.tokens]


def tokenize(text: str) -> list[Token]:
    try:
        return list(DuckDB().tokenize(text))
    except TokenError as exc:
        raise SQLError(f"cannot read the SQL text: {exc}") from None


def split_script(text: str, params: Params = None) -> list[Statement]:
    """The statements of ``text`` in order, each with its share of ``params``.

    ``?`` placeholders take positional parameters in order across the whole
    script; ``$1``, ``$2``, ... name positions in the whole list; ``$name``
    takes a value from a mapping.

    Raises:
        SQLError: the text cannot be tokenized.
        InvalidArgument: the parameters do not fit the placeholders.
        UnsupportedSQL: a statement is neither a query, a supported command,
            nor transaction control.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"SQL text must be a string, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (from bytes decoded with escapes)
        raise InvalidArgument(
            f"SQL text is not valid Unicode: {text[exc.start]!r} at offset {exc.start}"
        ) from None
    if params is not None and (isinstance(params, str | bytes) or not _is_params(params)):
        raise InvalidArgument("params must be a list/tuple of values or a dict of named values")
    tokens = tokenize(text)
    if any(tok.token_type == TokenType.QDCOLON for tok in tokens):
        text = _spaced_placeholder_casts(text, tokens)
        tokens = tokenize(text)
    pieces: list[list[Token]] = [[]]
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            pieces.append([])
        else:
            pieces[-1].append(tok)
    statements = []
    for piece in pieces:
        if not piece:
            continue
        start, end = piece[0].start, piece[-1].end + 1
        body = text[start:end]
        shifted = [_shift(t, start) for t in piece]
        statements.append(_classify(body, shifted))
    _assign_params(statements, params)
    return statements


def _spaced_placeholder_casts(text: str, tokens: list[Token]) -> str:
    """``text`` with each placeholder cast ``?::type`` written ``? ::type``.

    sqlglot reads ``?::`` as one token, neither a placeholder nor a cast, and
    cannot parse it in a statement; DuckDB reads both spellings alike.
    """
    out, at = [], 0
    for tok in tokens:
        if tok.token_type == TokenType.QDCOLON:
            out += [text[at : tok.start], "? ::"]
            at = tok.end + 1
    return "".join([*out, text[at:]])


def _did_you_mean(word: str) -> str | None:
    """A hint naming the statement keyword closest to a misspelt first word, if one is close."""
    keywords = sorted((_QUERY_STARTS | _COMMANDS | _TRANSACTION) - {"("})
    close = difflib.get_close_matches(word, keywords, n=1, cutoff=0.75)
    return f"did you mean {close[0]}?" if close else None


def _is_params(params: object) -> bool:
    return isinstance(params, Mapping) or isinstance(params, list | tuple)


def _shift(tok: Token, offset: int) -> Token:
    return Token(
        tok.token_type,
        tok.text,
        tok.line,
        tok.col,
        tok.start - offset,
        tok.end - offset,
        tok.comments,
    )


def _classify(text: str, tokens: list[Token]) -> Statement:
    first = tokens[0].text.upper() if tokens[0].token_type != TokenType.L_PAREN else "("
    if first in _QUERY_STARTS:
        kind: Kind = "query"
    elif first in _COMMANDS:
        kind = "command"
    elif first in _TRANSACTION:
        kind = "transaction"
    elif tokens[0].token_type in _NAME_TOKENS:  # not a keyword at all: a typo, say
        raise SQLError(f'syntax error at or near "{tokens[0].text}"', help=_did_you_mean(first))
    else:
        raise UnsupportedSQL(
            f"{first} statements are not supported by mere's SQL",
            help="supported: queries (SELECT, WITH, VALUES, FROM, TABLE), INSERT, UPDATE, "
            "DELETE, MERGE, CREATE TABLE, DROP TABLE, ALTER TABLE, BEGIN, COMMIT, ROLLBACK, "
            "SAVEPOINT, ROLLBACK TO SAVEPOINT, RELEASE",
        )
    placeholders: list[int | str] = []
    for i, tok in enumerate(tokens):
        if tok.token_type == TokenType.PLACEHOLDER and tok.text == "?":
            placeholders.append(-1)
        elif tok.token_type == TokenType.PARAMETER and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt.token_type == TokenType.NUMBER and nxt.text.isdigit():
                placeholders.append(int(nxt.text))
            else:
                placeholders.append(nxt.text)
    return Statement(text, tokens, kind, first, placeholders=placeholders)


def _assign_params(statements: list[Statement], params: Params) -> None:
    used = [p for s in statements for p in s.placeholders]
    if params is None:
        if used:
            raise InvalidArgument(
                f"the SQL has {len(used)} parameter placeholder(s) but no params were given"
            )
        return
    if isinstance(params, Mapping):
        wanted = {p for p in used if isinstance(p, str)}
        if any(not isinstance(p, str) for p in used):
            raise InvalidArgument("positional placeholders (? or $1) need a list of params")
        missing = sorted(wanted - set(params))
        if missing:
            raise InvalidArgument(f"no value given for parameter(s) {missing}")
        for s in statements:
            names = {p for p in s.placeholders if isinstance(p, str)}
            s.params = {k: v for k, v in params.items() if k in names} if names else None
        return
    values = list(params)
    if any(isinstance(p, str) for p in used):
        raise InvalidArgument("named placeholders ($name) need a dict of params")
    question = sum(1 for p in used if p == -1)
    numbered = [p for p in used if isinstance(p, int) and p > 0]
    if question and numbered:
        raise InvalidArgument("do not mix ? and $1-style placeholders in one script")
    if numbered:
        if max(numbered) > len(values):
            raise InvalidArgument(f"${max(numbered)} refers past the {len(values)} params given")
        for s in statements:
            mine = [p for p in s.placeholders if isinstance(p, int) and p > 0]
            s.params = values[: max(mine)] if mine else None
        return
    if question != len(values):
        raise InvalidArgument(
            f"the SQL has {question} ? placeholder(s) but {len(values)} params were given"
        )
    position = 0
    for s in statements:
        count = sum(1 for p in s.placeholders if p == -1)
        s.params = values[position : position + count] if count else None
        position += count


# --- time travel ------------------------------------------------------------------


@dataclass(frozen=True)
class TimeTravel:
    """One table reference read at another version: ``relation`` names it in the query."""

    relation: str
    table: str
    version: int | None = None
    timestamp_ms: int | None = None
    #: ``FOR SYSTEM_VERSION AS OF 'name'``: the version of a live export or tag.
    name: str | None = None


def rewrite_time_travel(statement: Statement) -> tuple[str, list[TimeTravel]]:
    """Replace each ``t FOR SYSTEM_VERSION|SYSTEM_TIME AS OF x`` by a relation of its own.

    The reference becomes ``"__mere_asof_<n>" AS t`` (or keeps the alias the
    query gives it), so column references ``t.col`` still resolve. The value
    must be a literal: an integer version, a string naming an export or tag
    (for ``SYSTEM_VERSION``), or a timestamp as
    ``TIMESTAMP '...'``, ``TIMESTAMPTZ '...'``, ``DATE '...'`` or a string
    (ISO 8601; UTC unless it carries an offset).

    Raises:
        SQLError: the clause is malformed or its value is not a literal.
    """
    tokens, text = statement.tokens, statement.text
    out: list[str] = []
    travels: list[TimeTravel] = []
    cursor = 0
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        period = tokens[i + 1].text.upper() if i + 1 < len(tokens) else ""
        if tok.token_type != TokenType.FOR or period not in ("SYSTEM_VERSION", "SYSTEM_TIME"):
            i += 1
            continue
        clause = f"FOR {period} AS OF"
        words = [t.text.upper() for t in tokens[i + 2 : i + 4]]
        if words != ["AS", "OF"]:
            raise SQLError(f"expected {clause} <value> after the table name")
        if i == 0 or tokens[i - 1].token_type not in _NAME_TOKENS:
            raise SQLError(f"{clause} must follow a table name")
        name_start = i - 1
        if i >= 3 and tokens[i - 2].token_type == TokenType.DOT:
            name_start = i - 3  # schema.table
        table = tokens[i - 1].text
        j = i + 4
        named: str | None = None
        if (
            period == "SYSTEM_VERSION"
            and j < len(tokens)
            and tokens[j].token_type == TokenType.STRING
        ):
            version, moment, named, j = None, None, tokens[j].text, j + 1
        else:
            version, moment, j = _as_of_value(tokens, j, period, clause)
        relation = f"__mere_asof_{len(travels)}"
        travels.append(TimeTravel(relation, table, version, moment, named))
        has_alias = j < len(tokens) and tokens[j].token_type in (TokenType.ALIAS, *_NAME_TOKENS)
        out.append(text[cursor : tokens[name_start].start])
        out.append(_quote(relation) + ("" if has_alias else f" AS {_quote(table)}"))
        cursor = tokens[j - 1].end + 1
        i = j
    out.append(text[cursor:])
    return "".join(out), travels


def _as_of_value(
    tokens: list[Token], j: int, period: str, clause: str
) -> tuple[int | None, int | None, int]:
    if j >= len(tokens):
        raise SQLError(f"{clause} needs a value")
    tok = tokens[j]
    if period == "SYSTEM_VERSION":
        if tok.token_type == TokenType.NUMBER and tok.text.isdigit():
            return int(tok.text), None, j + 1
        raise SQLError(
            f"{clause} takes a version number literal or an export name, not {tok.text!r}",
            help="parameters and expressions are not supported there",
        )
    text: str | None = None
    if tok.token_type == TokenType.STRING:
        text, j = tok.text, j + 1
    elif tok.text.upper() in ("TIMESTAMP", "TIMESTAMPTZ", "DATE") and j + 1 < len(tokens):
        if tokens[j + 1].token_type == TokenType.STRING:
            text, j = tokens[j + 1].text, j + 2
    if text is None:
        raise SQLError(
            f"{clause} takes a timestamp literal (TIMESTAMP '2024-05-01 12:00:00'), "
            f"not {tok.text!r}",
            help="parameters and expressions are not supported there",
        )
    try:
        return None, epoch_ms(text), j
    except (ValueError, TypeError) as exc:
        raise SQLError(f"{clause}: cannot read {text!r} as a timestamp: {exc}") from None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def quote_identifier(name: str) -> str:
    """``name`` as a double-quoted SQL identifier."""
    return _quote(name)


__all__ = [
    "Statement",
    "TimeTravel",
    "quote_identifier",
    "rewrite_time_travel",
    "split_script",
    "tokenize",
]
