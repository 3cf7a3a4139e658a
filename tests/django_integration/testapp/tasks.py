"""The Django tasks of the tests, found by the worker as the app's ``tasks`` module."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from django.tasks import TaskContext, task

from .models import Attempt, Order


@task
def confirm_order(order_id: int) -> dict[str, Any]:
    order = Order.objects.get(pk=order_id)
    order.confirmed = True
    order.save()
    return {"order": order_id, "email": order.email}


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> list[Any]:
    return [list(args), kwargs]


@task(queue_name="emails")
def record(key: str, note: str = "") -> str:
    Attempt.objects.create(key=key, note=note)
    return note


@task
def flaky(key: str, failures: int) -> str:
    """Fails its first ``failures`` runs, then returns."""
    Attempt.objects.create(key=key)
    runs = Attempt.objects.filter(key=key).count()
    if runs <= failures:
        raise ValueError(f"run {runs} of {key} fails")
    return f"ok after {runs} runs"


@task
def always_fails(key: str) -> None:
    Attempt.objects.create(key=key)
    raise KeyError(key)


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def with_context(context: TaskContext[..., Any], key: str) -> dict[str, Any]:
    result = context.task_result
    seen = {
        "id": result.id,
        "attempt": context.attempt,
        "status": str(result.status),
        "args": result.args,
        "queue": result.task.queue_name,
        "workers": len(result.worker_ids),
    }
    Attempt.objects.create(key=key, note=repr(seen))
    return seen


@task
def slow(key: str, seconds: float) -> str:
    """Writes a row when it starts and another when it ends."""
    Attempt.objects.create(key=key, note="start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:  # short sleeps: a timeout's exception gets in
        time.sleep(0.01)
    Attempt.objects.create(key=key, note="end")
    return key


@task
def returns_object() -> Any:
    Attempt.objects.create(key="returns_object")
    return object()


@task
def exits(code: int) -> None:
    """Asks to end the process, as a script would."""
    sys.exit(code)


@task
def interrupted() -> None:
    raise KeyboardInterrupt


@task
def cancels_itself() -> None:
    """Raises the worker's cancellation error itself (no shutdown asked for it): a failed
    attempt like any error, not a release."""
    from skiplock.engine import JobCancelledError

    raise JobCancelledError("not the worker's doing")
