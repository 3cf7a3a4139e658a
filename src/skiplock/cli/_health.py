"""``health``: the engine's health report (R9); exit 0 when healthy, 1 otherwise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from skiplock.core import QueueStats
from skiplock.core.rules import describe, format_duration, unreachable_report

from . import _options
from ._output import cell, print_json, table

if TYPE_CHECKING:
    import argparse

    from skiplock.core import HealthReport
    from skiplock.engine import Operator, Reader

    from ._database import Reached


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON (keys in docs/health.md)")


def add_worker_timeout(parser: argparse.ArgumentParser) -> None:
    _options.add_duration(
        parser,
        "--worker-timeout",
        "a worker is live while its last heartbeat is younger than this "
        "(default: 3 heartbeat intervals, 30s with default settings)",
    )


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``health`` in every door."""
    _options.add_duration(
        parser,
        "--max-age",
        "unhealthy if a kind's oldest due pending job has waited longer (30s, 5m, 1h, "
        "or seconds; default: no limit)",
        positive=False,
    )
    parser.add_argument(
        "--max-dead",
        type=_options.non_negative_int,
        metavar="N",
        help="unhealthy if a kind has more than N dead jobs (default: no limit)",
    )
    add_worker_timeout(parser)
    add_json(parser)


def report(operator: Operator | Reader, args: argparse.Namespace) -> HealthReport:
    return operator.health(
        max_pending_age=getattr(args, "max_age", None),
        worker_timeout=args.worker_timeout,
        max_dead=getattr(args, "max_dead", None),
    )


def run(reached: Reached, args: argparse.Namespace) -> int:
    # From the read replica when there is one (--read-dsn): its report says its lag.
    unreachable = reached.reads_failure
    operator = reached.engine.reader() if reached.reads_elsewhere else reached.engine.operator()
    if unreachable is None:
        health = report(operator, args)
    else:
        thresholds = operator.health_thresholds(
            max_pending_age=args.max_age, worker_timeout=args.worker_timeout, max_dead=args.max_dead
        )
        health = unreachable_report(unreachable, thresholds)
    print_report(health, as_json=args.json)
    return 0 if health.healthy else 1


def at_least(count: int, bounded: bool) -> str:
    """A count, with ">=" when it is a lower bound."""
    return f">= {count}" if bounded else str(count)


def print_report(health: HealthReport, *, as_json: bool) -> None:
    if as_json:
        print_json(health.to_dict())
        return
    print(f"status:   {'healthy' if health.healthy else 'unhealthy'}")
    for problem in health.problems:
        print(f"problem:  {problem}")
    if not health.reachable:
        return
    schema = health.schema
    if schema is not None:
        if schema.installed:
            state = "up to date" if schema.up_to_date else "out of date"
            print(
                f"schema:   {schema.name!r} version {schema.version} "
                f"(this code expects {schema.expected}): {state}"
            )
        else:
            print(f"schema:   {schema.name!r} not installed")
            return
    replica = health.replica
    if replica is not None:
        lag = "an unknown time" if replica.lag is None else format_duration(replica.lag)
        print(f"replica:  read from a hot standby, {lag} behind the primary")
    for pause in health.paused:
        reason = f": {pause.reason}" if pause.reason else ""
        print(f"paused:   {describe(pause.kind, pause.tenant)}{reason}")
    live = sum(w.live for w in health.workers)
    silent = len(health.workers) - live
    timeout = format_duration(health.thresholds.worker_timeout)
    print(f"workers:  {live} live, {silent} silent (live: a heartbeat within {timeout})")
    if health.kinds:
        print()
        rows = [
            [
                cell(k.kind),
                at_least(k.pending_due, k.bounded),
                at_least(k.scheduled, k.bounded),
                "-" if k.oldest_due_age is None else format_duration(k.oldest_due_age),
                str(k.running),
                str(k.dead),
                "yes" if k.covered else f"NO ({k.uncovered})",
            ]
            for k in health.kinds
        ]
        headers = ["KIND", "DUE", "SCHEDULED", "OLDEST DUE", "RUNNING", "DEAD", "COVERED"]
        print(table(headers, rows, right={1, 2, 3, 4, 5}))
        if any(k.bounded for k in health.kinds):
            print(
                f"(>= N: more than {QueueStats.SPLIT_BOUND:,} jobs both due and scheduled; "
                "the split is not counted further)"
            )
    if health.throttled:
        print()
        rows = [
            [cell(t.kind), cell(t.tenant or "-"), at_least(t.due, t.bounded), t.limit]
            for t in health.throttled
        ]
        print("throttled: due jobs a limit holds back now")
        print(table(["KIND", "TENANT", "DUE", "LIMIT"], rows, right={2}))
