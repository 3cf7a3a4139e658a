"""The command tree: every command once, with the options every door offers, how it
runs, and where each door finds what it runs on.

The ``skiplock`` command finds it from its own arguments (APP, ``--dsn``); a framework's
door (``manage.py skiplock ...``, ``flask skiplock ...``) supplies its application's engine
instead (:func:`run_parsed`). The options, their checks, the messages and the exit
statuses are the tree's, so they are the same in every door.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from skiplock.engine import AsyncEngine, Engine

from . import (
    _concurrency,
    _controls,
    _counts,
    _database,
    _demo,
    _health,
    _jobs,
    _metrics,
    _retention,
    _schema,
    _worker,
    _workers,
)
from ._errors import USAGE, guarded
from ._options import Leaf, with_value

if TYPE_CHECKING:
    from collections.abc import Sequence

T = TypeVar("T")


@attrs.frozen
class Command(Generic[T]):
    """One command of the tree, run on a target of type ``T`` (an engine, a schema)."""

    name: str
    help: str
    description: str | None
    #: Adds the options every door offers, then calls the door's ``leaf`` on each parser
    #: that ends a command line.
    options: Callable[[argparse.ArgumentParser, Leaf], None]
    run: Callable[[T, argparse.Namespace], int]
    #: The ``skiplock`` command's own options (APP, ``--dsn``...) and its target from them.
    standalone: Callable[[argparse.ArgumentParser], None]
    find: Callable[[argparse.Namespace], AbstractContextManager[T]]
    #: The target from a door's engine (and how errors name the door); None: the command
    #: is the ``skiplock`` command's only.
    mounted: Callable[[AsyncEngine | Engine, str], T] | None = None
    #: Usage checks before the target is found (before any connection).
    check: Callable[[argparse.Namespace], None] | None = None


def _flat(
    add: Callable[[argparse.ArgumentParser], None],
) -> Callable[[argparse.ArgumentParser, Leaf], None]:
    """The options of a command without actions: the door's first (APP first), then its own;
    an option's value may start with "-" (:func:`~._options.with_value`)."""

    def options(parser: argparse.ArgumentParser, leaf: Leaf) -> None:
        leaf(with_value(parser))
        add(parser)

    return options


def _from_args(
    make: Callable[[argparse.Namespace], T],
) -> Callable[[argparse.Namespace], AbstractContextManager[T]]:
    return lambda args: nullcontext(make(args))


def _none(_: argparse.ArgumentParser) -> None:
    pass


def _admin(engine: AsyncEngine | Engine, label: str) -> _database.Reached:
    return _database.Reached(_database.sync_engine(engine, label))


#: A command on a sync engine (name, help, description, options, run; ``check=``): the
#: database of ``--dsn`` for ``skiplock``, the application's engine in a framework's door.
_on_database = functools.partial(
    Command[_database.Reached],
    standalone=_database.add_connection,
    find=_database.reach,
    mounted=_admin,
)


COMMANDS: dict[str, Command[Any]] = {
    command.name: command
    for command in (
        Command[_worker.AppEngine](
            "worker",
            help="run a worker for an application's engine",
            description=(
                "Run a worker until SIGTERM/SIGINT. The first signal stops claiming and lets "
                "running jobs finish; a second one releases running jobs and exits. Settings: "
                "the engine's own, then SKIPLOCK_* environment variables on top, then these "
                "options on top of both."
            ),
            options=_flat(_worker.add_options),
            run=_worker.run,
            standalone=_worker.add_app,
            find=_from_args(_worker.app_engine),
            mounted=_worker.AppEngine,
        ),
        Command[None](
            "demo",
            help="see skiplock at work in a few seconds (in memory, or on PostgreSQL)",
            description=_demo.DESCRIPTION,
            options=_flat(_demo.add_options),
            run=_demo.run,
            standalone=_none,
            find=lambda args: nullcontext(None),
        ),
        Command[_schema.Schema](
            "schema",
            help="apply, print or check the PostgreSQL schema",
            description="Manage skiplock's tables. Without a framework, apply and status need "
            "a driver: psycopg (" + _database.PSYCOPG_HINT + ") or asyncpg.",
            options=_flat(_schema.add_options),
            run=_schema.run,
            standalone=_database.add_dsn,
            find=_from_args(_schema.of_dsn),
            mounted=_schema.of_engine,
            check=_schema.check,
        ),
        _on_database(
            "health",
            "check the database, schema, workers and queues; exit 1 if unhealthy",
            (
                "Report the health of the queue (R9): database reachable, schema version, "
                "live workers by heartbeat, per kind the due and scheduled pending jobs, the "
                "age of the oldest due one, running and dead jobs. Exit 0 when healthy, 1 "
                "with one line per problem otherwise."
            ),
            _flat(_health.add_options),
            _health.run,
        ),
        _on_database(
            "jobs",
            "list, show, retry, cancel, fail or delete jobs",
            "Read and change jobs through the admin API (R13).",
            _jobs.add_options,
            _jobs.run,
            check=_jobs.check,
        ),
        _on_database(
            "dlq",
            "list dead jobs with their last error (the DLQ), or purge them",
            "List dead jobs with their last error, a page at a time; `dlq purge` deletes "
            "them in bulk.",
            _jobs.add_dlq_options,
            _jobs.run_dlq,
            check=_jobs.check_dlq,
        ),
        _on_database(
            "counts",
            "number of jobs per kind, tenant and state",
            None,
            _flat(_health.add_json),
            _counts.run,
        ),
        _on_database(
            "retention",
            "what each retention purge removes next, and its last run",
            (
                "Per retention purge (succeeded jobs: retention; audit events: "
                "audit_retention, both from the settings), how many rows are older than its "
                "window now, which its next run removes (~: an estimate, past 10,000 audit "
                "events), and when its last run finished, how long it took and what it "
                "removed. See docs/retention.md."
            ),
            _flat(_health.add_json),
            _retention.run,
        ),
        _on_database(
            "metrics",
            "the queue's Prometheus metrics without a worker: print one scrape, or serve",
            (
                "An exporter that needs no worker: queue depths per kind and tenant, the age "
                "of the oldest due job, running and dead jobs, registered workers (live or "
                "silent), whether the database answers (skiplock_up) and the health verdict "
                "(skiplock_healthy), read from the store at each scrape (cached 5 s). A "
                "database that is down is reported (skiplock_up 0), not fatal. Needs the "
                "prometheus extra; see docs/metrics.md."
            ),
            _flat(_metrics.add_options),
            _metrics.run,
        ),
        _on_database(
            "pause",
            "stop claiming the jobs of a kind, a tenant or both (until resume)",
            (
                "Pause --kind (every tenant), --tenant (every kind) or both (that pair): "
                "workers leave their pending jobs unclaimed, with their attempts and their "
                "place; running jobs finish. Every worker applies it within "
                "controls_refresh (1 s by default). Stored: it stands across restarts until "
                "`skiplock resume` with the same --kind/--tenant."
            ),
            _flat(_controls.add_pause_options),
            _controls.run_pause,
            check=_controls.check_scope,
        ),
        _on_database(
            "resume",
            "lift a pause (the same --kind/--tenant as the pause); exit 1 if none",
            None,
            _flat(_controls.add_resume_options),
            _controls.run_resume,
            check=_controls.check_scope,
        ),
        _on_database(
            "paused",
            "the pauses in force",
            None,
            _flat(_health.add_json),
            _controls.run_paused,
        ),
        _on_database(
            "limits",
            "list, set or clear rate limits per kind and tenant, and provider caps",
            (
                "Rate limits set at run time, over the code's and SKIPLOCK_* ones: per "
                "(kind, tenant), a kind's default for every tenant without its own, and "
                "provider caps. Every worker applies a change within controls_refresh."
            ),
            _controls.add_limits_options,
            _controls.run_limits,
            check=_controls.check_limits,
        ),
        _on_database(
            "concurrency",
            "list, set or clear concurrency limits per kind (node, cluster) and per key",
            (
                "Concurrency limits set at run time, over the declared ones: a kind's "
                "node_limit or cluster_limit, a concurrency key's limit. Every worker "
                "applies a change within controls_refresh."
            ),
            _concurrency.add_options,
            _concurrency.run,
            check=_concurrency.check,
        ),
        _on_database(
            "workers",
            "registered workers, their heartbeats and jobs",
            "List the registered workers. With --host: only that host's, and exit 1 unless "
            "one of them is live (a liveness check for the machine or pod running them).",
            _flat(_workers.add_options),
            _workers.run,
        ),
        _on_database(
            "drain-worker",
            "ask a worker to drain: stop claiming, finish its running jobs, exit",
            "The request reaches the worker through the database (any host) within its "
            "controls_refresh; exit 1 if no such worker is registered.",
            _flat(_workers.add_request_options),
            _workers.run_drain,
        ),
        _on_database(
            "stop-worker",
            "ask a worker to stop: its graceful stop (running jobs get shutdown_timeout)",
            "As drain-worker, but running jobs still running after the worker's "
            "shutdown_timeout are interrupted and released to pending.",
            _flat(_workers.add_request_options),
            _workers.run_stop,
        ),
    )
}

#: The commands a framework's door can mount (run on the application's engine).
MOUNTABLE: tuple[str, ...] = tuple(name for name, c in COMMANDS.items() if c.mounted is not None)


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add every command, as the ``skiplock`` command offers it, to ``commands``."""
    for command in COMMANDS.values():
        parser = commands.add_parser(
            command.name, help=command.help, description=command.description
        )
        command.options(parser, command.standalone)
        parser.set_defaults(handler=_standalone(command))


def _standalone(command: Command[T]) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        if command.check is not None:
            command.check(args)
        with command.find(args) as target:
            return command.run(target, args)

    return handler


def mountable(name: str) -> Command[Any]:
    """The command ``name`` if a door can mount it, else ValueError."""
    command = COMMANDS.get(name)
    if command is None or command.mounted is None:
        raise ValueError(f"command must be one of {', '.join(MOUNTABLE)}, got {name!r}")
    return command


def summary(name: str) -> str:
    """The one-line help of the command ``name`` (what ``skiplock --help`` lists)."""
    return mountable(name).help


def description(name: str) -> str | None:
    """The description of the command ``name`` (what ``skiplock <name> --help`` says)."""
    return mountable(name).description


def add_arguments(parser: argparse.ArgumentParser, name: str, leaf: Leaf = _none) -> None:
    """Add the options of the command ``name``, as every door offers them, to a door's
    own ``parser`` (e.g. a Django management command's); ``leaf`` adds the door's own
    options to each parser that ends a command line (``parser``, or each action's of a
    command with actions, as ``jobs list``)."""
    mountable(name).options(parser, leaf)


def run_parsed(
    name: str, args: argparse.Namespace, engine: AsyncEngine | Engine, *, label: str
) -> int:
    """Run the command ``name`` on ``engine`` with ``args`` parsed by a parser that
    :func:`add_arguments` prepared; return its exit status (an error printed on one
    line). ``label`` names the door in messages (e.g. ``flask skiplock worker``)."""
    command = mountable(name)
    mounted = command.mounted
    assert mounted is not None

    def handler(parsed: argparse.Namespace) -> int:
        if command.check is not None:
            command.check(parsed)
        return command.run(mounted(engine, label), parsed)

    return guarded(handler, args)


def run_mounted(name: str, argv: Sequence[str], engine: AsyncEngine | Engine, *, prog: str) -> int:
    """Parse ``argv`` with the options of the command ``name`` and run it on ``engine``:
    what a door without argparse of its own runs (``flask skiplock ...``); ``prog``
    names it in usage lines and messages. Returns the exit status."""
    command = mountable(name)
    parser = argparse.ArgumentParser(prog=prog, description=command.description)
    add_arguments(parser, name)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, argparse usage errors
        return exc.code if isinstance(exc.code, int) else USAGE
    return run_parsed(name, args, engine, label=prog)
