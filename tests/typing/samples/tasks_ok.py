"""A correct app using declarations and task handles: mypy --strict reports nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TypedDict, assert_type

import attrs

import skiplock
from skiplock import AsyncEngine, AsyncTask, Engine, EnqueueResult, JobContext, Task, TaskDef
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore


@attrs.frozen
class Welcome:
    user_id: int
    email: str


class Signup(TypedDict):
    user_id: int
    plan: str


welcome = skiplock.declare("email.welcome", Welcome, max_attempts=5, priority=-10)
signup = skiplock.declare("user.signup", Signup, timeout=30)
untyped = skiplock.declare("audit.log")
assert_type(welcome, TaskDef[Welcome])
assert_type(untyped, TaskDef[Any])


async def web() -> list[EnqueueResult]:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    send_welcome = engine.declare(welcome)
    assert_type(send_welcome, AsyncTask[Welcome])
    on_signup = engine.declare(signup)
    first = await send_welcome.enqueue(
        Welcome(1, "a@example.com"),
        priority=1,
        tenant="t",
        idempotency_key="k",
        max_attempts=3,
        delay=5,
        connection=None,
    )
    await send_welcome.enqueue_at(datetime(2030, 1, 1, tzinfo=UTC), Welcome(2, "b@example.com"))
    await on_signup.enqueue({"user_id": 1, "plan": "pro"})
    await engine.declare(untyped).enqueue({"anything": [1, 2]})
    return [
        first,
        *await send_welcome.enqueue_many(
            [Welcome(3, "c@example.com"), send_welcome.item(Welcome(4, "d"), priority=2)]
        ),
    ]


def worker() -> None:
    engine = Engine(InMemoryJobStore())

    @engine.task(welcome)
    def deliver(payload: Welcome, ctx: JobContext) -> None:
        ctx.logger.info("to %s", payload.email)

    @engine.task("report.build", priority=5)
    def build(payload: Signup) -> int:
        return payload["user_id"]

    assert_type(deliver, Task[Welcome])
    assert_type(build, Task[Signup])
    deliver.enqueue(Welcome(5, "e@example.com"))
    build.enqueue({"user_id": 7, "plan": "free"})
    assert build({"user_id": 7, "plan": "free"}) == 7
