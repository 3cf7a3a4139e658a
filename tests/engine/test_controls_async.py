"""Pauses and limits set at run time (issue 30) on the in-memory store (async source;
``test_controls.py`` is its generated twin): the engine and operator API, the worker
leaving paused jobs unclaimed and picking up changes while it runs, stored limits over
the policies, the audit events and the health report."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    JobContext,
    JobState,
    RateLimit,
    Settings,
    UnknownKindError,
    ValidationError,
)
from skiplock._compat_async import Event, join, spawn, wait_event
from skiplock.core import AuditAction, WorkerInfo

from .helpers_async import CountingStore, eventually

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.core import AuditEvent
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio


@pytest.fixture
def store(clock: FakeClock) -> CountingStore:
    return CountingStore(clock=clock)


def make_engine(store: CountingStore, clock: FakeClock, **kw: Any) -> AsyncEngine:
    engine = AsyncEngine(store, Settings(**kw), clock=clock)
    return engine


def _register(engine: AsyncEngine, ran: list[tuple[str, str | None]], *kinds: str) -> None:
    for kind in kinds:

        async def run(payload: object, ctx: JobContext) -> None:
            ran.append((ctx.kind, ctx.tenant))

        engine.processor(kind)(run)


async def test_a_paused_kind_is_not_claimed_until_resumed(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    ran: list[tuple[str, str | None]] = []
    _register(engine, ran, "mail", "report")
    mail = [(await engine.enqueue("mail", {}, tenant=t)).id for t in ("a", "b")]
    await engine.enqueue("report", {}, tenant="a")
    pause = await engine.pause(kind="mail", reason="provider down")
    assert (pause.kind, pause.tenant, pause.reason) == ("mail", None, "provider down")
    assert [p.kind for p in await engine.paused()] == ["mail"]

    assert await engine.worker().run_until_idle() == 1
    assert ran == [("report", "a")]
    for job_id in mail:
        job = await engine.get_job(job_id)
        # Never claimed and released: its attempts and claims are as enqueued.
        assert (job.state, job.attempts, job.claims) == (JobState.PENDING, 0, 0)

    lifted = await engine.resume(kind="mail")
    assert lifted is not None
    assert await engine.resume(kind="mail") is None
    assert await engine.paused() == []
    assert await engine.worker().run_until_idle() == 2
    assert sorted(ran) == [("mail", "a"), ("mail", "b"), ("report", "a")]


async def test_tenant_and_pair_pauses(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    ran: list[tuple[str, str | None]] = []
    _register(engine, ran, "mail", "report")
    for kind in ("mail", "report"):
        for tenant in ("a", "b", None):
            await engine.enqueue(kind, {}, tenant=tenant)
    await engine.pause(tenant="a")
    await engine.pause(kind="report", tenant="b")
    await engine.worker().run_until_idle()
    assert sorted(ran, key=str) == sorted(
        [("mail", "b"), ("mail", None), ("report", None)], key=str
    )
    await engine.resume(tenant="a")
    await engine.resume(kind="report", tenant="b")
    await engine.worker().run_until_idle()
    assert len(ran) == 6


async def test_pause_arguments_are_checked(store: CountingStore, clock: FakeClock) -> None:
    engine = make_engine(store, clock)
    with pytest.raises(ValidationError):
        await engine.pause()
    with pytest.raises(ValidationError):
        await engine.pause(kind="mail", reason=7)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        await engine.set_limit(kind="mail", rps=0, burst=1)
    with pytest.raises(ValidationError):
        await engine.set_limit(tenant="a", rps=1, burst=1)
    assert await engine.paused() == []
    assert await engine.limits() == []


async def test_a_running_worker_follows_pause_and_resume(
    store: CountingStore, clock: FakeClock
) -> None:
    # A long poll: only the controls refresh can wake the idle worker for the resume.
    engine = make_engine(store, clock, poll_interval=30, controls_refresh=0.05)
    ran: list[tuple[str, str | None]] = []
    _register(engine, ran, "mail")
    worker = engine.worker()
    task = spawn(worker.run)
    await eventually(lambda: worker.state == "running")
    # This engine's own pause applies to its workers' next claim (another process's
    # within controls_refresh).
    await engine.pause(kind="mail")
    for tenant in ("a", "b", "c"):
        await engine.enqueue("mail", {}, tenant=tenant)
    claims = store.claims
    # The notifications wake it; for half a second it claims nothing.
    assert not await wait_event(Event(), 0.5)
    assert ran == []
    assert store.claimed == 0
    # Idle while paused: a claim per notification and refresh at most, not a spin.
    assert store.claims - claims < 20
    started = time.monotonic()
    await engine.resume(kind="mail")
    await eventually(lambda: len(ran) == 3, timeout=5)
    assert time.monotonic() - started < 1.0
    worker.stop()
    await join(task)


@pytest.mark.parametrize("scope", ["cluster", "process"])
async def test_stored_limits_win_over_policies(
    store: CountingStore, clock: FakeClock, scope: str
) -> None:
    # Cluster-wide (the store's buckets, ClaimRequest.rates) and per process alike.
    engine = make_engine(store, clock, concurrency=8, rate_limit_scope=scope)
    ran: list[tuple[str, str | None]] = []

    @engine.processor("mail", rate_limit=RateLimit(rps=1, burst=5))
    async def mail(payload: object, ctx: JobContext) -> None:
        ran.append((ctx.kind, ctx.tenant))

    for tenant in ("a", "big"):
        for _ in range(10):
            await engine.enqueue("mail", {}, tenant=tenant)
    # The kind's default for every tenant, and a tenant of its own above it.
    default = await engine.set_limit(kind="mail", rps=1, burst=2)
    assert (default.kind, default.tenant, default.limit) == ("mail", None, RateLimit(1, 2))
    await engine.set_limit(kind="mail", tenant="big", rps=1, burst=4)
    await engine.worker().run_until_idle()
    assert ran.count(("mail", "a")) == 2
    assert ran.count(("mail", "big")) == 4
    assert {(x.kind, x.tenant) for x in await engine.limits()} == {("mail", None), ("mail", "big")}

    # Cleared: the policy (burst 5) applies again; the buckets restart full.
    await engine.clear_limit(kind="mail")
    await engine.clear_limit(kind="mail", tenant="big")
    assert await engine.limits() == []
    await engine.worker().run_until_idle()
    assert ran.count(("mail", "a")) == 2 + 5


@pytest.mark.parametrize("scope", ["cluster", "process"])
async def test_a_stored_provider_cap(store: CountingStore, clock: FakeClock, scope: str) -> None:
    engine = make_engine(store, clock, concurrency=8, rate_limit_scope=scope)
    ran: list[tuple[str, str | None]] = []
    for kind in ("mail", "sms"):

        async def run(payload: object, ctx: JobContext) -> None:
            ran.append((ctx.kind, ctx.tenant))

        engine.processor(kind, provider="twilio")(run)
        for _ in range(5):
            await engine.enqueue(kind, {})
    await engine.set_limit(provider="twilio", rps=1, burst=3)
    await engine.worker().run_until_idle()
    assert len(ran) == 3  # across both kinds of the provider


async def test_a_stored_limit_holds_across_engines_in_the_store(
    store: CountingStore, clock: FakeClock
) -> None:
    # Two engines on one store stand for two worker processes: the stored limit is the
    # rate of the store's one bucket per pair, so together they take its burst, no more.
    ran: list[tuple[str, str | None]] = []
    engines = [make_engine(store, clock, concurrency=4) for _ in range(2)]
    for engine in engines:
        _register(engine, ran, "mail")
    for _ in range(10):
        await engines[0].enqueue("mail", {}, tenant="a")
    await engines[0].set_limit(kind="mail", rps=1, burst=3)
    for engine in engines:
        await engine.worker().run_until_idle()
    assert ran == [("mail", "a")] * 3
    # A tenant's own limit, set by the other engine, replaces the default at once.
    await engines[1].set_limit(kind="mail", tenant="a", rps=1, burst=5)
    for engine in engines:
        await engine.worker().run_until_idle()
    assert len(ran) == 3 + 5


async def test_operator_changes_are_audited_with_the_actor(
    store: CountingStore, clock: FakeClock
) -> None:
    events: list[AuditEvent] = []

    def sink(recorded: Sequence[AuditEvent], connection: object) -> None:
        events.extend(recorded)

    engine = AsyncEngine(store, Settings(audit=True), clock=clock, audit_sink=sink)
    ops = engine.operator("alice")
    pause = await ops.pause(kind="mail", tenant="t", reason="outage")
    assert pause.actor == "alice"
    await ops.resume(kind="mail", tenant="t")
    limit = await ops.set_limit(kind="mail", rps=2, burst=3)
    assert limit.actor == "alice"
    await ops.clear_limit(kind="mail")
    await engine.operator("bob").pause(tenant="t")
    assert [(e.action, e.job_id, e.kind, e.tenant, e.actor) for e in events] == [
        (AuditAction.PAUSED, None, "mail", "t", "alice"),
        (AuditAction.RESUMED, None, "mail", "t", "alice"),
        (AuditAction.LIMIT_SET, None, "mail", None, "alice"),
        (AuditAction.LIMIT_CLEARED, None, "mail", None, "alice"),
        (AuditAction.PAUSED, None, None, "t", "bob"),
    ]


async def test_operator_without_audit_still_names_the_actor(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    pause = await engine.operator("carol").pause(tenant="t")
    assert pause.actor == "carol"
    assert [p.actor for p in await engine.paused()] == ["carol"]


async def test_health_lists_pauses_and_does_not_call_paused_jobs_uncovered(
    store: CountingStore, clock: FakeClock
) -> None:
    engine = make_engine(store, clock)
    await engine.enqueue("mail", {})
    report = await engine.health()
    assert report.uncovered_kinds == ["mail"]
    await engine.pause(kind="mail", reason="outage")
    report = await engine.health()
    assert report.uncovered_kinds == []
    assert report.healthy
    assert [(p.kind, p.tenant, p.reason) for p in report.paused] == [("mail", None, "outage")]
    assert report.to_dict()["paused"][0]["kind"] == "mail"
    # The due jobs it holds back count among the throttled ones (the jobs_throttled gauge).
    assert [(t.kind, t.tenant, t.due, t.limit) for t in report.throttled] == [
        ("mail", None, 1, "paused")
    ]


async def test_a_pause_or_limit_of_an_unknown_kind_is_refused(
    store: CountingStore, clock: FakeClock
) -> None:
    # Issue 41 item 4: a typo was stored and never applied.
    engine = make_engine(store, clock)
    _register(engine, [], "email_send", "report")
    ops = engine.operator("alice")
    for change in (
        lambda: engine.pause(kind="emial_send"),
        lambda: ops.pause(kind="emial_send", tenant="t"),
        lambda: engine.set_limit(kind="emial_send", rps=1, burst=1),
        lambda: ops.set_limit(kind="emial_send", tenant="t", rps=1, burst=1),
    ):
        with pytest.raises(UnknownKindError) as refused:
            await change()
        message = str(refused.value)
        # Enqueue's words: the known kinds, the closest one, and the opt-in.
        assert message.startswith("unknown kind 'emial_send': no processor or declaration")
        assert "(known kinds: 'email_send', 'report')" in message
        assert "allow_unknown_kind" in message
        assert message.endswith("Did you mean 'email_send'?")
    assert await engine.paused() == []
    assert await engine.limits() == []
    # The opt-in: a kind another service declares.
    await ops.pause(kind="billing", allow_unknown_kind=True)
    await ops.set_limit(kind="billing", rps=1, burst=1, allow_unknown_kind=True)
    assert [p.kind for p in await engine.paused()] == ["billing"]
    assert [x.kind for x in await engine.limits()] == ["billing"]
    # Known kinds, tenants and providers need no opt-in; lifting never does.
    await engine.pause(kind="email_send", tenant="anyone")
    await engine.pause(tenant="anyone")
    await engine.set_limit(provider="smtp", rps=1, burst=1)
    assert await engine.resume(kind="billing") is not None
    assert await engine.clear_limit(kind="billing") is not None
    assert await engine.resume(kind="emial_send") is None
    with pytest.raises(ValidationError, match="allow_unknown_kind must be a bool"):
        await engine.pause(kind="billing", allow_unknown_kind="yes")  # type: ignore[arg-type]


async def test_unknown_kinds_setting_applies_to_pauses_and_limits(
    store: CountingStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    allowing = make_engine(store, clock, unknown_kinds="allow")
    _register(allowing, [], "mail")
    await allowing.pause(kind="other")
    warning = make_engine(store, clock, unknown_kinds="warn")
    _register(warning, [], "mail")
    with caplog.at_level(logging.WARNING, logger="skiplock.engine"):
        await warning.set_limit(kind="mial", rps=1, burst=1)
    assert [r.getMessage() for r in caplog.records if r.name == "skiplock.engine"] == [
        "unknown kind 'mial': no processor or declaration for it here (known kinds: 'mail'); "
        "storing the limit anyway (Settings.unknown_kinds='warn'). Did you mean 'mail'?"
    ]
    assert [p.kind for p in await warning.paused()] == ["other"]
    assert [x.kind for x in await warning.limits()] == ["mial"]


async def test_an_engine_without_kinds_checks_the_kinds_of_its_database(
    store: CountingStore, clock: FakeClock
) -> None:
    # The bare `skiplock --dsn` command's engine declares nothing.
    bare = make_engine(store, clock)
    await bare.pause(kind="anything")  # the database knows no kind either
    await bare.resume(kind="anything")
    await bare.enqueue("email_send", {})
    # A worker of another service registered the kinds it claims.
    await store.register_worker(WorkerInfo(id="w", host="h", pid=1, kinds=frozenset({"report"})))
    assert await bare.pause(kind="email_send") is not None
    assert await bare.pause(kind="report") is not None
    with pytest.raises(UnknownKindError, match=r"known kinds: 'email_send', 'report'"):
        await bare.pause(kind="reprot")
    with pytest.raises(UnknownKindError, match="Did you mean 'email_send'"):
        await bare.set_limit(kind="emial_send", rps=1, burst=1)
    assert await bare.limits() == []
