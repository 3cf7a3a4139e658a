"""``schema apply|sql|status|index``: skiplock's PostgreSQL schema (of ``--dsn``, or of the
engine's store in a framework's door), and its opt-in search indexes (``schema index
list|add|drop [payload|error]``; docs/search.md, "The opt-in search indexes")."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.adapters._pg import SEARCH_INDEXES, IndexState, Progress, SchemaStatus, schema_sql
from skiplock.core import SkiplockError, ValidationError

from ._database import asyncpg_call, check_psycopg_dsn, driver, dsn, psycopg_adapter, sync_engine
from ._errors import Failure, UsageError
from ._options import add_action, for_actions
from ._output import describe, table

if TYPE_CHECKING:
    import argparse

    from skiplock.engine import AsyncEngine, Engine


def _unused(*args: object) -> Any:
    # What ``schema sql`` has for every database action: it reads and changes nothing.
    raise AssertionError("schema sql reads and changes nothing")


@attrs.frozen
class Schema:
    """The schema a command acts on: its name, how to apply and check it, and the errors
    that mean the database said no (printed on one line, exit status 1)."""

    name: str
    #: Applies the pending migrations, telling ``progress`` each step as it goes.
    apply: Callable[[Progress], list[str]]
    #: The migration status and, if the schema is installed, its search indexes (else
    #: None); with ``--dsn``, both read on one connection.
    status: Callable[[], Status]
    errors: tuple[type[BaseException], ...]
    #: The opt-in search indexes: which the schema has; add one (its name, whether to
    #: create its extension, the progress); drop one. Each add or drop returns whether
    #: it changed anything.
    indexes: Callable[[], list[IndexState]] = _unused
    add_index: Callable[[str, bool, Progress], bool] = _unused
    drop_index: Callable[[str, Progress], bool] = _unused


Status = tuple[SchemaStatus, list[IndexState] | None]


def _status(status: SchemaStatus, indexes: Callable[[], list[IndexState]]) -> Status:
    return status, (indexes() if status.installed else None)


#: What each action of ``schema`` does (its own ``--help``).
ACTIONS = {
    "apply": "Run the pending migrations, printing each step as it starts and ends "
    "(exit 1 if the database refuses one).",
    "sql": "Print the standalone DDL of the schema (no database or driver needed), or "
    "with --from N the upgrade script from version N.",
    "status": "Show the applied and pending migrations and the opt-in search indexes; "
    "exit 1 unless the schema is installed and up to date.",
    "index": 'The opt-in search indexes (docs/search.md, "The opt-in search indexes"): '
    "`index list` (the default) shows which exist; `index add payload|error` builds one "
    "with CREATE INDEX CONCURRENTLY (enqueues and workers go on; nothing if it exists, an "
    "interrupted build is rebuilt); `index drop payload|error` drops one. payload: a GIN "
    "index of the payloads, which every enqueue pays for; error: a trigram index of the "
    "error texts of the jobs that ever failed (the pg_trgm extension; a failure pays for "
    "it).",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``schema`` in every door."""
    add_action(
        parser,
        ACTIONS,
        "apply: run pending migrations; sql: print standalone DDL (no database "
        "needed); status: show migrations, exit 1 unless up to date; index: list, add or "
        "drop the opt-in search indexes",
    )
    for_actions(
        parser.add_argument(
            "verb",
            nargs="?",
            choices=_VERBS,
            metavar="list|add|drop",
            help="with index: list the opt-in search indexes (default), add or drop one",
        ),
        "index",
    )
    for_actions(
        parser.add_argument(
            "index_name",
            nargs="?",
            choices=tuple(SEARCH_INDEXES),
            metavar="|".join(SEARCH_INDEXES),
            help="with index add or drop: which index ("
            + "; ".join(f"{i.name}: {i.serves}" for i in SEARCH_INDEXES.values())
            + ")",
        ),
        "index",
    )
    option = parser.add_argument(
        "--create-extension",
        action="store_true",
        help="with index add error: create the pg_trgm extension if it is missing (CREATE "
        "EXTENSION IF NOT EXISTS; needs the CREATE privilege on the database)",
    )
    for_actions(option, "index")
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


_VERBS = ("list", "add", "drop")


def of_dsn(args: argparse.Namespace) -> Schema:
    """The schema ``--schema`` of the database ``--dsn``, through psycopg, or asyncpg
    where psycopg is not installed (``sql`` needs neither the database nor a driver)."""
    if args.action == "sql":
        return Schema(args.schema, _unused, _unused, ())
    through = driver()  # the driver first: without one, that is what to fix
    conninfo = dsn(args)
    if through == "asyncpg":
        return _through_asyncpg(conninfo, args)
    adapter = psycopg_adapter()
    check_psycopg_dsn(conninfo, args)
    import psycopg

    def status() -> Status:
        store = adapter.PsycopgJobStore(conninfo, schema=args.schema)  # no pool opened
        with psycopg.connect(conninfo, autocommit=True) as conn:
            read = store.schema_status(connection=conn)
            return _status(read, lambda: store.search_indexes(connection=conn))

    return Schema(
        args.schema,
        apply=lambda progress: adapter.apply_schema(
            conninfo, schema=args.schema, progress=progress
        ),
        status=status,
        errors=(psycopg.Error, SkiplockError),
        indexes=lambda: adapter.search_indexes(conninfo, schema=args.schema),
        add_index=lambda name, create, progress: adapter.add_search_index(
            conninfo, name, args.schema, create_extension=create, progress=progress
        ),
        drop_index=lambda name, progress: adapter.drop_search_index(
            conninfo, name, args.schema, progress=progress
        ),
    )


def _through_asyncpg(conninfo: str, args: argparse.Namespace) -> Schema:
    import asyncpg

    from skiplock.adapters import asyncpg as adapter
    from skiplock.adapters.asyncpg._schema import one_connection

    schema: str = args.schema

    def call(run: Callable[[], Any]) -> Any:
        return asyncpg_call(args, lambda: asyncio.run(run()))

    async def status() -> Status:
        async with one_connection(conninfo, schema) as store:
            read = await store.schema_status()
            return read, (await store.search_indexes() if read.installed else None)

    return Schema(
        schema,
        apply=lambda progress: call(
            lambda: adapter.apply_schema(conninfo, schema=schema, progress=progress)
        ),
        status=lambda: call(status),
        errors=(asyncpg.PostgresError, asyncpg.InterfaceError, OSError, SkiplockError),
        indexes=lambda: call(lambda: adapter.search_indexes(conninfo, schema)),
        add_index=lambda name, create, progress: call(
            lambda: adapter.add_search_index(
                conninfo, name, schema, create_extension=create, progress=progress
            )
        ),
        drop_index=lambda name, progress: call(
            lambda: adapter.drop_search_index(conninfo, name, schema, progress=progress)
        ),
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
        lambda: _status(store.schema_status(), store.search_indexes),
        (Exception,),
        indexes=store.search_indexes,
        add_index=lambda index, create, progress: store.add_search_index(
            index, create_extension=create, progress=progress
        ),
        drop_index=lambda index, progress: store.drop_search_index(index, progress=progress),
    )


def check(args: argparse.Namespace) -> None:
    """The usage checks of ``schema`` (before any connection or driver)."""
    if args.action != "sql" and args.from_version is not None:
        raise UsageError(f"--from is an option of 'schema sql', not of 'schema {args.action}'")
    if args.action != "index":
        extra = args.verb or args.index_name
        if extra is not None:
            raise UsageError(f"unexpected argument {extra!r} after 'schema {args.action}'")
        if args.create_extension:
            raise UsageError("--create-extension is an option of 'schema index add'")
        return
    verb = args.verb or "list"
    if verb == "list" and args.index_name is not None:
        raise UsageError(f"'schema index list' takes no index name, got {args.index_name!r}")
    if verb != "list" and args.index_name is None:
        raise UsageError(f"'schema index {verb}' needs an index: {' or '.join(SEARCH_INDEXES)}")
    if args.create_extension and verb != "add":
        raise UsageError("--create-extension is an option of 'schema index add'")


def run(schema: Schema, args: argparse.Namespace) -> int:
    if args.action == "sql":
        return _print_sql(schema.name, args.from_version)
    try:
        if args.action == "index":
            return _run_index(schema, args)
        if args.action == "apply":
            applied = schema.apply(_say)
            done = f" ({len(applied)} migration(s) committed)" if applied else ""
            print(f"schema {schema.name!r} is up to date{done}")
            return 0
        result, states = schema.status()
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
    if states is not None:
        print(f"indexes: {_index_summary(states)}")
    return 0 if result.installed and result.up_to_date else 1


def _index_summary(states: list[IndexState]) -> str:
    """The opt-in search indexes on one line: ``payload (508 MB), error absent``."""
    parts = []
    for s in states:
        if s.state == "present":
            parts.append(f"{s.name} ({_size(s.bytes)})")
        else:
            parts.append(f"{s.name} {s.state}")
    return ", ".join(parts) + " (opt-in search indexes: `schema index`)"


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit in ("bytes", "kB", "MB", "GB"):
        if value < 10_240 or unit == "GB":
            return f"{value:,} {unit}" if unit == "bytes" else f"{value:,.0f} {unit}"
        value //= 1024
    raise AssertionError("unreachable")


def _run_index(schema: Schema, args: argparse.Namespace) -> int:
    verb = args.verb or "list"
    name: str = args.index_name
    if verb == "add":
        built = schema.add_index(name, args.create_extension, _say)
        done = "built" if built else "already exists"
        print(f"search index {name!r} ({SEARCH_INDEXES[name].index}) {done}")
        return 0
    if verb == "drop":
        dropped = schema.drop_index(name, _say)
        done = "dropped" if dropped else "was not there"
        print(f"search index {name!r} ({SEARCH_INDEXES[name].index}) {done}")
        return 0
    rows = [
        [s.name, s.index, s.state, _size(s.bytes), SEARCH_INDEXES[s.name].serves]
        for s in schema.indexes()
    ]
    print(f"schema:  {schema.name}")
    print(table(["NAME", "INDEX", "STATE", "SIZE", "SERVES"], rows, right={3}))
    return 0


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
