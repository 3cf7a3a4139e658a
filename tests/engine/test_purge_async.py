"""``AsyncEngine.purge_dead()`` (sync twin generated): dead jobs deleted in bulk by kind,
tenant, time of death, error text and an id bound, on the in-memory store with a fake
clock; a dry run counts, audited per job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from skiplock import AsyncEngine, AuditAction, JobContext, JobState, Settings, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.engine import DeadPurge
from skiplock.engine.admin._purge import PURGE_BATCH
from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def engine(clock: FakeClock) -> AsyncEngine:
    engine = AsyncEngine(AsyncInMemoryJobStore(clock=clock), Settings(audit=True), clock=clock)

    @engine.processor("mail", max_attempts=1)
    async def mail(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError(payload)

    @engine.processor("sms", max_attempts=1)
    async def sms(payload: Any, ctx: JobContext) -> None:
        raise RuntimeError(payload)

    return engine


async def _bury(engine: AsyncEngine, kind: str, error: str, tenant: str | None = None) -> int:
    job = await engine.enqueue(kind, error, tenant=tenant)
    await engine.worker().run_until_idle()
    assert (await engine.get_job(job.id)).state is JobState.DEAD
    return job.id


async def _ids(engine: AsyncEngine) -> list[int]:
    return [job.id for job in await engine.list_jobs()]


async def test_a_dry_run_counts_and_bounds_what_a_purge_deletes(engine: AsyncEngine) -> None:
    first = await _bury(engine, "mail", "SMTP closed")
    second = await _bury(engine, "mail", "SMTP closed")
    count = await engine.purge_dead(dry_run=True)
    assert count == DeadPurge(matched=2, deleted=0, up_to_id=second)
    later = await _bury(engine, "mail", "SMTP closed")  # dies after the count
    await engine.retry_job(second)  # replayed after the count
    done = await engine.operator("carol").purge_dead(up_to_id=count.up_to_id)
    assert done == DeadPurge(matched=1, deleted=1, up_to_id=first)
    assert await _ids(engine) == [second, later]
    [*_, discard] = await engine.audit_trail(first)
    assert (discard.action, discard.actor) == (AuditAction.DISCARD, "carol")
    assert await engine.purge_dead(kind="sms") == DeadPurge(matched=0, deleted=0, up_to_id=None)


async def test_the_filters_all_apply(engine: AsyncEngine, clock: FakeClock) -> None:
    old_smtp = await _bury(engine, "mail", "SMTPServerDisconnected", tenant="acme")
    old_dns = await _bury(engine, "mail", "gaierror: no such host", tenant="acme")
    old_sms = await _bury(engine, "sms", "smtp? no: a gateway error", tenant="acme")
    old_other = await _bury(engine, "mail", "SMTPServerDisconnected", tenant="globex")
    clock.advance(timedelta(days=3))
    new_smtp = await _bury(engine, "mail", "SMTPServerDisconnected", tenant="acme")
    pending = await engine.enqueue_after(3600, "mail", "later", tenant="acme")
    cutoff = clock.now() - timedelta(days=1)
    assert (await engine.purge_dead(died_before=cutoff, dry_run=True)).matched == 4
    done = await engine.purge_dead(kind="mail", tenant="acme", died_before=cutoff, error="smtp")
    assert done == DeadPurge(matched=1, deleted=1, up_to_id=old_smtp)
    assert await _ids(engine) == [old_dns, old_sms, old_other, new_smtp, pending.id]
    assert (await engine.purge_dead(error="SMTP")).deleted == 3  # ignoring case
    assert await _ids(engine) == [old_dns, pending.id]


async def test_a_purge_reads_and_deletes_page_by_page(engine: AsyncEngine) -> None:
    total = PURGE_BATCH * 2 + 3
    for n in range(total):
        await engine.enqueue("mail", f"error {n}")
    await engine.worker(concurrency=50).run_until_idle()
    count = await engine.purge_dead(dry_run=True)
    assert count.matched == total
    assert (await engine.purge_dead(up_to_id=count.up_to_id)).deleted == total
    assert await _ids(engine) == []


async def test_bad_arguments_are_refused_before_anything_changes(engine: AsyncEngine) -> None:
    dead = await _bury(engine, "mail", "boom")
    bad: list[dict[str, Any]] = [
        {"died_before": datetime(2030, 1, 1)},  # naive
        {"error": ""},
        {"error": "x" * 201},
        {"error": "nul\x00"},
        {"up_to_id": "1"},
        {"up_to_id": 2**63},
        {"dry_run": "yes"},
    ]
    for arguments in bad:
        with pytest.raises(ValidationError):
            await engine.purge_dead(**arguments)
    with pytest.raises(ValidationError, match="actor"):
        await engine.operator("bad\nactor").purge_dead()
    assert await _ids(engine) == [dead]
