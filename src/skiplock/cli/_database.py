"""How the ``skiplock`` command reaches PostgreSQL without an application: ``--dsn``
(default ``$SKIPLOCK_DSN``), ``--schema`` and ``--timeout``, through psycopg."""

from __future__ import annotations

import importlib
import math
import os
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

import attrs

from skiplock.engine import AsyncEngine, Engine, Settings

from . import _options
from ._errors import Failure, UsageError
from ._output import one_line

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator
    from types import ModuleType

DSN_ENV = "SKIPLOCK_DSN"
PSYCOPG_HINT = "pip install 'skiplock[psycopg]'"
#: Default of ``--timeout``: how long a command waits for PostgreSQL (to connect, for a
#: pooled connection, and for each read): a database that is down or stuck is reported
#: within about this long.
DEFAULT_TIMEOUT = timedelta(seconds=2)


@attrs.frozen
class Reached:
    """A sync engine for an admin command, and why its database cannot be reached (None:
    it answered, or the door supplied the engine)."""

    engine: Engine
    unreachable: str | None = None

    def checked(self) -> Engine:
        """The engine, or Failure if its database did not answer."""
        if self.unreachable is not None:
            raise Failure(f"cannot connect to PostgreSQL: {self.unreachable}")
        return self.engine


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
    """``--dsn``, ``--schema`` and ``--timeout``."""
    _dsn_group(parser).add_argument(
        "--timeout",
        type=_options.positive_duration,
        default=DEFAULT_TIMEOUT,
        metavar="DURATION",
        help="how long to wait for PostgreSQL: to connect (at least 2s), for a pooled "
        "connection, and for each read (default: 2s)",
    )


def dsn(args: argparse.Namespace) -> str:
    found: str | None = args.dsn or os.environ.get(DSN_ENV)
    if not found:
        raise UsageError(f"no database given: pass --dsn or set {DSN_ENV}")
    return found


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


@contextmanager
def reach(args: argparse.Namespace) -> Iterator[Reached]:
    """An engine over the PostgreSQL of ``--dsn``, closed afterwards.

    PostgreSQL is reached with one plain connection first, so a database that is down
    fails at once with the server's or the operating system's words.
    """
    conninfo = dsn(args)
    adapter = psycopg_adapter()
    engine = Engine(
        adapter.PsycopgJobStore(
            conninfo,
            schema=args.schema,
            min_size=1,
            max_size=2,
            timeout=args.timeout.total_seconds(),
            connect_timeout=args.timeout.total_seconds(),
            read_timeout=args.timeout,
        ),
        # An operator's changes are what an audit trail is for (J10): recorded in the
        # audit table with --actor, whatever the applications configured.
        Settings(audit=True),
    )
    try:
        yield Reached(engine, _connect(conninfo, args.timeout))
    finally:
        engine.store.close()


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
