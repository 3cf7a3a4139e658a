"""``python -m benchmarks.rates``: a cluster-wide rate across worker processes (issue 30).

Starts ``--processes`` worker processes (``skiplock worker``, the app of
tests/psycopg/test_rate_processes.py) on a throw-away PostgreSQL cluster of its own
(benchmarks/pgcluster.py; or ``--dsn``), enqueues more ``rate.tick`` jobs than the window can
start, and measures on the database clock how many started in ``--seconds`` from the
first start: the configured rate should hold within 10 %, however many processes. Also
reports the claims the processes made (an idle throttled worker must not spin) and each
process's share. Prints a Markdown report.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from skiplock.core import EnqueueRequest
from tests.pghelpers import enqueue, sql, stop, wait_for, worker_processes
from tests.psycopg.test_rate_processes import APP, MODULE

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def _database(dsn: str | None) -> Iterator[str]:
    """``dsn``, or a throw-away cluster's, with skiplock's schema applied."""
    if dsn is not None:
        yield dsn
        return
    from benchmarks.pgcluster import cluster
    from skiplock.adapters.psycopg import apply_schema

    with cluster() as server:
        apply_schema(server.dsn)
        yield server.dsn


def measure(
    dsn: str, *, processes: int, slots: int, rate: float, burst: int, seconds: float
) -> str:
    """Run the measurement on ``dsn``; the Markdown report."""
    sql(dsn, "DROP TABLE IF EXISTS public.started, public.claims")
    sql(dsn, "CREATE TABLE public.started (job_id bigint, pid int, at timestamptz)")
    sql(dsn, "CREATE TABLE public.claims (pid int, at timestamptz, took int)")
    env = {
        "SKIPLOCK_TEST_APP_DSN": dsn,
        "SKIPLOCK_TEST_APP_SLOTS": str(slots),
        "SKIPLOCK_TEST_APP_RATE": str(rate),
        "SKIPLOCK_TEST_APP_BURST": str(burst),
    }
    with (
        tempfile.TemporaryDirectory(prefix="skiplock-rates-") as tmp,
        worker_processes(Path(tmp), MODULE, APP) as start,
    ):
        procs = [start(env, "WARNING") for _ in range(processes)]
        wait_for(
            lambda: sql(dsn, "SELECT count(*) FROM skiplock.workers")[0][0] == processes,
            120,
            "the workers to register",
        )
        jobs = int(rate * seconds * 1.5) + burst
        enqueue(dsn, [EnqueueRequest(kind="rate.tick") for _ in range(jobs)])
        wait_for(lambda: _elapsed(dsn) > seconds + 1, seconds + 120, "the window")
        stop(procs)
    started, per_pid = _window(dsn, seconds)
    per_second = sql(
        dsn,
        "SELECT floor(extract(epoch FROM at - (SELECT min(at) FROM public.started)))::int, "
        "count(*) FROM public.started GROUP BY 1 ORDER BY 1",
    )
    [(claims, took)] = sql(dsn, "SELECT count(*), coalesce(sum(took), 0) FROM public.claims")
    expected = rate * seconds
    lines = [
        f"# Cluster-wide rate: {processes} worker processes x {slots} slots, "
        f"{rate:g} jobs/s (burst {burst}), {seconds:g} s",
        "",
        f"- started in the window: {started} (configured {expected:g}; at most "
        f"{expected + burst:g}): {started / seconds:.2f} jobs/s, "
        f"{100 * started / expected:.1f} % of the rate",
        f"- per process: {', '.join(str(n) for _, n in per_pid)}",
        f"- claims of all processes over the run: {claims} ({took} jobs taken)",
        "",
        "| second | started |",
        "| --- | --- |",
        *(f"| {s} | {n} |" for s, n in per_second if s < seconds),
    ]
    return "\n".join(lines)


def _elapsed(dsn: str) -> float:
    [(value,)] = sql(
        dsn,
        "SELECT coalesce(extract(epoch FROM clock_timestamp() - min(at)), 0) FROM public.started",
    )
    return float(value)


def _window(dsn: str, seconds: float) -> tuple[int, list[tuple[int, int]]]:
    """Jobs started within ``seconds`` of the first start, and per process."""
    rows = sql(
        dsn,
        "SELECT pid, count(*) FROM public.started "
        "WHERE at < (SELECT min(at) FROM public.started) + %s * interval '1 s' "
        "GROUP BY pid ORDER BY pid",
        seconds,
    )
    return sum(n for _, n in rows), [(int(p), int(n)) for p, n in rows]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rates", description=__doc__)
    parser.add_argument("--dsn", help="a database to use (default: a throw-away cluster)")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--burst", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=30.0)
    ns = parser.parse_args(argv)
    begun = time.monotonic()
    with _database(ns.dsn) as dsn:
        report = measure(
            dsn,
            processes=ns.processes,
            slots=ns.slots,
            rate=ns.rate,
            burst=ns.burst,
            seconds=ns.seconds,
        )
    print(report)
    print(f"\n(run took {time.monotonic() - begun:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
