"""How the ``skiplock`` command reaches PostgreSQL without an application: ``--dsn``
(default ``$SKIPLOCK_DSN``), ``--schema`` and ``--timeout``, through psycopg, or through
asyncpg where psycopg is not installed (an asyncpg-only image)."""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import attrs

from skiplock.core import StoreError
from skiplock.engine import AsyncEngine, Engine, Settings

from . import _options
from ._errors import Failure, UsageError
from ._output import describe, one_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Iterator
    from types import ModuleType

    from skiplock.engine import Operator, Reader
    from skiplock.ports import JobStore

T = TypeVar("T")

DSN_ENV = "SKIPLOCK_DSN"
#: The hot standby the read commands read (``--read-dsn``): docs/replicas.md.
READ_DSN_ENV = "SKIPLOCK_READ_DSN"
PSYCOPG_HINT = "pip install 'skiplock[psycopg]'"
#: Default of ``--timeout``: how long a command waits for PostgreSQL (to connect, for a
#: pooled connection, and for each read): a database that is down or stuck is reported
#: within about this long.
DEFAULT_TIMEOUT = timedelta(seconds=2)


@attrs.frozen
class Reached:
    """A sync engine for an admin command, and why its database cannot be reached (None:
    it answered, or the door supplied the engine); with ``--read-dsn`` (an engine with
    ``reads=``) also why the hot standby its reads go to cannot."""

    engine: Engine
    unreachable: str | None = None
    reads_unreachable: str | None = None

    def checked(self) -> Engine:
        """The engine, or Failure if its database did not answer."""
        if self.unreachable is not None:
            raise Failure(f"cannot connect to PostgreSQL: {self.unreachable}")
        return self.engine

    @property
    def reads_elsewhere(self) -> bool:
        """Whether the reads go to another database than the changes (a hot standby)."""
        return self.engine.reads_store is not None

    @property
    def reads_failure(self) -> str | None:
        """Why the database the reads go to cannot be reached (None: it answered)."""
        return self.reads_unreachable if self.reads_elsewhere else self.unreachable

    def reads(self) -> Operator | Reader:
        """What a read command reads through: the engine's reader when its reads go to a
        hot standby (docs/replicas.md), else its operator; Failure if that database did
        not answer."""
        if not self.reads_elsewhere:
            return self.checked().operator()
        if self.reads_unreachable is not None:
            raise Failure(f"cannot connect to the read replica: {self.reads_unreachable}")
        return self.engine.reader()


def sync_engine(engine: AsyncEngine | Engine, label: str) -> Engine:
    """``engine`` if it is a sync :class:`~skiplock.Engine` (the admin commands are sync),
    else UsageError."""
    if not isinstance(engine, Engine):
        raise UsageError(f"{label} needs a sync skiplock Engine, got {type(engine).__name__}")
    return engine


def add_dsn(parser: argparse.ArgumentParser) -> None:
    """``--dsn`` and ``--schema``."""
    _dsn_group(parser)


def _dsn_group(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    group = parser.add_argument_group("connection")
    group.add_argument("--dsn", help=f"PostgreSQL connection string (default: ${DSN_ENV})")
    group.add_argument(
        "--schema",
        type=_options.identifier,
        default="skiplock",
        metavar="NAME",
        help="PostgreSQL schema holding skiplock's tables (default: skiplock)",
    )
    return group


def add_connection(parser: argparse.ArgumentParser) -> None:
    """``--dsn``, ``--read-dsn``, ``--schema`` and ``--timeout``."""
    group = _dsn_group(parser)
    group.add_argument(
        "--read-dsn",
        help="a hot standby the reads go to (jobs list/show, dlq list, counts, health, "
        "workers, metrics, paused, limits list); changes always go to --dsn "
        f"(default: ${READ_DSN_ENV}; none: everything reads --dsn)",
    )
    _options.add_duration(
        group,
        "--timeout",
        "how long to wait for PostgreSQL: to connect (at least 2s), for a pooled "
        "connection, and for each read (default: 2s)",
        default=DEFAULT_TIMEOUT,
    )


def dsn(args: argparse.Namespace) -> str:
    found: str | None = args.dsn or os.environ.get(DSN_ENV)
    if not found:
        raise UsageError(f"no database given: pass --dsn or set {DSN_ENV}")
    return found


def read_dsn(args: argparse.Namespace) -> str | None:
    """The ``--read-dsn`` (or ``$SKIPLOCK_READ_DSN``) of a command that takes it."""
    found: str | None = getattr(args, "read_dsn", None) or os.environ.get(READ_DSN_ENV)
    return found or None


def driver_errors() -> tuple[type[BaseException], ...]:
    """The errors of the database drivers this process has loaded (psycopg's, asyncpg's),
    none imported here: an error of a driver that is not loaded cannot be raised."""
    found: list[type[BaseException]] = []
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        found.append(psycopg.Error)
    asyncpg = sys.modules.get("asyncpg")
    if asyncpg is not None:
        found += [asyncpg.PostgresError, asyncpg.InterfaceError]
    return tuple(found)


def invalid_dsn(args: argparse.Namespace, exc: BaseException, *, reads: bool = False) -> Failure:
    """The error of a connection string the driver cannot parse: one line naming where
    it came from, exit status 1. The string itself is not repeated (it may hold a
    password); the driver's words may quote the word where its parsing stopped.
    ``reads``: the string is ``--read-dsn``'s."""
    where = "--dsn" if args.dsn else f"${DSN_ENV}"
    if reads:
        where = "--read-dsn" if getattr(args, "read_dsn", None) else f"${READ_DSN_ENV}"
    return Failure(f"invalid connection string ({where}): {describe(exc)}")


def check_psycopg_dsn(conninfo: str, args: argparse.Namespace, *, reads: bool = False) -> None:
    """Parse ``conninfo`` as psycopg (libpq) does, before any store is made from it (a
    store parses it in its constructor and would raise psycopg's error); ``reads``: it is
    ``--read-dsn``'s."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise invalid_dsn(args, exc, reads=reads) from None


def asyncpg_call(args: argparse.Namespace, call: Callable[[], T], *, reads: bool = False) -> T:
    """``call()``, asyncpg parsing ``--dsn`` when it first connects: the ValueError it
    raises for a connection string it cannot parse (ClientConfigurationError is one too),
    also as the cause of the store's error, is :func:`invalid_dsn`."""
    try:
        return call()
    except (ValueError, StoreError) as exc:
        cause = exc if isinstance(exc, ValueError) else exc.__cause__
        if isinstance(cause, ValueError):
            raise invalid_dsn(args, cause, reads=reads) from None
        raise


def psycopg_adapter() -> ModuleType:
    """``skiplock.adapters.psycopg``, or UsageError naming the extra to install."""
    try:
        return importlib.import_module("skiplock.adapters.psycopg")
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] in {"psycopg", "psycopg_pool"}:
            raise UsageError(
                f"PostgreSQL support is not installed ({exc.name} is missing); run: {PSYCOPG_HINT}"
            ) from None
        raise


def driver() -> Literal["psycopg", "asyncpg"]:
    """The driver the commands reach PostgreSQL with: psycopg if installed, else asyncpg
    (an asyncpg-only image), else UsageError naming the psycopg extra."""
    try:
        psycopg_adapter()
    except UsageError:
        if importlib.util.find_spec("asyncpg") is None:
            raise
        return "asyncpg"
    return "psycopg"


@contextmanager
def reach(args: argparse.Namespace) -> Iterator[Reached]:
    """An engine over the PostgreSQL of ``--dsn``, closed afterwards.

    PostgreSQL is reached with one plain connection first, so a database that is down
    fails at once with the server's or the operating system's words.
    """
    conninfo = dsn(args)
    through = _through_psycopg if driver() == "psycopg" else _through_asyncpg
    with through(conninfo, args) as reached:
        yield reached


#: The variables the ``skiplock`` command reads for its engine: the retention windows
#: ``skiplock retention`` shows (docs/retention.md).
_FROM_ENV = ("SKIPLOCK_RETENTION", "SKIPLOCK_AUDIT_RETENTION")


def _settings() -> Settings:
    # An operator's changes are what an audit trail is for (J10): recorded in the audit
    # table with --actor, whatever the applications configured.
    env = {name: os.environ[name] for name in _FROM_ENV if name in os.environ}
    return Settings.from_env(env, audit=True)


def _store_options(args: argparse.Namespace) -> dict[str, Any]:
    """The store options of a command: a small pool, and ``--timeout`` for connecting,
    for a pooled connection and for each read (psycopg and asyncpg take the same)."""
    seconds = args.timeout.total_seconds()
    return {
        "schema": args.schema,
        "min_size": 1,
        "max_size": 2,
        "timeout": seconds,
        "connect_timeout": seconds,
        "read_timeout": args.timeout,
    }


@contextmanager
def _through_psycopg(conninfo: str, args: argparse.Namespace) -> Iterator[Reached]:
    adapter = psycopg_adapter()
    check_psycopg_dsn(conninfo, args)
    standby = read_dsn(args)
    if standby is not None:
        check_psycopg_dsn(standby, args, reads=True)
    with ExitStack() as stack:
        store = adapter.PsycopgJobStore(conninfo, **_store_options(args))
        stack.callback(store.close)
        reads = None
        if standby is not None:
            reads = adapter.PsycopgJobStore(standby, **_store_options(args))
            stack.callback(reads.close)
        yield Reached(
            Engine(store, _settings(), reads=reads),
            _connect(conninfo, args.timeout),
            None if standby is None else _connect(standby, args.timeout),
        )


@contextmanager
def _through_asyncpg(conninfo: str, args: argparse.Namespace) -> Iterator[Reached]:
    """A sync engine over an asyncpg store, whose calls run on an event loop in a thread
    of their own."""
    from skiplock.adapters._blocking import BlockingStore, LoopThread
    from skiplock.adapters.asyncpg import AsyncpgJobStore

    standby = read_dsn(args)
    with ExitStack() as stack:
        loop = LoopThread("skiplock-cli-loop")
        stack.callback(loop.close)

        def blocking(dsn: str) -> JobStore:
            store = AsyncpgJobStore(dsn, **_store_options(args))
            stack.callback(lambda: loop.run(store.close()))
            return cast("JobStore", BlockingStore(store, loop.loop))

        store = blocking(conninfo)
        reads = None if standby is None else blocking(standby)
        engine = Engine(store, _settings(), reads=reads)
        probe = _connect_asyncpg(conninfo, args.timeout)
        unreachable = asyncpg_call(args, lambda: loop.run(probe))
        reads_unreachable = None
        if standby is not None:
            probe = _connect_asyncpg(standby, args.timeout)
            reads_unreachable = asyncpg_call(args, lambda: loop.run(probe), reads=True)
        yield Reached(engine, unreachable, reads_unreachable)


def _connect(conninfo: str, timeout: timedelta) -> str | None:
    """Connect once; None if PostgreSQL answered, else why not (one line)."""
    import psycopg

    try:
        # libpq counts connect_timeout in whole seconds, at least 2.
        seconds = max(2, math.ceil(timeout.total_seconds()))
        with psycopg.connect(conninfo, connect_timeout=seconds, autocommit=True):
            return None
    except psycopg.Error as exc:
        return one_line(str(exc))


async def _connect_asyncpg(conninfo: str, timeout: timedelta) -> str | None:
    """:func:`_connect` through asyncpg."""
    import asyncpg

    try:
        connection = await asyncpg.connect(conninfo, timeout=timeout.total_seconds())
        await connection.close()
    except asyncpg.ClientConfigurationError:
        raise  # a connection string asyncpg cannot parse: not a server that is down
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        return one_line(str(exc) or type(exc).__name__)
    return None
