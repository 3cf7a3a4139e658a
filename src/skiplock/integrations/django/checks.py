"""System checks of the ``skiplock`` app (``manage.py check``; docs/django.md, "Checks").

- ``skiplock.W001``: the app is installed but no ``settings.TASKS`` backend is a
  ``SkiplockBackend``.
- ``skiplock.W002`` (database check: ``check --database <alias>``, and ``migrate``): a
  backend's schema is older than this skiplock, or missing although the app's migration
  is applied (run ``manage.py migrate``); ``skiplock.W003``: it cannot be read.

Each backend's own configuration is checked by ``SkiplockBackend.check()``, which Django
runs with every ``check``: ``skiplock.E001`` (invalid ``OPTIONS``), ``E002`` (not
PostgreSQL), ``E003`` (psycopg2 instead of psycopg 3) and ``E004`` (PgBouncer transaction
pooling without a direct ``DSN`` for the workers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.db.migrations.recorder import MigrationRecorder

from . import _schema
from ._config import parse_options

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from django.apps import AppConfig


def check_backend_configured(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W001: the app without any skiplock backend."""
    if _schema.skiplock_backends():
        return []
    return [
        checks.Warning(
            "the skiplock app is installed but no settings.TASKS backend is "
            "'skiplock.integrations.django.SkiplockBackend'",
            hint="Add one to settings.TASKS (docs/django.md, 'Settings').",
            id="skiplock.W001",
        )
    ]


def check_schema_version(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """W002/W003: each backend's schema, on the databases the check was asked about."""
    if not databases:
        return []
    wanted = set(databases)
    messages: list[checks.CheckMessage] = []
    for alias, params in _schema.skiplock_backends().items():
        try:
            config = parse_options(alias, params.get("OPTIONS", {}))
        except ImproperlyConfigured:
            continue  # skiplock.E001 says what is wrong
        if config.database not in wanted:
            continue
        connection = connections[config.database]
        try:
            applied = MigrationRecorder(connection).applied_migrations()
            if (_schema.APP_LABEL, _schema.INITIAL) not in applied:
                continue  # migrate has not run: Django lists the unapplied migration
            status = _schema.status(connection, config.schema)
        except DatabaseError as exc:
            messages.append(
                checks.Warning(
                    f"TASKS[{alias!r}]: cannot read skiplock's schema {config.schema!r} on "
                    f"database {config.database!r}: {exc}".strip(),
                    id="skiplock.W003",
                )
            )
            continue
        if not status.installed or status.pending:
            state = (
                "is not installed"
                if not status.installed
                else f"is at version {status.version}, older than this skiplock "
                f"(pending: {', '.join(status.pending)})"
            )
            messages.append(
                checks.Warning(
                    f"TASKS[{alias!r}]: skiplock's schema {config.schema!r} on database "
                    f"{config.database!r} {state}",
                    hint=f"Run `manage.py migrate --database {config.database}`.",
                    id="skiplock.W002",
                )
            )
    return messages
