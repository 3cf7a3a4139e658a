"""The worker in Django (``manage.py skiplock worker``, ``manage.py skiplock_worker``):
``skiplock worker`` on a backend's Django tasks, with Django's ``--queue-name`` and
``--verbosity``."""

from __future__ import annotations

import argparse
import importlib
import logging
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.management.base import CommandError
from django.utils.module_loading import autodiscover_modules

from skiplock import cli

from .._common import backend_named
from ._mount import Mount

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

    from skiplock.engine import Engine

    from ..._backend import SkiplockBackend

#: What ``--help`` says of the worker in Django.
HELP = (
    "Run a skiplock worker for the Django tasks of a skiplock backend until SIGTERM or "
    "SIGINT (the first stops claiming and lets running tasks finish for "
    "shutdown_timeout; a second releases them at once and exits 130). Tasks are found "
    "in every installed app's 'tasks' module and OPTIONS['MODULES']; a task's queue is "
    "its job's tenant (--queue-name, or skiplock's --tenants). No autoreloader: restart "
    "workers to load new code."
)


class WorkerMount(Mount):
    """``skiplock worker`` on the backend's worker engine, its tasks imported first."""

    system_checks: ClassVar[bool] = True

    def add_arguments(self, parser: CommandParser, django: cli.Leaf | None = None) -> None:
        super().add_arguments(parser, django)
        # Unset: --verbosity decides (--log-level, when given, wins).
        parser.set_defaults(log_level=None)

    def leaf(self, parser: argparse.ArgumentParser) -> None:
        super().leaf(parser)
        # Django's word for a task's queue, as django-tasks' db_worker spells it.
        parser.add_argument(
            "--queue-name",
            type=_queue_names,
            metavar="Q1,Q2",
            help="serve only the tasks of these queues ('*': every queue, the default); "
            "Django's name for --tenants (a task's queue is its job's tenant)",
        )

    def check(self, options: dict[str, Any]) -> None:
        assert self.parser is not None
        queues, tenants = options.get("queue_name"), options.get("tenants")
        if queues is not None and tenants is not None:
            self.parser.error("argument --queue-name: not allowed with argument --tenants")
        if queues is not None:
            options["tenants"] = None if queues == ["*"] else queues
        allowed = backend_named(options["backend"]).queues
        unknown = sorted(set(options.get("tenants") or ()) - allowed) if allowed else []
        if unknown:
            # Django refuses to enqueue a task on a queue QUEUES does not list: a worker
            # of one would serve nothing.
            option = "--queue-name" if queues is not None else "--tenants"
            self.parser.error(
                f"argument {option}: {', '.join(map(repr, unknown))} is not a queue of "
                f"TASKS[{options['backend']!r}]['QUEUES']: {', '.join(sorted(allowed))}"
            )

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


def _queue_names(text: str) -> list[str]:
    """``--queue-name``'s value: names separated by commas, or ``*`` for every queue."""
    return ["*"] if text.strip() == "*" else cli.split_list(text)


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
