"""The benchmarks' delay proxy (benchmarks/delayproxy.py): a fixed one-way delay in each
direction, the bytes in order, and its counts of chunks and round trips."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from benchmarks.delayproxy import DelayProxy, proxy_process
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.pgfixtures import base_dsn

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: Long enough that the loop's and the server's own time is small beside it.
DELAY = 0.005


def _target() -> tuple[str, int]:
    params = conninfo_to_dict(base_dsn())
    return str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)


def _through(port: int) -> str:
    return make_conninfo(base_dsn(), host="127.0.0.1", port=str(port))


async def test_each_statement_takes_two_delays_and_counts_one_round_trip() -> None:
    # prepare_threshold=None: psycopg would otherwise prepare a statement in a round trip
    # of its own on its fifth run.
    async with (
        proxy_process(DELAY, target=_target()) as proxy,
        await psycopg.AsyncConnection.connect(
            _through(proxy.port), autocommit=True, prepare_threshold=None
        ) as conn,
    ):
        before = await proxy.counts()
        took = []
        for i in range(10):
            started = time.monotonic()
            cur = await conn.execute("SELECT %s::int", [i])
            assert await cur.fetchone() == (i,)
            took.append(time.monotonic() - started)
        done = (await proxy.counts()).minus(before)

    assert min(took) >= 2 * DELAY
    assert (done.round_trips, done.chunks_up, done.chunks_down) == (10, 10, 10)
    assert done.connections == 0  # no connection opened in between
    # Every chunk was held at least the delay, and not much longer on average.
    assert DELAY <= done.mean_delay_ms / 1000 < DELAY + 0.003


async def test_a_transaction_counts_each_statement_and_a_connection_counts_its_own() -> None:
    async with (
        proxy_process(DELAY, target=_target()) as proxy,
        await psycopg.AsyncConnection.connect(
            _through(proxy.port), autocommit=True, prepare_threshold=None
        ) as conn,
    ):
        before = await proxy.counts()
        async with conn.transaction():  # BEGIN, two statements, COMMIT
            await conn.execute("SELECT 1")
            await conn.execute("SELECT 2")
        after = await proxy.counts()
        async with await psycopg.AsyncConnection.connect(_through(proxy.port)):
            pass
        await asyncio.sleep(0.1)  # the closed connection's last bytes pass the proxy
        final = await proxy.counts()

    assert after.minus(before).round_trips == 4
    opened = final.minus(after)
    assert opened.connections == 1
    # SSL negotiation, the startup and its answer; then the client's Terminate.
    assert opened.round_trips == 3


async def test_a_large_result_arrives_whole_and_in_order() -> None:
    async with (
        proxy_process(DELAY, target=_target()) as proxy,
        await psycopg.AsyncConnection.connect(_through(proxy.port), autocommit=True) as conn,
    ):
        before = await proxy.counts()
        cur = await conn.execute("SELECT g, repeat('x', 100) FROM generate_series(1, 50000) g")
        rows = await cur.fetchall()
        done = (await proxy.counts()).minus(before)

    assert [r[0] for r in rows] == list(range(1, 50_001))
    assert done.round_trips == 1
    assert done.chunks_down > 1  # several reads, one answer
    assert done.bytes_down > 50_000 * 100


async def test_chunks_sent_back_to_back_keep_their_order_and_each_its_own_delay() -> None:
    # An echo server behind the proxy (no PostgreSQL): 50 chunks sent about 1 ms apart
    # come back in order, each two delays after it was sent, not delays piled up.
    echoed = asyncio.Event()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        echoed.set()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sent: list[float] = []
    late: list[float] = []
    async with server, DelayProxy(DELAY, target=("127.0.0.1", port)) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)

        async def receive() -> bytes:
            received = b""
            while len(received) < 200:
                received += await reader.read(65536)
                now = time.monotonic()
                late.extend(now - sent[k] for k in range(len(late), len(received) // 4))
            return received

        receiving = asyncio.create_task(receive())
        for i in range(50):
            sent.append(time.monotonic())
            writer.write(f"{i:04d}".encode())
            await asyncio.sleep(0.001)
        received = await asyncio.wait_for(receiving, 5.0)
        writer.close()
        await writer.wait_closed()
        await asyncio.wait_for(echoed.wait(), 5.0)
        counts = proxy.counts()

    assert received == b"".join(f"{i:04d}".encode() for i in range(50))
    assert min(late) >= 2 * DELAY
    # Piled-up delays would hold the last chunk about 50 x 2 delays (0.5 s); the loop's
    # timers (whole milliseconds here) add a few ms to each.
    assert max(late) < 2 * DELAY + 0.02
    assert counts.bytes_up == counts.bytes_down == 200
