"""Alembic helpers: skiplock's migrations inside your revisions, autogenerate filters.

In a revision (``alembic revision -m "skiplock"``)::

    from skiplock.adapters.sqlalchemy.alembic import apply_skiplock_migrations

    def upgrade() -> None:
        apply_skiplock_migrations(op)

It applies the same versioned SQL migrations as ``skiplock schema apply`` (pending ones
only, under an advisory lock), so a later skiplock release is picked up by a new revision
that calls it again. In ``env.py``, keep autogenerate away from skiplock's tables::

    from skiplock.adapters.sqlalchemy.alembic import include_name, include_object

    context.configure(
        ..., include_schemas=True, include_name=include_name(), include_object=include_object()
    )

Alembic itself is only needed to run Alembic (``pip install skiplock[alembic]``); this
module does not import it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Connection, Table

from skiplock.core import validate_identifier

from ._store import SessionJobStore

if TYPE_CHECKING:
    from alembic.operations import Operations
    from alembic.runtime.environment import (
        IncludeNameFn,
        IncludeObjectFn,
        NameFilterParentNames,
        NameFilterType,
    )
    from sqlalchemy.sql.schema import SchemaItem

__all__ = ["apply_skiplock_migrations", "include_name", "include_object"]


def apply_skiplock_migrations(
    op_or_connection: Operations | Connection, schema: str = "skiplock"
) -> list[str]:
    """Apply skiplock's pending migrations to ``schema``; returns the names applied.

    Pass Alembic's ``op`` (its connection and transaction are used) or a SQLAlchemy
    ``Connection`` (its open transaction, else one of its own that commits). Also works
    on an asyncio engine's connection inside ``run_sync`` (Alembic's async template).
    Offline mode (``alembic upgrade --sql``) has no database to ask what is applied: use
    the output of ``skiplock schema sql`` there instead.
    """
    validate_identifier(schema)
    conn: object = op_or_connection
    if not isinstance(op_or_connection, Connection):
        conn = op_or_connection.get_bind()
    if not isinstance(conn, Connection):  # offline mode: None or a mock connection
        raise RuntimeError(
            "apply_skiplock_migrations needs a database connection; in Alembic's offline "
            "(--sql) mode include the output of `skiplock schema sql` instead"
        )
    # The store's own migration path, in the connection's transaction (never committed
    # there: Alembic commits it); its engine is only named, no pool connection is taken.
    store = SessionJobStore(conn.engine, schema=schema)
    if conn.in_transaction():
        return store.apply_schema(connection=conn)
    with conn.begin():
        return store.apply_schema(connection=conn)


def _schema_of(item: SchemaItem | None) -> str | None:
    """The schema of a table, or of the table a column, index or constraint belongs to."""
    table = item if isinstance(item, Table) else getattr(item, "table", None)
    return table.schema if isinstance(table, Table) else None


def include_name(schema: str = "skiplock", *, then: IncludeNameFn | None = None) -> IncludeNameFn:
    """An ``include_name`` filter for ``context.configure`` that hides skiplock's schema
    (and everything in it) from autogenerate; other names go to ``then`` if given."""
    validate_identifier(schema)

    def include(
        name: str | None, type_: NameFilterType, parent_names: NameFilterParentNames
    ) -> bool:
        if type_ == "schema" and name == schema:
            return False
        if parent_names.get("schema_name") == schema:
            return False
        return then(name, type_, parent_names) if then is not None else True

    return include


def include_object(
    schema: str = "skiplock", *, then: IncludeObjectFn | None = None
) -> IncludeObjectFn:
    """An ``include_object`` filter for ``context.configure`` that skips tables (and their
    columns, indexes and constraints) in skiplock's schema; others go to ``then``."""
    validate_identifier(schema)

    def include(
        obj: SchemaItem,
        name: str | None,
        type_: NameFilterType,
        reflected: bool,
        compare_to: SchemaItem | None,
    ) -> bool:
        if schema in (_schema_of(obj), _schema_of(compare_to)):
            return False
        return then(obj, name, type_, reflected, compare_to) if then is not None else True

    return include
