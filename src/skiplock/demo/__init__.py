"""``skiplock demo``: a few seconds of skiplock at work, in memory or on PostgreSQL.

It enqueues a showcase mix (typed payloads, retries with backoff, a dead letter, a
per-tenant rate limit, a scheduled job, an idempotent duplicate), runs one AsyncWorker
with a live progress view, and prints what happened to every kind.

The caller (the ``skiplock`` command) builds the store and closes it; the live view hears
from the worker through the :class:`~skiplock.ports.Metrics` port.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING, TextIO

from ._live import DemoEvents, Display, quiet_logs
from ._showcase import CONCURRENCY, DEADLINE, FINAL_STATES, build_engine, enqueue_showcase
from ._summary import DemoReport, print_summary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from skiplock.core import StateCount
    from skiplock.ports import AsyncJobStore

__all__ = ["DEMO_SCHEMA", "DemoReport", "run_demo"]

#: PostgreSQL schema of the demo; the ``skiplock`` command resets it before every run.
DEMO_SCHEMA = "skiplock_demo"


async def run_demo(
    store: AsyncJobStore,
    *,
    postgres_schema: str | None = None,
    emails: int = 20,
    live: bool = True,
    out: TextIO | None = None,
    deadline: float = DEADLINE,
) -> DemoReport:
    """Run the showcase on ``store`` (empty), print progress and the summary to ``out``.

    ``postgres_schema`` names the schema a PostgreSQL store works in (for the labels and
    hints printed); None means an in-memory store. The caller closes the store.
    """
    out = out if out is not None else sys.stdout
    if postgres_schema is None:
        label = "in-memory store"
        try_next = "run it on PostgreSQL: skiplock demo --dsn postgresql://... (or SKIPLOCK_DSN)"
    else:
        label = f"PostgreSQL store, schema {postgres_schema}"
        try_next = (
            f"look at the rows: SELECT id, kind, status, attempts FROM {postgres_schema}.jobs;"
        )
    events = DemoEvents()
    engine = build_engine(store, metrics=events)
    started = time.monotonic()
    ids, duplicates = await enqueue_showcase(engine, emails)
    out.write(
        f"skiplock demo on the {label}: {len(ids)} jobs enqueued"
        f" ({duplicates} duplicate ignored by its idempotency key)\n"
    )
    out.flush()
    display = Display(out, total=len(ids), live=live, events=events)
    # The worker's own signal handling: Ctrl-C stops it gracefully, then the summary follows.
    worker = engine.worker(concurrency=CONCURRENCY)
    with quiet_logs():
        running = asyncio.ensure_future(worker.run())
        try:
            while not running.done():
                counts = await engine.counts()
                finished = _finished(counts, len(ids))
                display.show(counts, time.monotonic() - started, final=finished)
                if finished or time.monotonic() - started > deadline:
                    break
                await asyncio.sleep(display.interval)
        finally:
            display.close()
            worker.stop()
            await running  # re-raises if the worker crashed
    jobs = tuple([await engine.get_job(job_id) for job_id in ids])
    report = DemoReport(
        jobs=jobs,
        elapsed=time.monotonic() - started,
        complete=all(job.state in FINAL_STATES for job in jobs),
        duplicates=duplicates,
    )
    print_summary(report, out, store_label=label, try_next=try_next)
    return report


def _finished(counts: Iterable[StateCount], total: int) -> bool:
    return sum(c.count for c in counts if c.state in FINAL_STATES) >= total
