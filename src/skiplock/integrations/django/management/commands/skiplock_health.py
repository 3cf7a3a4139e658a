"""``manage.py skiplock_health``: ``skiplock health`` of a backend (exit 1 if unhealthy)."""

from __future__ import annotations

from ._mount import MountedCommand


class Command(MountedCommand):
    name = "health"
    help = (
        "The health of a skiplock backend's queue and workers (engine.health()): the "
        "database, the schema version, live workers, per kind the due jobs and the age of "
        "the oldest, and kinds with due jobs that no live worker claims. Exit 0 when "
        "healthy, 1 with one line per problem otherwise."
    )
