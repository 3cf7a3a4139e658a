"""Declarations and typed task handles (sync twin generated): declare(), engine.task(),
engine.declare(), declared defaults, the web/worker split and unknown kinds."""

from __future__ import annotations

import inspect
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import (
    AsyncEngine,
    AsyncTask,
    Enqueue,
    Job,
    JobContext,
    JobState,
    PolicyOverrides,
    Processor,
    Settings,
    TaskDef,
    UnknownKindError,
    ValidationError,
    declare,
)
from skiplock.adapters.memory import AsyncInMemoryJobStore

from .support import Email, Report

if TYPE_CHECKING:
    from skiplock.testing import FakeClock

pytestmark = pytest.mark.anyio

# Declarations live in a module both processes import; no engine is needed to make them.
welcome = declare("email.welcome", Email, max_attempts=2, priority=-10, backoff_base=0)
report = declare("report.build", Report, priority=5, timeout=30, backoff_base=0)


@pytest.fixture
def store(clock: FakeClock) -> AsyncInMemoryJobStore:
    return AsyncInMemoryJobStore(clock=clock)


def _engine(store: AsyncInMemoryJobStore, clock: FakeClock, **settings: Any) -> AsyncEngine:
    return AsyncEngine(store, Settings(**settings), clock=clock)


# ---- declarations ---------------------------------------------------------------------


def test_declare_makes_an_equal_comparable_value_with_its_defaults() -> None:
    assert isinstance(welcome, TaskDef)
    assert (welcome.kind, welcome.payload_type, welcome.priority) == ("email.welcome", Email, -10)
    assert welcome.overrides == PolicyOverrides(max_attempts=2, backoff_base=0)
    assert welcome.options() == {"max_attempts": 2, "backoff_base": timedelta(0), "priority": -10}
    same = declare("email.welcome", Email, priority=-10, backoff_base=0.0, max_attempts=2)
    assert same == welcome
    assert declare("email.welcome", Email, max_attempts=3) != welcome
    assert repr(declare("x", Email, max_attempts=3)) == "TaskDef('x', Email, max_attempts=3)"
    untyped = declare("anything", provider="smtp")
    assert (untyped.payload_type, untyped.provider) == (Any, "smtp")
    assert repr(untyped) == "TaskDef('anything', Any, provider='smtp')"


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (("bad kind", Email), {}, ValidationError, "invalid kind"),
        (("k", Email), {"priority": 40000}, ValidationError, "priority"),
        (("k", Email), {"priority": "high"}, ValidationError, "priority"),
        (("k", Email), {"max_attempts": 0}, ValidationError, "max_attempts"),
        (("k", Email), {"timeout": -1}, ValidationError, "timeout"),
        (("k", Email), {"provider": " "}, ValidationError, "provider"),
        (("k", Email), {"transactional": True, "autocommit": True}, ValidationError, "exclusive"),
        (("k", Email), {"max_attempt": 3}, TypeError, "max_attempt"),
        (("k", Email(to="a")), {}, TypeError, "payload_type must be a type"),
    ],
)
def test_declare_rejects_bad_declarations(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        declare(*args, **kwargs)


# ---- handles: enqueue -----------------------------------------------------------------


async def test_handle_enqueue_passes_every_option(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    task = engine.declare(welcome)
    assert isinstance(task, AsyncTask)
    assert (task.kind, task.declaration, task.fn) == ("email.welcome", welcome, None)

    plain = await task.enqueue(Email("a"))
    opts = await task.enqueue(
        Email("b"),
        priority=3,
        tenant="t1",
        idempotency_key="k1",
        max_attempts=9,
        delay=timedelta(minutes=5),
    )
    again = await task.enqueue(Email("other"), idempotency_key="k1")
    assert (again.id, again.created) == (opts.id, False)
    when = datetime(2030, 1, 2, tzinfo=UTC)
    at = await task.enqueue(Email("c"), available_at=when)

    job = await engine.get_job(plain.id)
    assert (job.kind, job.payload, job.priority, job.max_attempts) == (
        "email.welcome",
        {"to": "a", "subject": ""},
        -10,
        2,
    )
    assert (job.tenant, job.idempotency_key, job.explicit_max_attempts) == (None, None, False)
    assert job.available_at == clock.now()
    job = await engine.get_job(opts.id)
    assert (job.priority, job.tenant, job.idempotency_key) == (3, "t1", "k1")
    assert (job.max_attempts, job.explicit_max_attempts) == (9, True)
    assert job.available_at == clock.now() + timedelta(minutes=5)
    assert (await engine.get_job(at.id)).available_at == when


async def test_handle_enqueue_at_and_after(store: AsyncInMemoryJobStore, clock: FakeClock) -> None:
    task = _engine(store, clock).declare(welcome)
    when = datetime(2031, 5, 6, 7, 8, tzinfo=UTC)
    at = await task.enqueue_at(when, Email("a"), priority=1, tenant="t", max_attempts=4)
    after = await task.enqueue_after(90, Email("b"), idempotency_key="k")
    job_at, job_after = await task_jobs(store, at.id, after.id)
    assert (job_at.available_at, job_at.priority, job_at.tenant, job_at.max_attempts) == (
        when,
        1,
        "t",
        4,
    )
    assert job_after.available_at == clock.now() + timedelta(seconds=90)
    assert (job_after.priority, job_after.idempotency_key) == (-10, "k")


async def task_jobs(store: AsyncInMemoryJobStore, *ids: int) -> list[Job]:
    """The stored jobs ``ids``, read through a plain engine on ``store``."""
    admin = AsyncEngine(store)
    return [await admin.get_job(job_id) for job_id in ids]


async def test_handle_enqueue_joins_the_callers_transaction(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    task = engine.declare(welcome)

    async def enqueue_then_fail() -> None:
        async with store.transaction() as tx:
            await task.enqueue(Email("a"), connection=tx)
            await task.enqueue_many([Email("b")], connection=tx)
            raise RuntimeError("rollback")

    with pytest.raises(RuntimeError, match="rollback"):
        await enqueue_then_fail()
    assert await engine.counts() == []
    async with store.transaction() as tx:
        await task.enqueue_after(1, Email("a"), connection=tx)
        await task.enqueue_at(datetime(2030, 1, 1, tzinfo=UTC), Email("b"), connection=tx)
    assert [c.count for c in await engine.counts()] == [2]


async def test_handle_enqueue_many_takes_payloads_and_items(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    task = engine.declare(welcome)
    results = await task.enqueue_many(
        [Email("a"), task.item(Email("b"), priority=7, tenant="t", idempotency_key="k"), Email("c")]
    )
    jobs = await task_jobs(store, *(r.id for r in results))
    assert [(j.payload["to"], j.priority, j.tenant) for j in jobs] == [
        ("a", -10, None),
        ("b", 7, "t"),
        ("c", -10, None),
    ]
    assert await task.enqueue_many([]) == []

    item = task.item(Email("d"), max_attempts=4, delay=60)
    assert item == Enqueue("email.welcome", Email("d"), max_attempts=4, delay=60)
    # Items of several kinds go through the engine's enqueue_many, with each one's defaults.
    other = engine.declare(report)
    mixed = await engine.enqueue_many([item, other.item(Report("r", 1))])
    jobs = await task_jobs(store, *(r.id for r in mixed))
    assert [(j.kind, j.priority, j.max_attempts) for j in jobs] == [
        ("email.welcome", -10, 4),
        ("report.build", 5, 5),
    ]


async def test_handle_enqueue_many_refuses_items_of_another_kind(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    task = engine.declare(welcome)
    engine.declare(report)
    with pytest.raises(ValidationError, match=r"item 1: kind 'report.build' is not this task's"):
        await task.enqueue_many([Email("a"), Enqueue("report.build", {})])
    with pytest.raises(ValidationError, match=r"item 1: .*priority"):
        await task.enqueue_many([Email("a"), task.item(Email("b"), priority=10**6)])
    assert await engine.counts() == []


# ---- declared defaults and their precedence -------------------------------------------


async def test_declared_defaults_apply_to_every_enqueue_of_the_kind(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    engine.declare(welcome)
    # engine.enqueue by kind name (dynamic use) gets the same defaults as the handle.
    by_name = await engine.enqueue("email.welcome", Email("a"))
    explicit = await engine.enqueue("email.welcome", Email("b"), priority=0, max_attempts=8)
    first, second = await task_jobs(store, by_name.id, explicit.id)
    assert (first.priority, first.max_attempts, first.explicit_max_attempts) == (-10, 2, False)
    assert (second.priority, second.max_attempts, second.explicit_max_attempts) == (0, 8, True)
    assert engine.policy("email.welcome").retry.max_attempts == 2
    assert engine.declarations == {"email.welcome": welcome}


async def test_settings_per_kind_win_over_the_declaration(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # call > Settings.kinds (operator configuration) > declaration > global settings
    engine = _engine(store, clock, max_attempts=11, kinds={"email.welcome": {"max_attempts": 6}})
    task = engine.declare(welcome)
    plain = await task.enqueue(Email("a"))
    called = await task.enqueue(Email("b"), max_attempts=3)
    untouched = engine.declare(declare("other.kind", Email))
    default = await untouched.enqueue(Email("c"))
    jobs = await task_jobs(store, plain.id, called.id, default.id)
    assert [j.max_attempts for j in jobs] == [6, 3, 11]
    policy = engine.policy("email.welcome")
    assert policy.retry.base == timedelta(0)  # the declaration's, Settings.kinds sets none


async def test_declare_checks_the_policy_against_the_settings(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    with pytest.raises(ValidationError, match="stale_ttl"):
        engine.declare(declare("short.ttl", Email, stale_ttl=5))
    assert engine.known_kinds == frozenset()
    with pytest.raises(TypeError, match=r"skiplock\.declare"):
        engine.declare("email.welcome")  # type: ignore[arg-type]


async def test_processor_keywords_and_class_attributes_declare_a_priority(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)

    @engine.processor("low", priority=-3, max_attempts=4)
    async def low(payload: Email) -> None:
        pass

    class High(Processor):
        kind = "high"
        priority = 9

        async def process(self, payload: Email, ctx: JobContext) -> None:
            pass

    engine.register(High)
    assert engine.declarations["low"] == declare("low", Email, priority=-3, max_attempts=4)
    assert engine.declarations["high"] == declare("high", Email, priority=9)
    engine.declare_kind("bare")  # known, enqueue-only: untyped, no defaults
    assert engine.declarations["bare"] == declare("bare")
    assert set(engine.declarations) == engine.known_kinds == {"low", "high", "bare"}
    ids = [(await engine.enqueue(kind, Email("x"))).id for kind in ("low", "high")]
    assert [j.priority for j in await task_jobs(store, *ids)] == [-3, 9]


# ---- the web/worker split -------------------------------------------------------------


async def test_enqueue_only_engine_and_worker_share_the_declared_policy(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    # The web process imports the declarations only: no processor, no payload handling.
    web = _engine(store, clock)
    send_welcome = web.declare(welcome)
    build_report = web.declare(report)
    assert web.processors == {}

    # The worker process binds implementations to the same declarations.
    worker_engine = _engine(store, clock)
    seen: list[tuple[str, object]] = []

    @worker_engine.task(welcome)
    async def deliver(payload: Email, ctx: JobContext) -> None:
        seen.append((ctx.kind, payload))
        raise RuntimeError("smtp down")

    @worker_engine.task(report)
    async def build(payload: Report) -> None:  # the declared type, as annotated
        seen.append(("report.build", payload))

    mail = await send_welcome.enqueue(Email("a@example.com"))
    built = await build_report.enqueue(Report("q3", 12))
    row = await web.get_job(mail.id)
    assert (row.max_attempts, row.priority) == (2, -10)  # written with the declared policy
    assert (await web.get_job(built.id)).priority == 5

    assert worker_engine.policy("email.welcome") == web.policy("email.welcome")
    assert worker_engine.policy("report.build").timeout == 30.0
    await worker_engine.worker(concurrency=1).run_until_idle()
    # Higher priority first; typed payloads decoded; the declared max_attempts applied.
    assert seen == [
        ("report.build", Report("q3", 12)),
        ("email.welcome", Email("a@example.com")),
        ("email.welcome", Email("a@example.com")),
    ]
    dead = await web.get_job(mail.id)
    assert (dead.state, dead.attempts) == (JobState.DEAD, 2)
    assert (await web.get_job(built.id)).state is JobState.SUCCEEDED


async def test_bound_handle_is_still_the_function(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)

    @engine.task(welcome)
    async def deliver(payload: Email) -> str:
        """Send the welcome mail."""
        return f"sent to {payload.to}"

    assert isinstance(deliver, AsyncTask)
    assert (getattr(deliver, "__name__", None), deliver.__doc__) == (
        "deliver",
        "Send the welcome mail.",
    )
    assert list(inspect.signature(deliver).parameters) == ["payload"]
    assert deliver.fn is engine.processors["email.welcome"].fn
    assert await deliver(Email("a")) == "sent to a"
    assert "email.welcome" in repr(deliver)
    assert "deliver" in repr(deliver)
    # A handle bound again elsewhere (another engine) wraps the function, not the handle.
    elsewhere = _engine(store, clock)
    rebound = elsewhere.task(welcome)(deliver)
    assert rebound.fn is deliver
    assert elsewhere.processors["email.welcome"].fn is deliver
    assert await rebound(Email("b")) == "sent to b"
    enqueue_only = engine.declare(welcome)  # the same declaration again: a handle
    with pytest.raises(TypeError, match="enqueue-only"):
        enqueue_only(Email("a"))


async def test_task_by_kind_declares_from_its_keywords_and_annotation(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    seen: list[object] = []

    @engine.task("report.daily", priority=2, max_attempts=3)
    async def daily(payload: Report, ctx: JobContext) -> None:
        seen.append(payload)

    assert daily.declaration == declare("report.daily", Report, priority=2, max_attempts=3)
    result = await daily.enqueue(Report("d", 1))
    job = await engine.get_job(result.id)
    assert (job.priority, job.max_attempts) == (2, 3)
    await engine.worker().run_until_idle()
    assert seen == [Report("d", 1)]
    with pytest.raises(ValidationError, match="max_attempts"):
        engine.task("report.bad", max_attempts=0)


async def test_binding_checks_the_payload_type(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    with pytest.raises(TypeError, match=r"annotates its payload as Report.*declared with .*Email"):

        @engine.task(welcome)  # type: ignore[arg-type]
        async def wrong(payload: Report) -> None:
            pass

    assert engine.known_kinds == frozenset()  # nothing registered
    with pytest.raises(TypeError, match="takes no options"):
        engine.task(welcome, max_attempts=3)  # type: ignore[call-overload]

    seen: list[object] = []

    @engine.task(welcome)
    async def unannotated(payload, ctx):  # type: ignore[no-untyped-def]
        seen.append(payload)

    # An untyped declaration takes the function's own annotation.
    @engine.task(declare("any.kind"))
    async def typed(payload: Report) -> None:
        seen.append(payload)

    await unannotated.enqueue(Email("a"))
    await typed.enqueue({"name": "r", "pages": 2})
    await engine.worker().run_until_idle()
    assert sorted(seen, key=repr) == [Email("a"), Report("r", 2)]


async def test_one_declaration_per_kind(store: AsyncInMemoryJobStore, clock: FakeClock) -> None:
    engine = _engine(store, clock)
    engine.declare(welcome)
    engine.declare(declare("email.welcome", Email, max_attempts=2, priority=-10, backoff_base=0))
    with pytest.raises(ValueError, match=r"declared differently here \(max_attempts: 2 != 3"):
        engine.declare(declare("email.welcome", Email, max_attempts=3))
    with pytest.raises(ValueError, match="declared differently"):

        @engine.processor("email.welcome")
        async def other(payload: Email) -> None:
            pass

    @engine.task(welcome)  # binding the declared declaration is what a worker does
    async def deliver(payload: Email) -> None:
        pass

    assert engine.declare(welcome).kind == "email.welcome"  # still fine after binding
    with pytest.raises(ValueError, match="already registered"):
        engine.task(welcome)(deliver.fn)  # type: ignore[arg-type]
    assert engine.declarations == {"email.welcome": welcome}


# ---- unknown kinds --------------------------------------------------------------------


async def test_engine_that_knows_kinds_refuses_others_naming_them(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    engine.declare(welcome)
    engine.declare(report)
    with pytest.raises(UnknownKindError) as caught:
        await engine.enqueue("email.welcom", {"to": "a"})
    message = str(caught.value)
    assert message.startswith("unknown kind 'email.welcom': no processor or declaration")
    assert "(known kinds: 'email.welcome', 'report.build')" in message
    assert "Settings.unknown_kinds" in message
    with pytest.raises(UnknownKindError, match="item 1: unknown kind 'typo'"):
        await engine.enqueue_many([Enqueue("email.welcome", {}), Enqueue("typo")])
    assert await engine.counts() == []


async def test_unknown_kind_message_lists_at_most_twenty_kinds(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    for i in range(25):
        engine.declare_kind(f"k{i:02d}")
    with pytest.raises(UnknownKindError, match=r"'k19' and 5 more\)"):
        await engine.enqueue("typo", {})


async def test_engine_that_knows_no_kind_accepts_any(
    store: AsyncInMemoryJobStore, clock: FakeClock
) -> None:
    engine = _engine(store, clock)
    assert (await engine.enqueue("whatever.kind", {})).created


async def test_unknown_kinds_warn_writes_and_logs_once_per_kind(
    store: AsyncInMemoryJobStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _engine(store, clock, unknown_kinds="warn")
    engine.declare(welcome)
    with caplog.at_level(logging.WARNING, logger="skiplock.engine"):
        await engine.enqueue("typo.kind", {})
        await engine.enqueue_many([Enqueue("typo.kind"), Enqueue("email.welcome", {})])
        await engine.enqueue("other.typo", {})
    warnings = [r.getMessage() for r in caplog.records if r.name == "skiplock.engine"]
    assert warnings == [
        "unknown kind 'typo.kind': no processor or declaration for it here (known kinds: "
        "'email.welcome'); writing the job anyway (Settings.unknown_kinds='warn')",
        "unknown kind 'other.typo': no processor or declaration for it here (known kinds: "
        "'email.welcome'); writing the job anyway (Settings.unknown_kinds='warn')",
    ]
    assert sum(c.count for c in await engine.counts()) == 4


async def test_unknown_kinds_allow_writes_silently(
    store: AsyncInMemoryJobStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = _engine(store, clock, unknown_kinds="allow")
    engine.declare(welcome)
    with caplog.at_level(logging.DEBUG, logger="skiplock.engine"):
        assert (await engine.enqueue("typo.kind", {})).created
    assert [r for r in caplog.records if r.name == "skiplock.engine"] == []
    with pytest.raises(ValidationError, match="invalid kind"):
        await engine.enqueue("not a kind", {})


def test_unknown_kinds_setting_reads_its_environment_variable() -> None:
    assert Settings().unknown_kinds == "error"
    assert Settings.from_env({"SKIPLOCK_UNKNOWN_KINDS": "ALLOW"}).unknown_kinds == "allow"
    with pytest.raises(ValidationError, match=r"SKIPLOCK_UNKNOWN_KINDS.*'error', 'warn', 'allow'"):
        Settings.from_env({"SKIPLOCK_UNKNOWN_KINDS": "strict"})
