"""``manage.py skiplock_schema sql|status|apply|index``: ``skiplock schema`` of a backend."""

from __future__ import annotations

from ._mount import MountedCommand


class Command(MountedCommand):
    name = "schema"
    help = (
        "skiplock's schema of a backend: 'sql' prints the DDL (what migrate applies; "
        "--from N: the upgrade from version N), 'status' the applied and pending "
        "migrations (exit 1 unless up to date), 'apply' applies the pending ones "
        "(migrate does it too), 'index' lists, adds or drops the opt-in search indexes."
    )
