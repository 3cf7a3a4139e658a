"""The ``skiplock`` command, and the command tree every door mounts.

One tree of commands (``worker``, ``schema``, ``health``, ``jobs``, ``dlq``, ``counts``,
``metrics``, ``workers``, ``demo``) with one set of option types, one way of printing (tables,
``--json``, one line per error), one start-up probe and one mapping from errors to exit
statuses: 0 success (also a worker stopped gracefully by SIGTERM/SIGINT), 1 the command
could not do its work (database unreachable, schema missing or older than the code, an
id not found or in a state that does not allow the action), 2 usage error (bad arguments,
bad import path, bad ``SKIPLOCK_*`` variable, missing optional dependency), 130
interrupted: a forced stop (a second signal: running jobs were released) or an
abandoned cleanup (a third signal, a KeyboardInterrupt).

The ``skiplock`` command finds what a command runs on from its own arguments (APP,
``--dsn``). A framework's door mounts a command on its application's engine instead, with
the same options, messages and exit statuses: :func:`add_arguments` and
:func:`run_parsed` for a door with an argparse parser of its own (Django's management
commands; :func:`summary` and :func:`description` say what each command does),
:func:`run_mounted` for one without (``flask skiplock``); :func:`log_handler` is the
worker's log handler (``--log-format``) for a door that sets up logging itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import TYPE_CHECKING

import skiplock

from ._database import DSN_ENV
from ._errors import USAGE, Failure, UsageError, guarded
from ._options import Leaf
from ._options import split as split_list
from ._startup import POOL_LOGGER, STARTUP_TIMEOUT
from ._tree import (
    MOUNTABLE,
    add_arguments,
    add_commands,
    description,
    run_mounted,
    run_parsed,
    summary,
)
from ._worker import apply_env, log_handler, resolve_app

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "DSN_ENV",
    "MOUNTABLE",
    "POOL_LOGGER",
    "STARTUP_TIMEOUT",
    "Failure",
    "Leaf",
    "UsageError",
    "add_arguments",
    "apply_env",
    "build_parser",
    "description",
    "log_handler",
    "main",
    "resolve_app",
    "run_mounted",
    "run_parsed",
    "split_list",
    "summary",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, argparse usage errors
        return exc.code if isinstance(exc.code, int) else USAGE
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return USAGE
    return guarded(handler, args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``skiplock`` command."""
    parser = argparse.ArgumentParser(
        prog="skiplock",
        description="Transactional task engine on PostgreSQL.",
    )
    parser.add_argument("--version", action="version", version=f"skiplock {_version()}")
    add_commands(parser.add_subparsers(title="commands", metavar="COMMAND"))
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("skiplock")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return skiplock.__version__
