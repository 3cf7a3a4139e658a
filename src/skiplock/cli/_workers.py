"""``workers``: the registered workers, their heartbeats and jobs; with ``--host``, a
liveness check of that host's workers."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from skiplock.core.rules import format_duration

from ._errors import Failure
from ._health import add_json, add_worker_timeout, report
from ._output import cell, iso, print_json, table, time

if TYPE_CHECKING:
    import argparse

    from ._database import Reached


def add_options(parser: argparse.ArgumentParser) -> None:
    add_worker_timeout(parser)
    parser.add_argument(
        "--host",
        metavar="HOST",
        help='only workers on HOST (e.g. "$(hostname)"); exit 1 unless one is live',
    )
    add_json(parser)


def run(reached: Reached, args: argparse.Namespace) -> int:
    health = report(reached.reads(), args)
    if not health.reachable or (health.schema is not None and not health.schema.installed):
        raise Failure(health.problems[0])
    workers = [w for w in health.workers if args.host is None or w.host == args.host]
    status = 0
    if args.host is not None and not any(w.live for w in workers):
        status = 1
        print(f"skiplock: no live worker on host {args.host!r}", file=sys.stderr)
    if args.json:
        print_json(
            {"checked_at": iso(health.checked_at), "workers": [w.to_dict() for w in workers]}
        )
        return status
    if not workers:
        print("no workers registered" if args.host is None else "no workers on this host")
        return status
    rows = [
        [
            cell(w.id),
            "live" if w.live else "silent",
            cell("*" if w.kinds is None else ",".join(sorted(w.kinds)), 40),
            cell("*" if w.tenants is None else ",".join(sorted(w.tenants)), 30),
            str(w.running),
            f"{format_duration(w.heartbeat_age)} ago",
            time(w.started_at),
        ]
        for w in workers
    ]
    headers = ["ID", "STATUS", "KINDS", "TENANTS", "RUNNING", "HEARTBEAT", "STARTED"]
    print(table(headers, rows, right={4, 5}))
    return status
