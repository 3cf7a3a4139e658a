"""The app's migration: ``migrate`` on an empty database gives exactly skiplock's schema
(what ``skiplock schema sql`` creates), back to zero removes it, and a later skiplock's
schema migrations are applied by ``migrate`` itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock.adapters._pg import _migrate, latest_version, migrations
from skiplock.adapters.psycopg import PsycopgJobStore, schema_sql
from tests.django_integration.helpers import django_command, settings_module
from tests.psycopg.test_schema import catalog

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.postgres


def name_of(dsn: str) -> str:
    return dsn.rsplit("/", 1)[-1]


def migrate(dsn: str, *arguments: str) -> str:
    done = django_command("migrate", *arguments, database=name_of(dsn))
    assert done.returncode == 0, done.stderr
    return done.stdout


def objects_outside_django(dsn: str) -> list[tuple[str, str]]:
    """Every schema but PostgreSQL's own, and every relation and function in ``public``
    that is not one of the test project's Django tables."""
    with psycopg.connect(dsn) as conn:
        schemas = conn.execute(
            "SELECT nspname, 'schema' FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' "
            "AND nspname NOT IN ('information_schema', 'public')"
        ).fetchall()
        relations = conn.execute(
            "SELECT c.relname, c.relkind::text FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
            "AND c.relname !~ '^(django|auth|testapp)_'"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.proname, 'function' FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
        ).fetchall()
    return sorted(schemas + relations + functions)


def test_migrate_gives_skiplocks_schema_and_back_to_zero_removes_it(
    make_database: Callable[[], str],
) -> None:
    migrated, reference = make_database(), make_database()
    with psycopg.connect(reference, autocommit=True) as conn:
        conn.execute(schema_sql())
    expected = catalog(reference)
    assert expected["indexes"], "the catalog dump found nothing"

    assert "Applying skiplock.0001_initial... OK" in migrate(migrated)
    assert catalog(migrated) == expected
    assert objects_outside_django(migrated) == [("skiplock", "schema")]

    assert "Unapplying skiplock.0001_initial... OK" in migrate(migrated, "skiplock", "zero")
    assert objects_outside_django(migrated) == []
    assert "auth_user" in {row[0] for row in _relations(migrated)}  # the rest stays

    migrate(migrated, "skiplock")
    assert catalog(migrated) == expected


def _relations(dsn: str) -> list[tuple[str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public'"
        ).fetchall()


def test_migrate_applies_a_later_skiplocks_schema_migrations(
    make_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database migrated by an older skiplock (its schema one version behind, the app's
    migration applied) is brought up to date by the next ``migrate``: no new migration
    file in the app. Before that, ``check --database`` warns (skiplock.W002)."""
    fresh, old = make_database(), make_database()
    migrate(fresh)
    migrate(old)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute("DROP SCHEMA skiplock CASCADE")
    shipped = migrations()[: latest_version() - 1]
    with monkeypatch.context() as patch:
        patch.setattr(_migrate, "migrations", lambda: shipped)
        with psycopg.connect(old, autocommit=True) as conn:
            PsycopgJobStore(old).apply_schema(connection=conn)

    checked = django_command("check", "--database", "default", database=name_of(old))
    assert checked.returncode == 0, checked.stderr
    assert "skiplock.W002" in checked.stderr
    assert f"pending: {migrations()[-1].name}" in checked.stderr

    assert "No migrations to apply" in migrate(old)
    assert catalog(old) == catalog(fresh)
    checked = django_command("check", "--database", "default", database=name_of(old))
    assert "skiplock.W002" not in checked.stderr


@pytest.mark.parametrize("schema", ["skiplock", "jobs_here"])
def test_the_migration_state_matches_the_models(tmp_path: Path, schema: str) -> None:
    """``makemigrations --check`` finds nothing to add for the app, whatever the schema:
    no migration file is ever written into the installed package."""
    env = settings_module(
        tmp_path, "schema_settings", f'TASKS["default"]["OPTIONS"]["SCHEMA"] = "{schema}"'
    )
    done = django_command("makemigrations", "--check", "--dry-run", "skiplock", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No changes detected in app 'skiplock'" in done.stdout
