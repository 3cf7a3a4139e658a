"""``manage.py skiplock_schema sql|status|apply``: skiplock's schema of a backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connections

from skiplock.adapters.psycopg import schema_sql
from skiplock.core import SkiplockError, ValidationError

from ... import _schema
from .._common import add_backend_option, backend_named

if TYPE_CHECKING:
    from django.core.management.base import CommandParser


class Command(BaseCommand):
    help = (
        "skiplock's schema of a backend: 'sql' prints the DDL (what migrate applies; "
        "--from N: the upgrade from version N), 'status' the applied and pending "
        "migrations (exit 1 unless up to date), 'apply' applies the pending ones "
        "(migrate does it too)."
    )
    requires_system_checks: list[str] = []  # noqa: RUF012 - Django's own annotation

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["sql", "status", "apply"])
        parser.add_argument(
            "--from",
            dest="from_version",
            type=int,
            metavar="N",
            help="sql: the upgrade script from schema version N",
        )
        add_backend_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        config = backend_named(options["backend"]).config
        action = options["action"]
        if action == "sql":
            try:
                self.stdout.write(
                    schema_sql(config.schema, options["from_version"] or 0), ending=""
                )
            except ValidationError as exc:
                raise CommandError(f"--from: {exc}") from None
            return
        if options["from_version"] is not None:
            raise CommandError(f"--from is an option of 'sql', not of '{action}'")
        connection = connections[config.database]
        try:
            if action == "apply":
                applied = _schema.install(connection, config.schema)
                for name in applied:
                    self.stdout.write(f"applied {name}")
                if not applied:
                    self.stdout.write(f"schema {config.schema!r} is up to date")
                return
            status = _schema.status(connection, config.schema)
        except (DatabaseError, SkiplockError) as exc:
            raise CommandError(str(exc).strip()) from None
        self.stdout.write(f"database: {config.database}")
        self.stdout.write(str(status))
        if not status.installed or status.pending:
            raise CommandError(
                "the schema is not up to date: run `manage.py migrate`", returncode=1
            )
