"""An app misusing declarations and task handles: each ``# E: <code> <text>`` comment is
an error mypy --strict must report on that line (tests/typing/test_task_typing.py)."""

from __future__ import annotations

from typing import TypedDict

import attrs

import skiplock
from skiplock import AsyncEngine, Engine, JobContext
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore


@attrs.frozen
class Welcome:
    user_id: int
    email: str


@attrs.frozen
class Report:
    name: str


class Signup(TypedDict):
    user_id: int
    plan: str


welcome = skiplock.declare("email.welcome", Welcome, max_attempts=5)
signup = skiplock.declare("user.signup", Signup)
typo = skiplock.declare("email.typo", Welcome, max_attempt=5)  # E: call-overload "max_attempt"


async def web() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    send_welcome = engine.declare(welcome)
    on_signup = engine.declare(signup)
    await send_welcome.enqueue(Report("q3"))  # E: arg-type "Report"; expected "Welcome"
    await send_welcome.enqueue(Welcome(1))  # E: call-arg Missing positional argument "email"
    await on_signup.enqueue({"user_id": 1})  # E: typeddict-item Missing key "plan"
    await on_signup.enqueue({"user_id": "1", "plan": "pro"})  # E: typeddict-item "user_id"
    await send_welcome.enqueue(Welcome(1, "a"), priorty=3)  # E: call-arg "priorty"
    await send_welcome.enqueue_many([Welcome(1, "a"), Report("x")])  # E: list-item "Report"
    send_welcome.item(Report("x"))  # E: arg-type "Report"; expected "Welcome"


def worker() -> None:
    engine = Engine(InMemoryJobStore())

    @engine.task(welcome)  # E: arg-type "Callable[[Report, JobContext], None]"
    def deliver(payload: Report, ctx: JobContext) -> None:
        pass

    @engine.task("report.build")
    def build(payload: Report) -> None:
        pass

    build.enqueue({"name": "q3"})  # E: arg-type "dict[str, str]"; expected "Report"
    build.enqueue(Report("q3"), delay="soon")  # E: arg-type "delay"
