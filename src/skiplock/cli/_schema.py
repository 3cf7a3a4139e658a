"""``schema apply|sql|status``: skiplock's PostgreSQL schema (of ``--dsn``, or of the
engine's store in a framework's door)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.adapters._pg import Progress, SchemaStatus, schema_sql
from skiplock.core import SkiplockError, ValidationError

from ._database import asyncpg_call, check_psycopg_dsn, driver, dsn, psycopg_adapter, sync_engine
from ._errors import Failure, UsageError
from ._options import add_action, for_actions
from ._output import describe

if TYPE_CHECKING:
    import argparse

    from skiplock.engine import AsyncEngine, Engine


@attrs.frozen
class Schema:
    """The schema a command acts on: its name, how to apply and check it, and the errors
    that mean the database said no (printed on one line, exit status 1)."""

    name: str
    #: Applies the pending migrations, telling ``progress`` each step as it goes.
    apply: Callable[[Progress], list[str]]
    status: Callable[[], SchemaStatus]
    errors: tuple[type[BaseException], ...]


#: What each action of ``schema`` does (its own ``--help``).
ACTIONS = {
    "apply": "Run the pending migrations, printing each step as it starts and ends "
    "(exit 1 if the database refuses one).",
    "sql": "Print the standalone DDL of the schema (no database or driver needed), or "
    "with --from N the upgrade script from version N.",
    "status": "Show the applied and pending migrations; exit 1 unless the schema is "
    "installed and up to date.",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``schema`` in every door."""
    add_action(
        parser,
        ACTIONS,
        "apply: run pending migrations; sql: print standalone DDL (no database "
        "needed); status: show migrations, exit 1 unless up to date",
    )
    option = parser.add_argument(
        "--from",
        dest="from_version",
        type=int,
        metavar="N",
        help="with sql: print the upgrade script from schema version N to the current one "
        "(the migrations after N, each recorded in the version table; 0: the fresh-install "
        "DDL, the default)",
    )
    for_actions(option, "sql")


def of_dsn(args: argparse.Namespace) -> Schema:
    """The schema ``--schema`` of the database ``--dsn``, through psycopg, or asyncpg
    where psycopg is not installed (``sql`` needs neither the database nor a driver)."""
    if args.action == "sql":
        return Schema(args.schema, _no_apply, _no_status, ())
    through = driver()  # the driver first: without one, that is what to fix
    conninfo = dsn(args)
    if through == "asyncpg":
        return _through_asyncpg(conninfo, args)
    adapter = psycopg_adapter()
    check_psycopg_dsn(conninfo, args)
    import psycopg

    return Schema(
        args.schema,
        apply=lambda progress: adapter.apply_schema(
            conninfo, schema=args.schema, progress=progress
        ),
        status=lambda: adapter.schema_status(conninfo, schema=args.schema),
        errors=(psycopg.Error, SkiplockError),
    )


def _through_asyncpg(conninfo: str, args: argparse.Namespace) -> Schema:
    import asyncpg

    from skiplock.adapters import asyncpg as adapter

    schema: str = args.schema
    return Schema(
        schema,
        apply=lambda progress: asyncpg_call(
            args,
            lambda: asyncio.run(adapter.apply_schema(conninfo, schema=schema, progress=progress)),
        ),
        status=lambda: asyncpg_call(
            args, lambda: asyncio.run(adapter.schema_status(conninfo, schema=schema))
        ),
        errors=(asyncpg.PostgresError, asyncpg.InterfaceError, OSError, SkiplockError),
    )


def of_engine(engine: AsyncEngine | Engine, label: str) -> Schema:
    """The schema of the engine's PostgreSQL store."""
    store: Any = sync_engine(engine, label).store
    name = getattr(store, "schema", None)
    if not isinstance(name, str) or not hasattr(store, "schema_status"):
        raise UsageError(f"the engine's store ({type(store).__name__}) has no PostgreSQL schema")
    # Whatever the driver raises: one line, exit status 1.
    return Schema(
        name,
        lambda progress: store.apply_schema(progress=progress),
        store.schema_status,
        (Exception,),
    )


def _no_status() -> SchemaStatus:
    raise AssertionError("schema sql reads no status")


def _no_apply(progress: Progress) -> list[str]:
    raise AssertionError("schema sql applies nothing")


def check(args: argparse.Namespace) -> None:
    """The usage checks of ``schema`` (before any connection or driver)."""
    if args.action != "sql" and args.from_version is not None:
        raise UsageError(f"--from is an option of 'schema sql', not of 'schema {args.action}'")


def run(schema: Schema, args: argparse.Namespace) -> int:
    if args.action == "sql":
        return _print_sql(schema.name, args.from_version)
    try:
        if args.action == "apply":
            applied = schema.apply(_say)
            done = f" ({len(applied)} migration(s) committed)" if applied else ""
            print(f"schema {schema.name!r} is up to date{done}")
            return 0
        result = schema.status()
    except schema.errors as exc:
        raise Failure(describe(exc)) from exc
    print(f"schema:  {result.schema}")
    print(f"applied: {', '.join(result.applied) or '(none)'}")
    print(f"pending: {', '.join(result.pending) or '(none)'}")
    if result.unknown:
        print(f"unknown: {', '.join(result.unknown)} (the database is newer than this code)")
    if not result.installed:
        verdict = f"not installed: run `{result.apply_command}`"
    elif result.pending:
        verdict = f"out of date: run `{result.apply_command}`"
    else:
        verdict = "up to date"
    print(f"status:  {verdict}")
    return 0 if result.installed and result.up_to_date else 1


def _say(line: str) -> None:
    # Each step as it starts and ends, at once (a pipe buffers: a CI log would stay
    # silent until the end).
    print(line, flush=True)


def _print_sql(schema: str, from_version: int | None) -> int:
    # Driver-neutral: printing DDL needs neither a database nor the psycopg extra.
    try:
        script = schema_sql(schema, from_version or 0)
    except ValidationError as exc:
        raise UsageError(f"--from: {exc}") from None
    sys.stdout.write(script)
    return 0
