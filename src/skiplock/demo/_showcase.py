"""The showcase: payload types, processors and the mix of jobs the demo enqueues."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import attrs

from skiplock import AsyncEngine, Enqueue, JobContext, RateLimit, Settings
from skiplock.core import JobState

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.ports import AsyncJobStore, Metrics

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


def build_engine(store: AsyncJobStore, metrics: Metrics) -> AsyncEngine:
    """An engine with the showcase processors registered, reporting to ``metrics``."""
    # Short polls so backoffs and the scheduled job are picked up within a tenth of a second.
    settings = Settings(poll_interval=0.1, shutdown_timeout=5.0)
    engine = AsyncEngine(store, settings=settings, metrics=metrics)

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
