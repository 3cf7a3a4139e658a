"""``manage.py skiplock_worker``: ``skiplock worker`` on a backend's Django tasks."""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError
from django.utils.module_loading import autodiscover_modules

from skiplock import cli

from ._mount import MountedCommand

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

    from skiplock.engine import Engine

    from ..._backend import SkiplockBackend


class Command(MountedCommand):
    name = "worker"
    help = (
        "Run a skiplock worker for the Django tasks of a skiplock backend until SIGTERM or "
        "SIGINT (the first stops claiming and lets running tasks finish for "
        "shutdown_timeout; a second releases them at once and exits 130). Tasks are found "
        "in every installed app's 'tasks' module and OPTIONS['MODULES']; a task's queue is "
        "its job's tenant (--tenants). No autoreloader: restart workers to load new code."
    )
    requires_system_checks = "__all__"

    def add_arguments(self, parser: CommandParser) -> None:
        super().add_arguments(parser)
        # Unset: --verbosity decides (--log-level, when given, wins).
        parser.set_defaults(log_level=None)

    def prepare(self, options: dict[str, Any]) -> None:
        if options.get("log_level") is None:
            options["log_level"] = VERBOSITY_LEVELS.get(options["verbosity"], logging.DEBUG)
        root = logging.getLogger()
        if not root.handlers:  # else the cli's basicConfig leaves LOGGING's root alone too
            handler = cli.log_handler(argparse.Namespace(**options))
            handler.setLevel(options["log_level"])  # Django's loggers pass INFO on
            handler.addFilter(ShownElsewhere())
            root.addHandler(handler)
            root.setLevel(options["log_level"])

    def engine(self, backend: SkiplockBackend) -> Engine:
        # Defining a task makes it known to the worker.
        autodiscover_modules("tasks")
        for module in backend.config.modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise CommandError(f"OPTIONS['MODULES']: cannot import {module!r}: {exc}") from None
        return backend.worker_engine()

    def done(self, backend: SkiplockBackend) -> None:
        # The worker closed the store it opened; the next use in this process (tests)
        # makes a new one.
        backend.close()


#: The log level of each ``--verbosity`` (0: warnings and errors only, no start-up line;
#: 2 and 3: debug).
VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO}


class ShownElsewhere(logging.Filter):
    """On the worker's own root handler: drops a record that a console handler of
    Django's ``LOGGING`` between its logger and the root prints already (Django's
    ``django`` logger does under ``DEBUG``), so that every event is printed once."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None and logger is not logging.root:
            for handler in logger.handlers:
                if (
                    isinstance(handler, logging.StreamHandler)
                    and not isinstance(handler, logging.FileHandler)
                    and record.levelno >= handler.level
                    and handler.filter(record)
                ):
                    return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True
