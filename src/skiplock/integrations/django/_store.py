"""The backend's store: skiplock's psycopg store whose ``connection=`` also takes Django's
connection (``django.db.connections[alias]``), running the store's SQL through Django's
cursor layer (docs/django.md, "Queries on Django's connection").

On Django's connection every statement goes through ``connection.cursor()``: it shows in
``connection.queries`` under ``DEBUG``, ``CaptureQueriesContext``/``assertNumQueries``,
``connection.execute_wrapper`` and whatever instruments Django's database layer, and a
database error is Django's (``django.db.IntegrityError``, ...). The SQL is the store's
own (``adapters/_pg``); only the way it is sent differs. The store's pool (workers, admin
actions) is unchanged.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from typing import TYPE_CHECKING, Any

import attrs
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from psycopg import Connection

from skiplock.adapters.psycopg import PsycopgDriver, PsycopgJobStore
from skiplock.core import HealthSnapshot, SchemaVersionError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

    from skiplock.adapters.psycopg import Query, Rows

#: The command a schema error names outside Django (``SchemaStatus.apply_command``).
_APPLY_COMMAND = re.compile(r"`skiplock schema apply[^`]*`")


class DjangoCursorDriver(PsycopgDriver):
    """The psycopg driver, plus Django's connection as a caller's ``connection=``.

    Adopting Django's connection connects it if need be and remembers which psycopg
    connection is under it; statements on that one go through Django's cursors, and a
    transaction the store opens there (an operation that must be atomic while Django is
    in autocommit) is ``transaction.atomic()``. Everything else (the pool, the workers'
    connections, and COPY, which Django's cursor API lacks: only a bulk enqueue of many
    jobs in one call uses it, and Django tasks never do) is the psycopg driver's.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Weak: a connection Django closed leaves with its entry.
        self._django: weakref.WeakKeyDictionary[Connection[Any], BaseDatabaseWrapper] = (
            weakref.WeakKeyDictionary()
        )

    def _wrapper(self, conn: Connection[Any]) -> BaseDatabaseWrapper | None:
        return self._django.get(conn) if self._django else None

    def adopt(self, connection: Any) -> Connection[Any]:
        if isinstance(connection, BaseDatabaseWrapper):
            # Django's own checks (thread sharing, a broken atomic block) run with each of
            # its cursors.
            connection.ensure_connection()
            raw = connection.connection
            if not isinstance(raw, Connection):
                raise TypeError(
                    f"Django's connection {connection.alias!r} is not a psycopg 3 connection "
                    f"(got {type(raw).__name__}): skiplock needs psycopg 3"
                )
            self._django[raw] = connection
            return raw
        return super().adopt(connection)

    def begin(self, conn: Connection[Any]) -> Any:
        wrapper = self._wrapper(conn)
        if wrapper is None:
            return super().begin(conn)
        return transaction.atomic(using=wrapper.alias)

    def fetch(self, conn: Connection[Any], query: Query, params: Mapping[str, Any]) -> Rows:
        wrapper = self._wrapper(conn)
        if wrapper is None:
            return super().fetch(conn, query, params)
        with wrapper.cursor() as cursor:
            cursor.execute(query.text, params)
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def script(self, conn: Connection[Any], text: str) -> None:
        wrapper = self._wrapper(conn)
        if wrapper is None:
            super().script(conn, text)
            return
        with wrapper.cursor() as cursor:
            cursor.execute(text)


class DjangoJobStore(PsycopgJobStore):
    """A :class:`~skiplock.adapters.psycopg.PsycopgJobStore` whose ``connection=`` takes
    Django's connection too, and whose schema errors name ``manage.py migrate``."""

    driver_class = DjangoCursorDriver

    def __init__(self, conninfo: str, *, database: str, **options: Any) -> None:
        super().__init__(conninfo, **options)
        self.database = database

    @property
    def migrate_command(self) -> str:
        """What installs or updates the schema in a Django project."""
        return f"manage.py migrate --database {self.database}"

    def open(self) -> None:
        with migrate_hint(self.database):
            super().open()

    def health_snapshot(self) -> HealthSnapshot:
        """The store's snapshot, its schema's command in ``manage.py`` terms."""
        snapshot = super().health_snapshot()
        schema = snapshot.schema
        if schema is None or schema.apply_command is None:
            return snapshot
        return attrs.evolve(
            snapshot, schema=attrs.evolve(schema, apply_command=self.migrate_command)
        )


@contextlib.contextmanager
def migrate_hint(alias: str) -> Iterator[None]:
    """A missing or older schema's error with the command a Django project runs."""
    try:
        yield
    except SchemaVersionError as exc:
        command = f"`manage.py migrate --database {alias}`"
        message, found = _APPLY_COMMAND.subn(command, str(exc))
        if not found:
            message = f"{message} (in a Django project: {command})"
        raise SchemaVersionError(message) from None
