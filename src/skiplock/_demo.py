"""``skiplock demo``: a few seconds of skiplock at work, in memory or on PostgreSQL.

It enqueues a showcase mix (typed payloads, retries with backoff, a dead letter, a
per-tenant rate limit, a scheduled job, an idempotent duplicate), runs one AsyncWorker
with a live progress view, and prints what happened to every kind.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import shutil
import sys
import time
from collections import Counter, deque
from contextlib import contextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TextIO

import attrs

from skiplock import AsyncEngine, Enqueue, JobContext, RateLimit, Settings
from skiplock.core import Job, JobState, StateCount, StoreError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from skiplock.ports import AsyncJobStore

#: PostgreSQL schema of the demo, dropped and re-created on every run.
DEMO_SCHEMA = "skiplock_demo"
MEMORY_LABEL = "in-memory store"
POSTGRES_LABEL = f"PostgreSQL store, schema {DEMO_SCHEMA}"
#: Give up waiting for the jobs after this many seconds (they normally need ~3 s).
DEADLINE = 20.0
CONCURRENCY = 4

FLAKY_FAILURES = 2
PAYMENT_ATTEMPTS = 3
WEBHOOKS = 6
SCHEDULE_DELAY = timedelta(seconds=2)
BACKOFF = timedelta(seconds=0.2)
WEBHOOK_LIMIT = RateLimit(rps=2, burst=2)
#: States nothing leaves without an operator: the demo is over when every job is in one.
FINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.DEAD, JobState.FAILED, JobState.CANCELLED})

#: The showcase kinds in display order, with what each one demonstrates.
KINDS: Mapping[str, str] = {
    "email.send": "typed attrs payload, succeeds",
    "report.build": f"fails {FLAKY_FAILURES}x, then succeeds (backoff {BACKOFF.total_seconds()}s)",
    "payment.capture": f"always fails: dead after {PAYMENT_ATTEMPTS} attempts",
    "webhook.deliver": (
        f"tenant acme limited to {WEBHOOK_LIMIT.rps:g}/s, burst {WEBHOOK_LIMIT.burst}; "
        "waits use no attempt"
    ),
    "reminder.send": f"scheduled {SCHEDULE_DELAY.total_seconds():g}s ahead (enqueue_after)",
}


@attrs.frozen
class Email:
    """Payload of ``email.send``: the processor receives this type, not a dict."""

    to: str
    subject: str


@attrs.frozen
class Webhook:
    """Payload of ``webhook.deliver``."""

    url: str
    event: str


@attrs.frozen
class DemoReport:
    """What the demo did: the final state of every job it enqueued."""

    jobs: tuple[Job, ...]
    elapsed: float
    complete: bool
    duplicates: int

    def of_kind(self, kind: str) -> list[Job]:
        """The jobs of one kind, by id."""
        return [job for job in self.jobs if job.kind == kind]

    @property
    def dead(self) -> list[Job]:
        """The dead letter queue."""
        return [job for job in self.jobs if job.state is JobState.DEAD]


def build_engine(store: AsyncJobStore) -> AsyncEngine:
    """An engine with the showcase processors registered."""
    # Short polls so backoffs and the scheduled job are picked up within a tenth of a second.
    engine = AsyncEngine(store, settings=Settings(poll_interval=0.1, shutdown_timeout=5.0))

    @engine.processor("email.send")
    async def send_email(payload: Email, ctx: JobContext) -> None:
        await asyncio.sleep(random.uniform(0.02, 0.12))  # pretend to talk to a mail server

    @engine.processor("report.build", backoff_base=BACKOFF)
    async def build_report(payload: dict[str, Any], ctx: JobContext) -> None:
        if ctx.attempt <= FLAKY_FAILURES:
            raise ConnectionError(f"warehouse not reachable (attempt {ctx.attempt})")

    @engine.processor("payment.capture", max_attempts=PAYMENT_ATTEMPTS, backoff_base=BACKOFF)
    async def capture_payment(payload: dict[str, Any], ctx: JobContext) -> None:
        raise RuntimeError(f"card declined for order {payload['order']}")

    @engine.processor("webhook.deliver", rate_limit=WEBHOOK_LIMIT)
    async def deliver_webhook(payload: Webhook, ctx: JobContext) -> None:
        await asyncio.sleep(0.01)

    @engine.processor("reminder.send")
    async def send_reminder(payload: dict[str, Any], ctx: JobContext) -> None:
        pass

    return engine


async def enqueue_showcase(engine: AsyncEngine, emails: int) -> tuple[list[int], int]:
    """Enqueue the mix; returns the ids of the created jobs and the number of duplicates."""
    tenants = ("acme", "globex")
    batch = [
        Enqueue(
            "email.send",
            Email(to=f"user{i}@example.com", subject="Welcome to skiplock"),
            tenant=tenants[i % 2],
        )
        for i in range(1, emails + 1)
    ]
    # One tenant's webhooks: the rate limit is per (tenant, kind).
    batch += [
        Enqueue(
            "webhook.deliver",
            Webhook(url="https://acme.example/hook", event=f"e{i}"),
            tenant="acme",
        )
        for i in range(1, WEBHOOKS + 1)
    ]
    results = list(await engine.enqueue_many(batch))
    for month in ("2024-01", "2024-02"):
        results.append(await engine.enqueue("report.build", {"month": month}, priority=5))
    for _ in range(2):  # the second one is an idempotent no-op
        results.append(
            await engine.enqueue(
                "payment.capture", {"order": 1001}, tenant="globex", idempotency_key="order-1001"
            )
        )
    results.append(
        await engine.enqueue_after(SCHEDULE_DELAY, "reminder.send", {"user": "user1@example.com"})
    )
    ids = [result.id for result in results if result.created]
    return ids, len(results) - len(ids)


async def run_demo(
    store: AsyncJobStore,
    *,
    emails: int = 20,
    live: bool = True,
    out: TextIO | None = None,
    store_label: str = MEMORY_LABEL,
    deadline: float = DEADLINE,
) -> DemoReport:
    """Run the showcase on ``store``, print progress and the summary to ``out``."""
    out = out if out is not None else sys.stdout
    engine = build_engine(store)
    started = time.monotonic()
    ids, duplicates = await enqueue_showcase(engine, emails)
    out.write(
        f"skiplock demo on the {store_label}: {len(ids)} jobs enqueued"
        f" ({duplicates} duplicate ignored by its idempotency key)\n"
    )
    out.flush()
    display = _Display(out, total=len(ids), live=live)
    worker = engine.worker(concurrency=CONCURRENCY)
    with _capture_events() as events:
        running = asyncio.ensure_future(worker.run())
        try:
            while not running.done():
                counts = await engine.counts()
                finished = _finished(counts, len(ids))
                display.show(counts, time.monotonic() - started, final=finished, events=events)
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
    print_summary(report, out, store_label=store_label)
    return report


def _finished(counts: Iterable[StateCount], total: int) -> bool:
    return sum(c.count for c in counts if c.state in FINAL_STATES) >= total


class _EventLog(logging.Handler):
    """Keeps the last few warnings of the worker (failed attempts) for the live view."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.recent: deque[str] = deque(maxlen=3)

    def emit(self, record: logging.LogRecord) -> None:
        # "worker host/pid/uuid: job 12 (...) failed" -> "job 12 (...) failed"
        self.recent.append(_WORKER_PREFIX.sub("", record.getMessage()).splitlines()[0])


_WORKER_PREFIX = re.compile(r"^worker \S+: ")


@contextmanager
def _capture_events() -> Iterator[deque[str]]:
    """Route skiplock's log records into the live view instead of stderr meanwhile."""
    logger = logging.getLogger("skiplock")
    handler = _EventLog()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler.recent
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


# ---- output -----------------------------------------------------------------------------

_COLORS = {
    JobState.PENDING: "33",
    JobState.RUNNING: "36",
    JobState.SUCCEEDED: "32",
    JobState.DEAD: "31",
}
_SHOWN_STATES = (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED, JobState.DEAD)


class _Display:
    """Progress: redrawn in place on a terminal, one line per second otherwise."""

    def __init__(self, out: TextIO, *, total: int, live: bool) -> None:
        self.out = out
        self.total = total
        self.enabled = live
        self.tty = live and _isatty(out)
        self.color = self.tty and "NO_COLOR" not in os.environ
        self.fancy = self.tty and "utf" in (getattr(out, "encoding", None) or "").lower()
        self.interval = 0.1
        self._drawn = 0  # lines of the last frame, to move back over them
        self._next_line = 0.0
        if self.tty:
            out.write("\x1b[?25l")  # hide the cursor while redrawing

    def show(
        self,
        counts: Iterable[StateCount],
        elapsed: float,
        *,
        final: bool,
        events: Iterable[str] = (),
    ) -> None:
        if not self.enabled:
            return
        per_kind: dict[str, Counter[JobState]] = {kind: Counter() for kind in KINDS}
        totals: Counter[JobState] = Counter()
        for c in counts:
            per_kind.setdefault(c.kind, Counter())[c.state] += c.count
            totals[c.state] += c.count
        done = sum(n for state, n in totals.items() if state in FINAL_STATES)
        if self.tty:
            self._frame(per_kind, done, elapsed, list(events))
        elif final or elapsed >= self._next_line:
            self._next_line = elapsed + 1.0
            states = "  ".join(f"{state} {totals[state]}" for state in _SHOWN_STATES)
            self.out.write(f"  {elapsed:5.1f}s  {self._bar(done, 20)}  {states}\n")
        self.out.flush()

    def _frame(
        self,
        per_kind: Mapping[str, Counter[JobState]],
        done: int,
        elapsed: float,
        events: Sequence[str],
    ) -> None:
        rows = [
            [kind, *(self._paint(state, counts[state]) for state in _SHOWN_STATES)]
            for kind, counts in per_kind.items()
        ]
        lines = [f"  {self._bar(done, 30)}  {elapsed:4.1f}s", ""]
        lines += _table(["kind", *(str(state) for state in _SHOWN_STATES)], rows, "lrrrr")
        lines += ["", "  recent failures:" if events else ""]
        # A wrapped line would break moving back over the frame: cut to the terminal width.
        width = shutil.get_terminal_size().columns - 1
        lines += [_cut(f"    {event}", width) for event in events]
        back = f"\x1b[{self._drawn}F\x1b[J" if self._drawn else ""
        self.out.write(back + "".join(line + "\n" for line in lines))
        self._drawn = len(lines)

    def _bar(self, done: int, width: int) -> str:
        filled = width * done // self.total if self.total else width
        full, empty = ("\u2588", "\u2591") if self.fancy else ("#", "-")
        return f"[{full * filled}{empty * (width - filled)}] {done}/{self.total} done"

    def _paint(self, state: JobState, count: int) -> str:
        if not self.color or not count:
            return str(count)
        return f"\x1b[{_COLORS[state]}m{count}\x1b[0m"

    def close(self) -> None:
        if self.tty:
            self.out.write("\x1b[?25h")
            self.out.flush()


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """Columns aligned per ``align`` ('l'/'r' per column); the last column is not padded."""
    cells = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(_ANSI.sub("", row[i])) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = []
        for cell, width, side in zip(row, widths, align, strict=True):
            pad = " " * (width - len(_ANSI.sub("", cell)))
            parts.append(pad + cell if side == "r" else cell + pad)
        return ("  " + "  ".join(parts)).rstrip()

    return [line(row) for row in cells]


def _isatty(out: TextIO) -> bool:
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 3, 0)] + "..."


def _short_error(error: str | None, limit: int = 60) -> str:
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    return _cut(lines[-1] if lines[0].startswith("Traceback") else lines[0], limit)


def print_summary(report: DemoReport, out: TextIO, *, store_label: str) -> None:
    """The per-kind table, the dead letter queue and what to try next."""
    rows = []
    kinds = list(KINDS) + sorted({job.kind for job in report.jobs} - set(KINDS))
    for kind in kinds:
        jobs = report.of_kind(kind)
        states = Counter(job.state for job in jobs)
        rows.append(
            [
                kind,
                str(len(jobs)),
                str(states[JobState.SUCCEEDED]),
                str(states[JobState.DEAD]),
                str(sum(job.attempts for job in jobs)),
                KINDS.get(kind, ""),
            ]
        )
    out.write(f"\nSummary ({report.elapsed:.1f}s on the {store_label})\n")
    headers = ["kind", "jobs", "succeeded", "dead", "attempts", "what it shows"]
    out.writelines(line + "\n" for line in _table(headers, rows, "lrrrrl"))

    dead = report.dead
    out.write(f"\nDead letter queue ({len(dead)} job{'' if len(dead) == 1 else 's'})\n")
    if dead:
        dlq = [
            [
                str(job.id),
                job.kind,
                job.tenant or "-",
                str(job.attempts),
                _short_error(job.last_error),
            ]
            for job in dead
        ]
        out.writelines(
            line + "\n"
            for line in _table(["id", "kind", "tenant", "attempts", "last error"], dlq, "rllrl")
        )
    else:
        out.write("  (empty)\n")

    if not report.complete:
        left = sum(1 for job in report.jobs if job.state not in FINAL_STATES)
        out.write(f"\nStopped before the end: {left} job(s) not in a final state.\n")
    if store_label == POSTGRES_LABEL:
        try_next = f"look at the rows: SELECT id, kind, status, attempts FROM {DEMO_SCHEMA}.jobs;"
    else:
        try_next = "run it on PostgreSQL: skiplock demo --dsn postgresql://... (or SKIPLOCK_DSN)"
    out.write(
        "\nNext: read README.md (processors, enqueueing inside your own transaction),\n"
        f"      {try_next}\n"
        "      then run your own processors: skiplock worker yourapp.jobs:engine\n"
    )
    out.flush()


# ---- entry point ------------------------------------------------------------------------


def main(
    *, dsn: str | None = None, jobs: int = 20, live: bool = True, out: TextIO | None = None
) -> int:
    """``skiplock demo``: exit status 0 when every job reached a final state."""
    try:
        if dsn:
            store, label = _postgres_store(dsn)
        else:
            from skiplock.adapters.memory import AsyncInMemoryJobStore

            store, label = AsyncInMemoryJobStore(), MEMORY_LABEL
        report = asyncio.run(_run_and_close(store, jobs=jobs, live=live, out=out, label=label))
    except StoreError as exc:
        print(f"skiplock: demo failed: {exc}", file=sys.stderr)
        return 1
    return 0 if report.complete else 1


async def _run_and_close(
    store: AsyncJobStore, *, jobs: int, live: bool, out: TextIO | None, label: str
) -> DemoReport:
    try:
        return await run_demo(store, emails=jobs, live=live, out=out, store_label=label)
    finally:
        await store.close()


def _postgres_store(dsn: str) -> tuple[AsyncJobStore, str]:
    """A psycopg store on a freshly reset demo schema."""
    from skiplock.cli import psycopg_adapter

    pg = psycopg_adapter()
    import psycopg
    from psycopg import sql

    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(DEMO_SCHEMA))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(drop)
        pg.apply_schema(dsn, schema=DEMO_SCHEMA)
    except psycopg.Error as exc:
        raise StoreError(f"cannot prepare PostgreSQL: {exc}") from exc
    store: AsyncJobStore = pg.AsyncPsycopgJobStore(dsn, schema=DEMO_SCHEMA)
    return store, POSTGRES_LABEL
