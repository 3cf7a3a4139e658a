"""Loading the shared SQL files and converting their placeholders per driver.

The files under ``sql/`` are written once: ``{schema}`` stands for the quoted schema
name, ``{channel}`` for the NOTIFY channel, ``{_fragment}`` for a named fragment of
``queries.sql``, ``{min_time}``, ``{max_time}``, ``{max_int4}`` and
``{max_recorded_errors}`` in ``queries.sql`` for the core's constants
(:data:`CONSTANTS`), and values are ``:name`` parameters. Each driver converts the
neutral text at load time (psycopg: ``%(name)s``; asyncpg: ``$n``; SQLAlchemy
``text()``: ``:name``), and the results are cached.
"""

from __future__ import annotations

import functools
import hashlib
import re
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

import attrs

from skiplock.core import (
    MAX_AVAILABLE_AT,
    MAX_RECORDED_ERRORS,
    MIN_AVAILABLE_AT,
    validate_identifier,
)
from skiplock.core.store import INT4_RANGE

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import datetime

#: PostgreSQL's identifier limit (NAMEDATALEN - 1); NOTIFY channels share it.
MAX_NAME_BYTES = 63

# ":name" but not the "::type" of a cast (neither colon may follow a colon or a word).
_PARAM_RE = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")
_HEADER_RE = re.compile(r"^--\s*name:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT_RE = re.compile(r"\{(_[a-z0-9_]+)\}")
#: A ``::type[]`` cast right after a parameter: an array parameter.
_ARRAY_CAST_RE = re.compile(r"::\s*[A-Za-z_][A-Za-z0-9_ ]*\[\]")

Style = Literal["pyformat", "numeric", "named"]


def _time_literal(value: datetime) -> str:
    return f"'{value.isoformat()}'::timestamptz"


#: The core's bounds as SQL literals, substituted into ``queries.sql`` at load time: the
#: timestamps Python reads back in any session time zone, ``integer``'s maximum, and how
#: many failed attempts a job records.
CONSTANTS: Mapping[str, str] = {
    "min_time": _time_literal(MIN_AVAILABLE_AT),
    "max_time": _time_literal(MAX_AVAILABLE_AT),
    "max_int4": str(INT4_RANGE[1]),
    "max_recorded_errors": str(MAX_RECORDED_ERRORS),
}


def quote_identifier(name: str) -> str:
    """Validate ``name`` and return it double-quoted for SQL."""
    return '"' + validate_identifier(name) + '"'


def channel_name(schema: str) -> str:
    """The NOTIFY channel of a schema: ``<schema>_jobs``, shortened with a hash if needed."""
    validate_identifier(schema)
    name = f"{schema}_jobs"
    if len(name) <= MAX_NAME_BYTES:
        return name
    digest = hashlib.blake2b(schema.encode(), digest_size=4).hexdigest()
    return f"{schema[: MAX_NAME_BYTES - len(digest) - 6]}_{digest}_jobs"


def lock_key(schema: str, purpose: str, name: str = "") -> int:
    """A stable signed 64-bit advisory-lock key for ``purpose`` (and ``name``) in ``schema``.

    Derived from a hash so two schemas in one database (or two kinds) never share a lock
    and every driver computes the same key.
    """
    text = f"skiplock\x00{schema}\x00{purpose}\x00{name}"
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def read_resource(*parts: str) -> str:
    """Text of a file under ``skiplock/adapters/_pg/sql``."""
    node = resources.files(__package__).joinpath("sql")
    for part in parts:
        node = node.joinpath(part)
    return node.read_text(encoding="utf-8")


def render(template: str, schema: str) -> str:
    """Substitute ``{schema}`` and ``{channel}`` in a DDL or query template."""
    return template.replace("{schema}", quote_identifier(schema)).replace(
        "{channel}", channel_name(schema)
    )


def parse_blocks(text: str) -> dict[str, str]:
    """Split a ``-- name: x`` file into ``{name: body}``; comment lines are dropped."""
    headers = list(_HEADER_RE.finditer(text))
    blocks: dict[str, str] = {}
    for i, match in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        lines = [
            line
            for line in text[match.end() : end].splitlines()
            if line.strip() and not line.lstrip().startswith("--")
        ]
        name = match.group(1)
        if name in blocks:
            raise ValueError(f"duplicate query name {name!r}")
        blocks[name] = "\n".join(lines).rstrip().rstrip(";")
    return blocks


def expand_fragments(blocks: Mapping[str, str], version: int | None = None) -> dict[str, str]:
    """Replace ``{_fragment}`` references; return the public (non-fragment) queries.

    A fragment may have variants for older schemas: ``_name_before_NNNN`` is ``_name``
    on a schema older than migration NNNN. With ``version`` (the schema's migration), a
    reference to ``_name`` takes its variant of the smallest NNNN above ``version``, if
    any; without it, ``_name`` itself (the current schema)."""

    def chosen(name: str) -> str:
        if version is None:
            return name
        variants = [
            int(m.group(1))
            for other in blocks
            if (m := re.fullmatch(re.escape(name) + r"_before_(\d{4})", other))
        ]
        newer = [n for n in variants if version < n]
        return f"{name}_before_{min(newer):04d}" if newer else name

    def expand(body: str, depth: int = 0) -> str:
        if depth > 5:
            raise ValueError("fragments nested too deeply")
        return _FRAGMENT_RE.sub(lambda m: expand(blocks[chosen(m.group(1))], depth + 1), body)

    return {name: expand(body) for name, body in blocks.items() if not name.startswith("_")}


@attrs.frozen
class Query:
    """One query converted for a driver: its text and its parameters in order."""

    name: str
    text: str
    params: tuple[str, ...]

    def args(self, values: Mapping[str, Any]) -> list[Any]:
        """Positional arguments for a numeric-style (``$n``) query."""
        missing = [p for p in self.params if p not in values]
        if missing:
            raise KeyError(f"query {self.name!r} needs parameters {missing}")
        return [values[p] for p in self.params]


def convert(text: str, style: Style, name: str = "<sql>") -> Query:
    """Convert neutral ``:name`` parameters to ``style``.

    ``named`` is for SQLAlchemy's ``text()``: the names stay, but a ``::`` cast right after
    one is moved off by a space (``text()`` does not see ``:name::int`` as a parameter);
    ``text()`` escapes ``%`` itself.
    """
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param not in order:
            order.append(param)
        if style == "named":
            return f":{param} " if match.string.startswith(":", match.end()) else f":{param}"
        if style == "pyformat":
            # Arrays go in binary: psycopg's text array dumper quotes element by element
            # in Python (a regex per element), the binary one does not.
            binary = _ARRAY_CAST_RE.match(match.string, match.end())
            return f"%({param})b" if binary else f"%({param})s"
        return f"${order.index(param) + 1}"

    if style == "pyformat":
        # A literal "%" would be read as a placeholder once parameters are passed.
        text = text.replace("%", "%%")
    return Query(name=name, text=_PARAM_RE.sub(number, text), params=tuple(order))


@functools.cache
def _blocks() -> Mapping[str, str]:
    text = read_resource("queries.sql")
    for name, value in CONSTANTS.items():
        text = text.replace("{" + name + "}", value)
    return parse_blocks(text)


@functools.cache
def _neutral_queries() -> Mapping[str, str]:
    return expand_fragments(_blocks())


@functools.cache
def queries(schema: str, style: Style) -> Mapping[str, Query]:
    """Every named query of ``queries.sql`` for ``schema``, converted to ``style``."""
    return {
        name: convert(render(body, schema), style, name)
        for name, body in _neutral_queries().items()
    }


@functools.cache
def versioned_query(name: str, schema: str, style: Style, version: int) -> Query:
    """The query ``name`` for a schema at migration ``version`` (a read that reports an
    older schema rather than refusing it): its fragments' variants for that version
    (:func:`expand_fragments`), converted to ``style``. The same as :func:`queries`'s on
    the current schema."""
    return convert(render(expand_fragments(_blocks(), version)[name], schema), style, name)


@functools.cache
def neutral_query(name: str, schema: str) -> str:
    """One named query for ``schema`` with its ``:name`` parameters unconverted."""
    return render(_neutral_queries()[name], schema)


@functools.cache
def convert_cached(text: str, style: Style) -> Query:
    """:func:`convert`, cached (drivers running :class:`~._migrate.Step` objects use it)."""
    return convert(text, style)


def query_names() -> Sequence[str]:
    """Names of the public queries (for tests and other adapters)."""
    return sorted(_neutral_queries())
