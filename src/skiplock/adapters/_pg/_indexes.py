"""The opt-in search indexes (docs/search.md, "The opt-in search indexes"), written once
for every driver.

Two indexes make a selective search answer whole instead of page after page, and cost
writes, so an operator adds them where searches need them (``skiplock schema index add
payload|error``): ``payload``, a GIN index of the payloads (``jsonb_path_ops``: jsonb
containment), which every enqueue pays for; ``error``, a trigram index (the ``pg_trgm``
extension) of :func:`job_error_text` over the jobs that ever failed, which a job pays for
when it fails, never at its enqueue. ``list_job_page`` reads through them when they exist
and are valid; a search gives the same jobs with or without them.

As :mod:`._migrate`, the logic is step generators a driver runs (:class:`~._migrate.Step`),
here outside any transaction: ``CREATE INDEX CONCURRENTLY`` (enqueues and workers go on
while it builds) refuses to run inside one. :func:`search_index_sql` gives the statements
for a migration tool of one's own.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import attrs

from skiplock.core import StoreError, ValidationError

from ._migrate import Step, _silent
from ._sql import neutral_query, quote_identifier

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping

    from ._migrate import Progress, Rows


@attrs.frozen
class SearchIndex:
    """One opt-in index of the job search."""

    #: What ``skiplock schema index add`` calls it: ``payload`` or ``error``.
    name: str
    #: The index's name in the store's schema (what ``list_job_page`` looks for).
    index: str
    #: The searches it serves, in words.
    serves: str
    #: What the GIN index is built over: a column of ``jobs`` or an expression, where
    #: ``{schema}`` stands for the quoted schema name.
    expression: str
    #: Its operator class (unqualified; one of :attr:`extension`'s if that is set).
    opclass: str
    #: The partial index's ``WHERE`` condition (none if empty).
    predicate: str = ""
    #: The PostgreSQL extension it needs, if any.
    extension: str | None = None

    def create_sql(self, schema: str, *, opclass_schema: str | None = None) -> str:
        """``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` of this index in ``schema``; an
        extension's operator class qualified by ``opclass_schema`` (a quoted name) if
        given, else found through the ``search_path``."""
        quoted = quote_identifier(schema)
        expression = self.expression.replace("{schema}", quoted)
        opclass = self.opclass
        if self.extension is not None and opclass_schema is not None:
            opclass = f"{opclass_schema}.{opclass}"
        sql = (
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {self.index} ON {quoted}.jobs"
            f" USING gin ({expression} {opclass})"
        )
        return f"{sql} WHERE {self.predicate}" if self.predicate else sql

    def drop_sql(self, schema: str) -> str:
        """``DROP INDEX CONCURRENTLY IF EXISTS`` of this index in ``schema``."""
        return f"DROP INDEX CONCURRENTLY IF EXISTS {quote_identifier(schema)}.{self.index}"


#: The opt-in search indexes by name, in the order ``list_job_page`` probes them.
SEARCH_INDEXES: Mapping[str, SearchIndex] = {
    index.name: index
    for index in (
        SearchIndex(
            "payload",
            "jobs_payload_search_idx",
            "payload filters (jsonb containment)",
            expression="payload",
            opclass="jsonb_path_ops",
        ),
        SearchIndex(
            "error",
            "jobs_error_search_idx",
            "error texts of 3 characters or more (last error and each attempt's)",
            expression="{schema}.job_error_text(last_error, errors)",
            opclass="gin_trgm_ops",
            # The jobs that ever failed (as jobs_errored_idx).
            predicate="(last_error IS NOT NULL OR errors IS NOT NULL)",
            extension="pg_trgm",
        ),
    )
}


def search_index(name: str) -> SearchIndex:
    """The opt-in search index ``name`` (ValidationError if there is none)."""
    found = SEARCH_INDEXES.get(name)
    if found is None:
        raise ValidationError(f"no search index {name!r}: one of {', '.join(SEARCH_INDEXES)}")
    return found


@attrs.frozen
class IndexState:
    """Whether an opt-in search index exists in a schema."""

    #: ``payload`` or ``error`` (:data:`SEARCH_INDEXES`).
    name: str
    #: The index's name in the schema.
    index: str
    #: Whether the index is there at all (``valid`` or left by an interrupted build).
    present: bool
    #: Whether searches read through it (built, not interrupted).
    valid: bool
    #: Its size on disk in bytes (None when absent).
    bytes: int | None = None

    @property
    def state(self) -> str:
        """``present``, ``absent`` or ``invalid`` (an interrupted build: add it again)."""
        if not self.present:
            return "absent"
        return "present" if self.valid else "invalid"


def index_status_steps(schema: str) -> Generator[Step, Rows, list[IndexState]]:
    """Steps that read which opt-in search indexes ``schema`` has (read-only)."""
    names = [index.index for index in SEARCH_INDEXES.values()]
    rows = yield Step(
        neutral_query("search_indexes", schema), {"schema_name": schema, "names": names}
    )
    found = {str(r["name"]): r for r in rows}
    states = []
    for index in SEARCH_INDEXES.values():
        row = found.get(index.index)
        states.append(
            IndexState(
                index.name,
                index.index,
                present=row is not None,
                valid=bool(row and row["valid"]),
                bytes=None if row is None else int(row["bytes"]),
            )
        )
    return states


def _state_of(schema: str, index: SearchIndex) -> Generator[Step, Rows, IndexState]:
    states = yield from index_status_steps(schema)
    return next(s for s in states if s.name == index.name)


def add_index_steps(
    schema: str, name: str, *, create_extension: bool = False, progress: Progress | None = None
) -> Generator[Step, Rows, bool]:
    """Steps that build the search index ``name`` in ``schema`` unless it is there;
    returns whether they built it. An invalid index (an interrupted build) is dropped and
    built again. An index needing an extension that is not installed raises StoreError
    naming it, unless ``create_extension``: then it is created first (StoreError if the
    server lacks it or the role may not create it)."""
    index = search_index(name)
    say = progress or _silent
    state = yield from _state_of(schema, index)
    if state.valid:
        say(f"{index.index} exists in schema {schema!r}")
        return False
    opclass_schema = None
    if index.extension is not None:
        opclass_schema = yield from _extension(index, create_extension, say)
    if state.present:
        say(f"dropping the invalid {index.index} an interrupted build left")
        yield Step(index.drop_sql(schema))
    say(f"building {index.index} concurrently (writes go on) ...")
    started = time.monotonic()
    yield Step(index.create_sql(schema, opclass_schema=opclass_schema))
    say(f"built {index.index} in {time.monotonic() - started:.1f} s")
    return True


def _extension(index: SearchIndex, create: bool, say: Progress) -> Generator[Step, Rows, str]:
    """The quoted schema of the index's extension, created first if ``create``."""
    extension = index.extension
    assert extension is not None
    query = neutral_query("extension_state", "skiplock")  # no schema in it
    [row] = yield Step(query, {"extension": extension})
    if row["installed_in"] is not None:
        return str(row["installed_in"])
    needs = f"the {index.name} search index needs the PostgreSQL extension {extension}"
    if not row["available"]:
        raise StoreError(
            f"{needs}, which this server does not have: install it on the server "
            "(it ships with PostgreSQL's contrib modules, e.g. the postgresql-contrib package)"
        )
    database = row["database"]
    if not create:
        raise StoreError(
            f"{needs}, not installed in database {database!r}: add it with "
            f"`CREATE EXTENSION {extension}` as a role allowed to, or let skiplock run it "
            "(--create-extension; create_extension=True)"
        )
    if not row["may_create"]:
        raise StoreError(
            f"{needs}, not installed in database {database!r}, and role {row['role']!r} "
            f"may not create it (it needs the CREATE privilege on the database): ask the "
            f"database's owner to run `CREATE EXTENSION {extension}`"
        )
    say(f"creating the extension {extension}")
    yield Step(f"CREATE EXTENSION IF NOT EXISTS {extension}")
    [row] = yield Step(query, {"extension": extension})
    return str(row["installed_in"])


def drop_index_steps(
    schema: str, name: str, *, progress: Progress | None = None
) -> Generator[Step, Rows, bool]:
    """Steps that drop the search index ``name`` from ``schema`` if it is there (valid or
    not); returns whether they dropped one. An extension it needed is left installed."""
    index = search_index(name)
    say = progress or _silent
    state = yield from _state_of(schema, index)
    if not state.present:
        say(f"{index.index} does not exist in schema {schema!r}")
        return False
    say(f"dropping {index.index} concurrently ...")
    yield Step(index.drop_sql(schema))
    say(f"dropped {index.index}")
    return True


def search_index_sql(
    name: str, schema: str = "skiplock", *, drop: bool = False, create_extension: bool = False
) -> list[str]:
    """The statements that add (or with ``drop``, remove) the search index ``name``, for a
    migration tool of one's own, each run on its own outside a transaction (Django:
    ``RunSQL`` in a migration with ``atomic = False``; Alembic: in
    ``op.get_context().autocommit_block()``). With ``create_extension`` the index's
    extension is created first if missing (``CREATE EXTENSION IF NOT EXISTS``); its
    operator class is then found through the ``search_path``. Idempotent, but an index
    an interrupted build left invalid stays so: ``skiplock schema index add`` rebuilds it."""
    index = search_index(name)
    if drop:
        return [index.drop_sql(schema)]
    statements = []
    if create_extension and index.extension is not None:
        statements.append(f"CREATE EXTENSION IF NOT EXISTS {index.extension}")
    statements.append(index.create_sql(schema))
    return statements
