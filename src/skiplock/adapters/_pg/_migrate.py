"""Schema migrations, written once for every driver.

The logic is a generator of :class:`Step` objects (sans I/O): a driver runs each step's
SQL inside one transaction and sends the rows back. psycopg (sync and async), asyncpg and
SQLAlchemy all drive the same generators, so migration rules live here only.

- ``apply_steps``: take a transaction-level advisory lock (concurrent applies queue up
  behind it), create the schema and version table if missing, run the pending migrations
  in order and record each. Idempotent.
- ``status_steps``: which migrations are applied and which are pending.
- :func:`schema_sql`: standalone DDL for a fresh database (``skiplock schema sql``), or
  the upgrade script from an older version (``skiplock schema sql --from N``).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Generator, Mapping
from importlib import resources
from typing import Any

import attrs

from skiplock.core import SchemaInfo, SchemaVersionError, ValidationError

from ._sql import lock_key, neutral_query, quote_identifier, read_resource, render

_MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

Rows = list[dict[str, Any]]
#: Told what a schema change is doing, as it starts and ends each step (one line each).
Progress = Callable[[str], None]

#: The schema ``skiplock schema`` manages unless ``--schema`` names another.
DEFAULT_SCHEMA = "skiplock"


@attrs.frozen
class Migration:
    """One numbered migration file."""

    version: int
    name: str  # the file's stem, e.g. "0001_initial"
    template: str

    def sql(self, schema: str) -> str:
        """The migration's DDL for ``schema``."""
        return render(self.template, schema)


@attrs.frozen
class Step:
    """SQL for a driver to run: a script when ``params`` is None, else a neutral query."""

    sql: str
    params: Mapping[str, Any] | None = None


@attrs.frozen
class SchemaStatus:
    """What ``skiplock schema status`` reports."""

    schema: str
    applied: tuple[str, ...]
    pending: tuple[str, ...]
    #: Applied versions this code does not know (the database is newer than the code).
    unknown: tuple[str, ...] = ()
    #: Whether the schema's version table exists at all.
    installed: bool = True
    #: The highest migration version applied (0: none); above :func:`latest_version`
    #: when the database is newer than the code.
    version: int = 0

    @property
    def up_to_date(self) -> bool:
        """True if no migration is pending."""
        return not self.pending

    @property
    def apply_command(self) -> str:
        """The command that installs or updates this schema (the DSN left to fill in)."""
        option = "" if self.schema == DEFAULT_SCHEMA else f" --schema {self.schema}"
        return f"skiplock schema apply --dsn ...{option}"

    def __str__(self) -> str:
        lines = [f"schema {self.schema!r}: " + self._summary()]
        lines += [f"  applied  {name}" for name in self.applied]
        lines += [f"  pending  {name}" for name in self.pending]
        lines += [f"  unknown  {name} (newer than this code)" for name in self.unknown]
        return "\n".join(lines)

    def _summary(self) -> str:
        if not self.installed:
            return f"not installed (run `{self.apply_command}`)"
        if self.pending:
            return f"{len(self.pending)} migration(s) pending (run `{self.apply_command}`)"
        return "up to date"


@functools.cache
def migrations() -> tuple[Migration, ...]:
    """Every migration shipped with this code, in order (versions 1, 2, ... without gaps)."""
    folder = resources.files(__package__).joinpath("sql").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _MIGRATION_RE.match(entry.name)
        if match is None:
            continue
        found.append(
            Migration(
                version=int(match.group(1)),
                name=entry.name.removesuffix(".sql"),
                template=entry.read_text(encoding="utf-8"),
            )
        )
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration versions must be 1..n without gaps: {found}")
    return tuple(found)


def latest_version() -> int:
    """The schema version this code expects."""
    return len(migrations())


def migration_lock_key(schema: str) -> int:
    """Advisory-lock key serialising migrations of ``schema``."""
    return lock_key(schema, "migrate")


def _status(schema: str, applied_rows: Rows, *, installed: bool = True) -> SchemaStatus:
    known = {m.version: m.name for m in migrations()}
    applied = {int(r["version"]): str(r["name"]) for r in applied_rows}
    return SchemaStatus(
        schema=schema,
        applied=tuple(applied[v] for v in sorted(applied) if v in known),
        pending=tuple(known[v] for v in sorted(known) if v not in applied),
        unknown=tuple(applied[v] for v in sorted(applied) if v not in known),
        installed=installed,
        version=max(applied, default=0),
    )


def status_steps(schema: str) -> Generator[Step, Rows, SchemaStatus]:
    """Steps that read the schema's migration status (read-only)."""
    rows = yield Step(neutral_query("migration_probe", schema), _probe_params(schema))
    if not rows or not rows[0]["installed"]:
        return _status(schema, [], installed=False)
    rows = yield Step(neutral_query("applied_migrations", schema), {})
    return _status(schema, rows)


def apply_steps(schema: str, progress: Progress | None = None) -> Generator[Step, Rows, list[str]]:
    """Steps that apply every pending migration; returns the names applied (maybe none).
    ``progress`` is told each step as it starts and ends (a migration on millions of jobs
    takes seconds), in words for an operator."""
    say = progress or _silent
    say(f"waiting for the migration lock of schema {schema!r}")
    yield Step(neutral_query("migration_lock", schema), {"key": migration_lock_key(schema)})
    rows = yield Step(neutral_query("migration_probe", schema), _probe_params(schema))
    if not rows[0]["installed"]:
        say(f"creating schema {schema!r} and its version table")
        yield Step(render(read_resource("bootstrap.sql"), schema))
    rows = yield Step(neutral_query("applied_migrations", schema), {})
    done = {int(r["version"]) for r in rows}
    pending = [m for m in migrations() if m.version not in done]
    if pending:
        say(f"{len(pending)} migration(s) to apply, in one transaction")
    applied: list[str] = []
    for migration in pending:
        say(f"applying {migration.name} ...")
        started = time.monotonic()
        yield Step(migration.sql(schema))
        yield Step(
            neutral_query("record_migration", schema),
            {"version": migration.version, "name": migration.name},
        )
        say(f"applied {migration.name} in {time.monotonic() - started:.1f} s")
        applied.append(migration.name)
    return applied


def _silent(message: str) -> None:
    pass


def schema_info(status: SchemaStatus) -> SchemaInfo:
    """``status`` as the health report's :class:`~skiplock.core.SchemaInfo`."""
    return SchemaInfo(
        name=status.schema,
        installed=status.installed,
        version=status.version,
        expected=latest_version(),
        pending=status.pending,
        apply_command=status.apply_command,
    )


def check_version(status: SchemaStatus) -> None:
    """Raise SchemaVersionError if the database's schema is older than this code.

    A newer schema (migrations this code does not know) is accepted: migrations are
    additive, so old workers keep running during a rolling upgrade.
    """
    if not status.installed:
        raise SchemaVersionError(
            f"skiplock schema {status.schema!r} is not installed in this database; "
            f"run `{status.apply_command}` first"
        )
    if status.pending:
        raise SchemaVersionError(
            f"skiplock schema {status.schema!r} is older than this code: pending "
            f"migrations {', '.join(status.pending)}; run `{status.apply_command}`"
        )


def schema_sql(schema: str = DEFAULT_SCHEMA, from_version: int = 0) -> str:
    """The schema's DDL as one script (one transaction), for your own migration tool.

    ``from_version`` 0: standalone DDL creating the current schema in a fresh database.
    ``from_version`` N (1 to :func:`latest_version`): the upgrade script from version N,
    i.e. the migrations after N in order, each recorded in the version table as the
    migrator does. It first checks that the database is at version N (else it raises an
    error and changes nothing). Raises ValidationError for N out of range.
    """
    quoted = quote_identifier(schema)
    latest = latest_version()
    if not 0 <= from_version <= latest:
        raise ValidationError(
            f"no schema version {from_version}: this code knows versions 0 (none) to {latest}"
        )
    if from_version:
        return _upgrade_sql(schema, from_version)
    records = ",\n    ".join(f"({m.version}, '{m.name}')" for m in migrations())
    return "\n".join(
        [
            f"-- skiplock schema {schema} (version {latest}), generated by skiplock.",
            "BEGIN;",
            f"SELECT pg_advisory_xact_lock({migration_lock_key(schema)});",
            "",
            render(read_resource("bootstrap.sql"), schema).strip(),
            "",
            render(read_resource("schema.sql"), schema).strip(),
            "",
            f"INSERT INTO {quoted}.schema_migrations (version, name) VALUES\n    {records};",
            "COMMIT;",
            "",
        ]
    )


def _upgrade_sql(schema: str, from_version: int) -> str:
    quoted = quote_identifier(schema)
    latest = latest_version()
    # Guard: run against any other version, the script would skip or repeat migrations.
    # The version is read under the migration lock, as the migrator reads it.
    message = (
        f"skiplock schema {schema} is at version %, not {from_version}: "
        f"generate the script with skiplock schema sql --from <its version>"
    )
    lines = [
        f"-- skiplock schema {schema}: upgrade from version {from_version} to {latest}, "
        "generated by skiplock.",
        "BEGIN;",
        f"SELECT pg_advisory_xact_lock({migration_lock_key(schema)});",
        "",
        "DO $skiplock$",
        "DECLARE",
        "    current integer;",
        "BEGIN",
        f"    SELECT coalesce(max(version), 0) INTO current FROM {quoted}.schema_migrations;",
        f"    IF current <> {from_version} THEN",
        f"        RAISE EXCEPTION '{message}', current;",
        "    END IF;",
        "END",
        "$skiplock$;",
    ]
    for migration in migrations()[from_version:]:
        lines += [
            "",
            f"-- {migration.name}",
            migration.sql(schema).strip(),
            "",
            f"INSERT INTO {quoted}.schema_migrations (version, name) "
            f"VALUES ({migration.version}, '{migration.name}');",
        ]
    lines += ["COMMIT;", ""]
    return "\n".join(lines)


def _probe_params(schema: str) -> dict[str, Any]:
    return {"version_table": f"{quote_identifier(schema)}.schema_migrations"}
