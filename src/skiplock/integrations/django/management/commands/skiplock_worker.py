"""``manage.py skiplock_worker``: run a skiplock worker for a backend's Django tasks."""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError
from django.utils.module_loading import autodiscover_modules

from skiplock.core import SkiplockError, ValidationError
from skiplock.engine import Settings

from ..._runtime import known_tasks
from .._common import add_backend_option, backend_named

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

    from ..._backend import SkiplockBackend

#: How long the start-up probe waits for PostgreSQL before the command gives up.
CONNECT_TIMEOUT = 5


class Command(BaseCommand):
    help = (
        "Run a skiplock worker for the Django tasks of a skiplock backend until SIGTERM or "
        "SIGINT (the first stops claiming and lets running tasks finish for "
        "shutdown_timeout; a second releases them at once and exits 130). Tasks are found "
        "in every installed app's 'tasks' module and OPTIONS['MODULES']. No autoreloader: "
        "restart workers to load new code."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_backend_option(parser)
        parser.add_argument(
            "--queue",
            dest="queues",
            action="append",
            metavar="NAME",
            help="run only tasks of this queue (repeatable; default: every queue)",
        )
        parser.add_argument(
            "--concurrency", type=int, metavar="N", help="tasks run at once (threads)"
        )
        parser.add_argument("--worker-id", metavar="ID", help="default: host:pid:random")
        parser.add_argument(
            "--until-idle",
            action="store_true",
            help="run what is due now, then exit (no signal handlers; for scripts and tests)",
        )
        parser.add_argument(
            "--log-level",
            choices=["DEBUG", "INFO", "WARNING", "ERROR"],
            help="log skiplock's records to stderr at this level (default: settings.LOGGING)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["log_level"]:
            logging.basicConfig(format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
            logging.getLogger("skiplock").setLevel(options["log_level"])
        backend = backend_named(options["backend"])
        _import_tasks(backend)
        _apply_env(backend)
        until_idle = options["until_idle"]
        try:
            worker = backend.worker(
                queues=options["queues"],
                concurrency=options["concurrency"],
                worker_id=options["worker_id"],
                # The command's stop policy: SIGTERM/SIGINT drain, a second signal forces.
                install_signal_handlers=not until_idle,
            )
        except ValidationError as exc:
            raise CommandError(str(exc)) from None
        try:
            _open(backend)
            queues = ", ".join(options["queues"] or ["every queue"])
            self.stdout.write(
                f"skiplock worker {worker.id}: {len(known_tasks())} task(s), {queues}, "
                f"backend {backend.alias!r}"
            )
            if until_idle:
                handled = worker.run_until_idle()
                self.stdout.write(f"handled {handled} job(s)")
                return
            worker.run()
        finally:
            backend.close()
        if worker.forced:
            raise SystemExit(130)


def _import_tasks(backend: SkiplockBackend) -> None:
    """Import every app's ``tasks`` module and ``OPTIONS["MODULES"]``: defining a task
    makes it known to the worker."""
    autodiscover_modules("tasks")
    for module in backend.config.modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise CommandError(f"OPTIONS['MODULES']: cannot import {module!r}: {exc}") from None


def _apply_env(backend: SkiplockBackend) -> None:
    """``SKIPLOCK_*`` environment variables over the backend's settings, as ``skiplock
    worker`` applies them; the command's options win over both."""
    engine = backend.engine
    try:
        settings = Settings.from_env(base=engine.settings)
        if settings != engine.settings:
            engine.configure(settings)
    except ValidationError as exc:
        raise CommandError(f"invalid environment: {exc}") from None


def _open(backend: SkiplockBackend) -> None:
    """Connect and check the schema before serving: one line and exit 1 if that fails
    (a running worker instead survives a database restart)."""
    import psycopg

    try:
        with psycopg.connect(backend.runtime.dsn, connect_timeout=CONNECT_TIMEOUT):
            pass
        backend.store.open()
    except (psycopg.Error, SkiplockError) as exc:
        raise CommandError(f"cannot start the worker: {' '.join(str(exc).split())}") from None
