"""``workers``: the registered workers, their heartbeats, slots, version and the jobs
each runs now; with ``--host``, a liveness check of that host's workers. ``drain-worker``
and ``stop-worker``: ask one, through the database, to drain or stop (issue 45,
docs/workers.md "Drain or stop a worker")."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from skiplock.core.rules import format_duration, running_jobs_json

from ._controls import add_actor_option
from ._errors import FAILED, OK, Failure
from ._health import add_json, add_worker_timeout, report
from ._output import cell, iso, print_json, table, time

if TYPE_CHECKING:
    import argparse

    from skiplock.core.store import WorkerRequest

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
    jobs = reached.reads().worker_jobs() if workers else {}
    status = 0
    if args.host is not None and not any(w.live for w in workers):
        status = 1
        print(f"skiplock: no live worker on host {args.host!r}", file=sys.stderr)
    if args.json:
        listed = [w.to_dict() | {"jobs": running_jobs_json(jobs.get(w.id, []))} for w in workers]
        print_json({"checked_at": iso(health.checked_at), "workers": listed})
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
            "-" if w.slots is None else str(w.slots),
            f"{format_duration(w.heartbeat_age)} ago",
            time(w.started_at),
            cell(w.version),
            cell(None if w.request is None else w.request.action),
        ]
        for w in workers
    ]
    headers = ["ID", "STATUS", "KINDS", "TENANTS", "RUNNING", "SLOTS", "HEARTBEAT", "STARTED"]
    print(table([*headers, "VERSION", "ASKED"], rows, right={4, 5, 6}))
    for w in workers:
        for job in jobs.get(w.id, []):
            print(f"  {w.id} runs job {job.id} ({job.kind}) since {time(job.claimed_at)}")
    return status


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``drain-worker`` and ``stop-worker``."""
    parser.add_argument("worker_id", metavar="WORKER_ID", help="the worker's id (see workers)")
    add_actor_option(parser)
    add_json(parser)


def run_drain(reached: Reached, args: argparse.Namespace) -> int:
    """``drain-worker``: stop claiming, finish the running jobs, exit."""
    operator = reached.checked().operator(args.actor)
    return _requested(args, operator.drain_worker(args.worker_id))


def run_stop(reached: Reached, args: argparse.Namespace) -> int:
    """``stop-worker``: the worker's graceful stop (running jobs get shutdown_timeout)."""
    operator = reached.checked().operator(args.actor)
    return _requested(args, operator.stop_worker(args.worker_id))


def _requested(args: argparse.Namespace, request: WorkerRequest | None) -> int:
    if args.json:
        print_json({"requested": None if request is None else request.to_json()})
    elif request is None:
        print(f"skiplock: no worker {args.worker_id!r} is registered", file=sys.stderr)
    else:
        print(f"asked worker {request.worker_id} to {request.action}")
    return OK if request is not None else FAILED
