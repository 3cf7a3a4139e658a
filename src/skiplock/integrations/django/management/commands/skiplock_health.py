"""``manage.py skiplock_health``: ``engine.health()`` of a backend (exit 1 if unhealthy)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand, CommandError

from skiplock.core._fields import parse_duration
from skiplock.core._health import format_duration

from .._common import add_backend_option, backend_named

if TYPE_CHECKING:
    from django.core.management.base import CommandParser


def _duration(text: str) -> timedelta:
    value = parse_duration(text)
    if value <= timedelta(0):
        raise ValueError(f"expected a duration > 0, got {text!r}")
    return value


class Command(BaseCommand):
    help = (
        "The health of a skiplock backend's queue and workers (engine.health()): the "
        "database, the schema version, live workers, per kind and queue the due jobs and "
        "the age of the oldest, and kinds with due jobs that no live worker claims. "
        "Exit 0 when healthy, 1 with one line per problem otherwise."
    )
    requires_system_checks: list[str] = []  # noqa: RUF012 - Django's own annotation

    def add_arguments(self, parser: CommandParser) -> None:
        add_backend_option(parser)
        parser.add_argument("--json", action="store_true", help="the report as JSON")
        parser.add_argument(
            "--max-age",
            type=_duration,
            metavar="DURATION",
            help="unhealthy if a kind's oldest due job has waited longer (30s, 5m, 1h)",
        )
        parser.add_argument(
            "--max-dead", type=int, metavar="N", help="unhealthy above N dead jobs of a kind"
        )
        parser.add_argument(
            "--worker-timeout",
            type=_duration,
            metavar="DURATION",
            help="a worker is live while its last heartbeat is younger than this",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        engine = backend_named(options["backend"]).engine
        report = engine.health(
            max_pending_age=options["max_age"],
            worker_timeout=options["worker_timeout"],
            max_dead=options["max_dead"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(report.to_dict(), indent=2))
        else:
            self.stdout.write(f"status:   {'healthy' if report.healthy else 'unhealthy'}")
            for problem in report.problems:
                self.stdout.write(f"problem:  {problem}")
            if report.schema is not None and report.schema.installed:
                self.stdout.write(
                    f"schema:   {report.schema.name!r} version {report.schema.version} "
                    f"(this code expects {report.schema.expected})"
                )
            live = sum(worker.live for worker in report.workers)
            timeout = format_duration(report.thresholds.worker_timeout)
            self.stdout.write(f"workers:  {live} live (a heartbeat within {timeout})")
            for kind in report.kinds:
                self.stdout.write(
                    f"kind:     {kind.kind}: {kind.pending_due} due, {kind.running} running, "
                    f"{kind.dead} dead"
                )
        if not report.healthy:
            raise CommandError("the queue is unhealthy", returncode=1)
