"""Many visitors at once (issue 45, point 6): a busy web door queues its requests, it does
not fail them. At most ``request_concurrency`` requests of a door work at once, the others
wait their turn while the database answers, and each request's ``request_timeout`` starts
with its turn. Before, the deadline ran from each request's arrival, so fifty dashboards
on a loaded process got 503s from a database that answered every statement.

A database that does not answer still gets its 503 in time, however many wait
(tests/integrations/test_hung_database.py, test_rest_hung_server.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING

import httpx
import pytest
from fastapi import FastAPI

from skiplock import AsyncEngine, Settings
from skiplock._compat import Flights, Turns
from skiplock._compat_async import Flights as AsyncFlights
from skiplock._compat_async import Turns as AsyncTurns
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.integrations.fastapi import create_dashboard_router, create_router, mount

if TYPE_CHECKING:
    from skiplock.integrations.rest import Permission, Request

#: What each call of the authorization hook costs the event loop (blocking): a process
#: busy rendering other visitors' pages. Each dashboard page asks the hook twice.
BUSY = 0.02
#: Requests at once. Between two steps of the first one the others block the loop for
#: at least 79 x BUSY, then 59 x BUSY (2.76 s): longer than the default
#: ``request_timeout`` (2 s) from its arrival; a turn's share of the loop is far less
#: (``request_concurrency`` requests of each door at a time).
DASHBOARDS = 60
REST_CALLS = 20


async def busy_hook(request: Request, permission: Permission) -> str:
    time.sleep(BUSY)  # noqa: ASYNC251 -- the loop is busy: nothing else runs meanwhile
    await asyncio.sleep(0)
    return "ops"


@pytest.mark.postgres
def test_a_crowd_of_visitors_queues_and_every_one_gets_its_page(pg_dsn: str) -> None:
    async def run() -> Counter[tuple[str, int]]:
        async with AsyncPsycopgJobStore(pg_dsn) as store:
            engine = AsyncEngine(store, Settings())
            await engine.enqueue("report.build", {"n": 1})
            app = FastAPI()
            mount(app, create_router(engine, authorize=busy_hook), prefix="/api")
            mount(app, create_dashboard_router(engine, authorize=busy_hook), prefix="/dash")
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:

                async def get(path: str) -> tuple[str, int]:
                    response = await client.get(path, timeout=60)
                    return path, response.status_code

                paths = ["/dash/"] * DASHBOARDS + ["/api/counts"] * REST_CALLS
                return Counter(await asyncio.gather(*(get(path) for path in paths)))

    statuses = asyncio.run(run())
    assert statuses == {("/dash/", 200): DASHBOARDS, ("/api/counts", 200): REST_CALLS}


# ---- the turns ---------------------------------------------------------------------------


def _later(seconds: float) -> float:
    return time.monotonic() + seconds


def _queued(turns: Turns, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(turns._waiting) < n:
        assert time.monotonic() < deadline, "the waiter did not queue"
        time.sleep(0.01)


def test_turns_go_in_order_of_arrival_and_a_waiter_gives_up_at_its_time() -> None:
    turns = Turns(1)
    assert turns.take(lambda: _later(60))
    order: list[int] = []

    def wait(number: int) -> None:
        if turns.take(lambda: _later(60)):
            order.append(number)
            turns.give()

    threads = []
    for number in (1, 2):
        threads.append(threading.Thread(target=wait, args=(number,)))
        threads[-1].start()
        _queued(turns, number)
    assert not turns.take(lambda: time.monotonic() - 1)  # its time passed: no turn
    assert len(turns._waiting) == 2  # ... and it left the queue
    turns.give()
    for thread in threads:
        thread.join(30)
    assert order == [1, 2]
    assert turns.take(lambda: time.monotonic() - 1)  # free again: taken at once
    turns.give()


def test_a_waiter_keeps_waiting_while_its_time_moves_on() -> None:
    turns = Turns(1)
    assert turns.take(lambda: _later(60))
    asked: list[float] = []
    got: list[bool] = []

    def until() -> float:
        # Soon at first (the waiter wakes up then); later on far ahead: it waits on.
        asked.append(time.monotonic())
        return _later(0.05 if len(asked) == 1 else 60)

    thread = threading.Thread(target=lambda: got.append(turns.take(until)))
    thread.start()
    deadline = time.monotonic() + 30
    while len(asked) < 3:  # woke up, asked again, waits again
        assert time.monotonic() < deadline, "the waiter did not wake up"
        time.sleep(0.01)
    assert not got
    turns.give()
    thread.join(30)
    assert got == [True]
    turns.give()


@pytest.mark.anyio
async def test_async_turns_in_order_give_up_and_cancel() -> None:
    turns = AsyncTurns(1)
    assert await turns.take(lambda: _later(60))
    order: list[int] = []

    async def wait(number: int) -> None:
        if await turns.take(lambda: _later(60)):
            order.append(number)
            turns.give()

    first = asyncio.ensure_future(wait(1))
    cancelled = asyncio.ensure_future(wait(2))
    second = asyncio.ensure_future(wait(3))
    await asyncio.sleep(0)
    assert len(turns._waiting) == 3
    assert not await turns.take(lambda: time.monotonic() - 1)
    cancelled.cancel()
    await asyncio.sleep(0)
    assert len(turns._waiting) == 2
    turns.give()
    await asyncio.gather(first, second)
    assert order == [1, 3]
    assert await turns.take(lambda: time.monotonic() - 1)  # free: taken at once


# ---- shared reads ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_concurrent_calls_share_a_read_that_started_after_they_came() -> None:
    flights = AsyncFlights()
    gate = asyncio.Event()
    calls = 0

    async def read() -> int:
        nonlocal calls
        calls += 1
        number = calls
        await gate.wait()
        return number

    async def settle() -> None:  # every task runs until it waits
        for _ in range(5):
            await asyncio.sleep(0)

    first = asyncio.ensure_future(flights.share("k", read))
    await settle()
    assert calls == 1
    later = [asyncio.ensure_future(flights.share("k", read)) for _ in range(5)]
    other = asyncio.ensure_future(flights.share("other", read))
    await settle()
    assert calls == 2  # the later ones wait out the read that started before them
    gate.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [3] * 5  # then share one
    assert await other == 2
    assert calls == 3


def test_a_sync_call_waits_out_a_read_that_started_before_it() -> None:
    flights = Flights()
    gate = threading.Event()
    calls: list[int] = []

    def read() -> int:
        calls.append(len(calls) + 1)
        gate.wait(30)
        return len(calls)

    # The arrivals the calls (and their reads) take, observed: the second call must have
    # arrived before the first read ends, or the test would pass by chance.
    numbers: list[int] = []
    arrivals = flights._arrivals

    class Counted:
        def __iter__(self) -> Counted:
            return self

        def __next__(self) -> int:
            numbers.append(next(arrivals))
            return numbers[-1]

    flights._arrivals = Counted()  # type: ignore[assignment]
    got: list[int] = []
    first = threading.Thread(target=lambda: got.append(flights.share("k", read)))
    first.start()
    deadline = time.monotonic() + 30
    while not calls:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = threading.Thread(target=lambda: got.append(flights.share("k", read)))
    second.start()
    while len(numbers) < 3:  # the first call's arrival, its read's, the second's arrival
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert calls == [1]  # the first read still runs
    gate.set()
    first.join(30)
    second.join(30)
    assert sorted(got) == [1, 2]  # the second call read again, after the first read
    with pytest.raises(ZeroDivisionError):
        flights.share("k", lambda: 1 // 0)
