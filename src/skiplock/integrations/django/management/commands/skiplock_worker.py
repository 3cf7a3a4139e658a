"""``manage.py skiplock_worker``: ``skiplock worker`` on a backend's Django tasks (as
``manage.py skiplock worker``)."""

from __future__ import annotations

from ._mount import MountedCommand
from ._worker import HELP, WorkerMount


class Command(MountedCommand):
    name = "worker"
    mount_class = WorkerMount
    help = HELP
    requires_system_checks = "__all__"
