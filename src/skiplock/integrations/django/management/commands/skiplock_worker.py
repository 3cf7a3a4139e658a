"""``manage.py skiplock_worker``: ``skiplock worker`` on a backend's Django tasks."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from django.core.management.base import CommandError
from django.utils.module_loading import autodiscover_modules

from ._mount import MountedCommand

if TYPE_CHECKING:
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
