"""skiplock's schema in a Django database: installed and upgraded by ``migrate``.

The app's one migration (``0001_initial``) applies skiplock's own migrations, the SQL the
package ships (``skiplock schema sql`` prints the same schema), to every schema a skiplock
backend keeps on the database being migrated; reversed, it drops those schemas. Later
skiplock versions add migrations to the package, not to the app: every ``migrate`` run
applies the pending ones (``post_migrate``) wherever ``0001_initial`` is applied, so an
upgrade is ``pip install -U skiplock`` and ``manage.py migrate``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connections, router
from django.db.migrations.recorder import MigrationRecorder
from django.utils.module_loading import import_string

from skiplock.adapters.psycopg import quote_identifier
from skiplock.core import ValidationError, validate_identifier

from ._store import DjangoJobStore

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from skiplock.adapters.psycopg import SchemaStatus

APP_LABEL = "skiplock"
INITIAL = "0001_initial"
DEFAULT_SCHEMA = "skiplock"


def skiplock_backends() -> dict[str, dict[str, Any]]:
    """The entries of ``settings.TASKS`` whose backend is a SkiplockBackend, by alias."""
    from ._backend import SkiplockBackend

    found: dict[str, dict[str, Any]] = {}
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            backend = import_string(params["BACKEND"])
        except (ImportError, KeyError, TypeError):
            continue
        if isinstance(backend, type) and issubclass(backend, SkiplockBackend):
            found[alias] = params
    return found


def schemas_on(alias: str) -> list[str]:
    """The skiplock schemas kept on Django's database ``alias``: those of the skiplock
    backends whose ``OPTIONS["DATABASE"]`` is ``alias`` (``skiplock`` on ``default`` when
    no backend is configured), in settings order without repeats."""
    backends = skiplock_backends()
    if not backends:
        return [DEFAULT_SCHEMA] if alias == "default" else []
    schemas: dict[str, None] = {}
    for params in backends.values():
        options = params.get("OPTIONS", {})
        if options.get("DATABASE", "default") == alias:
            schemas[str(options.get("SCHEMA", DEFAULT_SCHEMA))] = None
    return list(schemas)


def admin_backend() -> tuple[str | None, str, str]:
    """The skiplock backend the app's models and admin show: ``(backend alias, database
    alias, schema)``. The ``default`` task backend if it is a skiplock one, else the first
    skiplock backend of ``settings.TASKS`` (None, ``default``, ``skiplock`` if none)."""
    backends = skiplock_backends()
    if not backends:
        return None, "default", DEFAULT_SCHEMA
    alias = "default" if "default" in backends else next(iter(backends))
    options = backends[alias].get("OPTIONS", {})
    schema = options.get("SCHEMA", DEFAULT_SCHEMA)
    try:
        validate_identifier(schema)
    except ValidationError:  # reported by the backend's check (skiplock.E001)
        schema = DEFAULT_SCHEMA
    return alias, str(options.get("DATABASE", "default")), schema


def table(name: str) -> str:
    """``db_table`` of skiplock's table ``name`` in the admin backend's schema."""
    return f'"{admin_backend()[2]}"."{name}"'


def database() -> str:
    """The database alias holding the admin backend's tables."""
    return admin_backend()[1]


def _store(connection: BaseDatabaseWrapper, schema: str) -> DjangoJobStore:
    # Its pool is never opened: every call here passes Django's connection.
    return DjangoJobStore("", database=connection.alias, schema=schema)


def install(connection: BaseDatabaseWrapper, schema: str) -> list[str]:
    """Apply skiplock's pending migrations to ``schema`` on Django's ``connection``, in its
    transaction if one is open (a migration's); returns the names applied."""
    return _store(connection, schema).apply_schema(connection=connection)


def status(connection: BaseDatabaseWrapper, schema: str) -> SchemaStatus:
    """``schema``'s applied and pending skiplock migrations on Django's ``connection``."""
    return _store(connection, schema).schema_status(connection=connection)


def drop_sql(schema: str) -> str:
    """The statement removing ``schema`` and everything skiplock created in it."""
    return f"DROP SCHEMA IF EXISTS {quote_identifier(schema)} CASCADE"


def forwards(apps: Any, schema_editor: Any) -> None:
    """``0001_initial``: install skiplock's schemas on the database being migrated."""
    for schema in schemas_on(schema_editor.connection.alias):
        install(schema_editor.connection, schema)


def backwards(apps: Any, schema_editor: Any) -> None:
    """``0001_initial`` reversed (``migrate skiplock zero``): drop them."""
    for schema in schemas_on(schema_editor.connection.alias):
        schema_editor.execute(drop_sql(schema))


def upgrade_after_migrate(using: str = "default", **kwargs: Any) -> None:
    """``post_migrate``: apply skiplock's pending migrations where ``0001_initial`` is
    applied (a skiplock upgrade needs no new Django migration)."""
    if not router.allow_migrate(using, APP_LABEL):
        return
    connection = connections[using]
    if (APP_LABEL, INITIAL) not in MigrationRecorder(connection).applied_migrations():
        return
    for schema in schemas_on(using):
        install(connection, schema)
