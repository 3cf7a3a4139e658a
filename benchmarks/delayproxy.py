"""A TCP proxy that delays every chunk by a fixed one-way delay: a network in userspace.

``python -m benchmarks.delayproxy --delay-ms 1.25 --port 6543`` forwards 127.0.0.1:6543 to
PostgreSQL at 127.0.0.1:5432 and holds each chunk of bytes for 1.25 ms in each direction
(a 2.5 ms round trip). This machine's kernel has no netem, so the delay is applied here.

How the delay is applied. Each chunk the proxy reads is stamped with its arrival time and
queued on its connection's direction; it is written on at ``arrival + delay`` (a timer per
direction, ``loop.call_at`` on the head of the queue), so the delay is the time since the
chunk arrived, never a sum of sleeps, and the bytes of one direction keep their order.
asyncio's default (epoll) loop rounds every timer up to a whole millisecond; the proxy's
own process runs on a ``select()`` loop, whose timers have microsecond resolution (a 1.25 ms
timer fires after about 1.3-1.4 ms here), and the timers are set a little early to
make up for their lateness (:class:`_Timing`; a chunk is never held less than the delay).
What was really applied is measured: each chunk adds the time it was held (write time
minus arrival time) to :attr:`Counts.held_seconds`.

What is counted, per connection and in total (:class:`Counts`):

- ``chunks_up`` / ``chunks_down``: reads from the client / from the server (one ``recv``
  each; a large message may take several, several small ones may share one);
- ``bytes_up`` / ``bytes_down``;
- ``round_trips``: the client's turns. A chunk from the client that arrives when nothing
  came from the client since the server's last chunk (or since the connection opened)
  starts a round trip; more client chunks before the server answers belong to the same
  one. A request-response exchange is one round trip however many chunks it takes; a
  pipelining client that keeps sending while answers arrive is counted once per answer it
  sends after (an overcount, never an undercount); a server's unsolicited message (a
  NOTIFY to a listener) costs no round trip until the client sends again.

The harness uses it as a subprocess (:func:`proxy_process`: it prints ``listening <port>``,
answers ``stats`` on stdin with one JSON line of its counts and its CPU time so far
(``cpu_seconds``), and stops on SIGTERM) so that
its CPU is not the harness's; :class:`DelayProxy` is the same proxy in the caller's loop.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import json
import selectors
import signal
import sys
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Sequence

#: Pause reading a side while the other side's unsent bytes exceed this (back pressure).
_HIGH_WATER = 1 << 20


@dataclasses.dataclass
class Counts:
    """What passed through the proxy (one connection, or the sum of them)."""

    connections: int = 0
    chunks_up: int = 0
    chunks_down: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    round_trips: int = 0
    #: Sum over written chunks of (write time - arrival time): the delay really applied.
    held_seconds: float = 0.0

    def add(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def minus(self, before: Counts) -> Counts:
        """What was counted since ``before`` (an earlier snapshot of the same totals)."""
        return Counts(
            **{
                f.name: getattr(self, f.name) - getattr(before, f.name)
                for f in dataclasses.fields(self)
            }
        )

    @property
    def mean_delay_ms(self) -> float:
        """The mean one-way delay applied per chunk, in ms (0 before any chunk)."""
        chunks = self.chunks_up + self.chunks_down
        return 1000 * self.held_seconds / chunks if chunks else 0.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the fields, and the mean applied delay)."""
        return dataclasses.asdict(self) | {"mean_delay_ms": round(self.mean_delay_ms, 4)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Counts:
        """Parse :meth:`to_json`'s output."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


class _Timing:
    """The delay, and how early to set a timer so that it fires on time.

    A timer fires some tens to hundreds of microseconds after its time (the loop's wake-up
    and work). The timers are set earlier by a running estimate of the median of
    that lateness; one that still fires before a chunk's due time waits out the rest in a
    short spin, so no chunk is ever held less than the delay.
    """

    #: A timer earlier than this before the due time is set again rather than spun out.
    SPIN_MAX = 0.0003
    #: The estimate's step (a stochastic quantile estimate of the lateness).
    STEP = 0.00002
    QUANTILE = 0.5

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float) -> None:
        self.loop = loop
        self.delay = delay
        self.early = min(0.0001, delay / 2)
        self.fired = 0
        self.late_sum = 0.0

    def observe(self, lateness: float) -> None:
        """A timer set for ``early`` before its time fired ``lateness`` after that."""
        self.fired += 1
        self.late_sum += lateness
        if lateness < self.early:
            self.early -= self.STEP * (1 - self.QUANTILE)
        else:
            self.early += self.STEP * self.QUANTILE
        self.early = min(max(self.early, 0.0), self.delay / 2, 0.001)


class _Direction:
    """One direction of one connection: chunks waiting for their time, in order."""

    def __init__(self, timing: _Timing, counts: Counts) -> None:
        self._timing = timing
        self._loop = timing.loop
        self._delay = timing.delay
        self._counts = counts
        self._queue: collections.deque[tuple[float, bytes]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        self._aimed = 0.0
        self._out: asyncio.Transport | None = None
        self._closing = False

    def attach(self, out: asyncio.Transport) -> None:
        """Where the chunks go; chunks that arrived before it are sent when due."""
        self._out = out
        self._schedule()

    def push(self, data: bytes) -> None:
        """A chunk arrived now: send it ``delay`` after now."""
        self._queue.append((self._loop.time() + self._delay, data))
        if self._timer is None:
            self._schedule()

    def close_when_sent(self) -> None:
        """The sending side closed: close the other side once everything is sent."""
        self._closing = True
        if self._timer is None:
            self._schedule()

    def cancel(self) -> None:
        """Drop what waits (the socket it was for is gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._queue.clear()

    def _schedule(self) -> None:
        if self._out is None:
            return
        if self._queue:
            due = self._queue[0][0]
            if due <= self._loop.time():
                self._flush()
            else:
                self._aimed = due - self._timing.early
                self._timer = self._loop.call_at(self._aimed, self._flush, True)
        elif self._closing:
            self._out.close()

    def _flush(self, timed: bool = False) -> None:
        self._timer = None
        out = self._out
        assert out is not None
        now = self._loop.time()
        if timed:
            self._timing.observe(now - self._aimed)
        if self._queue:
            wait = self._queue[0][0] - now
            if wait > self._timing.SPIN_MAX:
                self._schedule()
                return
            while wait > 0:  # fired early: the rest is shorter than a timer's precision
                now = self._loop.time()
                wait = self._queue[0][0] - now
        parts: list[bytes] = []
        while self._queue and self._queue[0][0] <= now:
            due, data = self._queue.popleft()
            self._counts.held_seconds += now - (due - self._delay)
            parts.append(data)
        if parts and not out.is_closing():
            out.write(b"".join(parts))
        self._schedule()


class _Side(asyncio.Protocol):
    """One socket of a proxied connection (the client's or the server's)."""

    def __init__(self, link: _Link, up: bool) -> None:
        self._link = link
        self._up = up  # True: this socket is the client's; what it reads goes up
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self._link.received(self._up, data)

    def eof_received(self) -> bool | None:
        self._link.ended(self._up)
        return True  # keep the socket open until the other side has its bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self._link.lost(self._up)

    def pause_writing(self) -> None:
        self._link.pause(reader_up=not self._up)

    def resume_writing(self) -> None:
        self._link.resume(reader_up=not self._up)


class _Link:
    """One proxied connection: the client's socket, the server's, two directions."""

    def __init__(self, timing: _Timing, done: Callable[[_Link], None]) -> None:
        self.counts = Counts(connections=1)
        self.upward = _Direction(timing, self.counts)
        self.downward = _Direction(timing, self.counts)
        self.client = _Side(self, up=True)
        self.server = _Side(self, up=False)
        self._client_turn = True  # the next client chunk starts a round trip
        self._lost = 0
        self._done = done  # called once both sockets are gone

    def received(self, up: bool, data: bytes) -> None:
        c = self.counts
        if up:
            c.chunks_up += 1
            c.bytes_up += len(data)
            if self._client_turn:
                c.round_trips += 1
                self._client_turn = False
            self.upward.push(data)
        else:
            c.chunks_down += 1
            c.bytes_down += len(data)
            self._client_turn = True
            self.downward.push(data)

    def ended(self, up: bool) -> None:
        (self.upward if up else self.downward).close_when_sent()

    def lost(self, up: bool) -> None:
        # What this socket sent still goes on, then the other socket closes; what was
        # on its way to it has nowhere to go.
        (self.upward if up else self.downward).close_when_sent()
        (self.downward if up else self.upward).cancel()
        self._lost += 1
        if self._lost == 2:
            self._done(self)

    def pause(self, *, reader_up: bool) -> None:
        side = self.client if reader_up else self.server
        if side.transport is not None:
            side.transport.pause_reading()

    def resume(self, *, reader_up: bool) -> None:
        side = self.client if reader_up else self.server
        if side.transport is not None and not side.transport.is_closing():
            side.transport.resume_reading()


class DelayProxy:
    """The proxy in the running loop: ``async with DelayProxy(0.00125) as p: p.port``.

    Its timers are the loop's: on asyncio's default loop on Linux they are rounded up to
    whole milliseconds (see the module's docstring); :func:`proxy_process` runs it on a
    ``select()`` loop of its own.
    """

    def __init__(
        self,
        delay: float,
        *,
        target: tuple[str, int] = ("127.0.0.1", 5432),
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if delay < 0:
            raise ValueError("delay must be >= 0")
        #: One-way delay in seconds, applied in each direction.
        self.delay = delay
        self.target = target
        self.host = host
        self.port = port
        self._closed = Counts()
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self._timing: _Timing | None = None

    async def start(self) -> None:
        """Listen (on a free port when ``port`` was 0; :attr:`port` says which)."""
        loop = asyncio.get_running_loop()
        self._timing = _Timing(loop, self.delay)
        self._server = await loop.create_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and close every proxied connection."""
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            for side in (link.client, link.server):
                if side.transport is not None:
                    side.transport.abort()
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> DelayProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def counts(self) -> Counts:
        """Totals over every connection so far (open and closed)."""
        total = Counts()
        total.add(self._closed)
        for link in self._links:
            total.add(link.counts)
        return total

    def timing(self) -> dict[str, float]:
        """How early the timers are set now, and the mean lateness they fired with (ms)."""
        t = self._timing
        if t is None:
            return {}
        mean = 1000 * t.late_sum / t.fired if t.fired else 0.0
        return {"timer_early_ms": round(1000 * t.early, 4), "timer_late_ms": round(mean, 4)}

    def _accept(self) -> asyncio.Protocol:
        assert self._timing is not None
        link = _Link(self._timing, self._forget)
        self._links.add(link)
        task = self._timing.loop.create_task(self._connect(link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return link.client

    async def _connect(self, link: _Link) -> None:
        assert self._timing is not None
        try:
            await self._timing.loop.create_connection(lambda: link.server, *self.target)
        except OSError:
            if link.client.transport is not None:
                link.client.transport.close()
            self._forget(link)
            return
        assert link.client.transport is not None
        assert link.server.transport is not None
        link.client.transport.set_write_buffer_limits(high=_HIGH_WATER)
        link.server.transport.set_write_buffer_limits(high=_HIGH_WATER)
        link.upward.attach(link.server.transport)
        link.downward.attach(link.client.transport)

    def _forget(self, link: _Link) -> None:
        if link in self._links:
            self._links.discard(link)
            self._closed.add(link.counts)


class ProxyProcess:
    """A :mod:`benchmarks.delayproxy` subprocess (see :func:`proxy_process`)."""

    def __init__(self, proc: asyncio.subprocess.Process, port: int, delay: float) -> None:
        self.proc = proc
        self.port = port
        self.delay = delay
        self._lock = asyncio.Lock()

    async def stats(self) -> dict[str, Any]:
        """The proxy's ``stats`` line: :meth:`Counts.to_json` and :meth:`DelayProxy.timing`."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        async with self._lock:
            self.proc.stdin.write(b"stats\n")
            await self.proc.stdin.drain()
            line = await asyncio.wait_for(self.proc.stdout.readline(), 10.0)
        if not line:
            raise RuntimeError(f"the delay proxy exited ({self.proc.returncode})")
        return dict(json.loads(line))

    async def counts(self) -> Counts:
        """The proxy's totals now."""
        return Counts.from_json(await self.stats())


@asynccontextmanager
async def proxy_process(
    delay: float, *, target: tuple[str, int] = ("127.0.0.1", 5432)
) -> AsyncIterator[ProxyProcess]:
    """Run the proxy as a subprocess on a free port; stopped by its PID afterwards."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.delayproxy",
        "--delay-ms", repr(delay * 1000), "--port", "0",
        "--target", f"{target[0]}:{target[1]}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,  # its final totals: the caller asks for them
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 30.0)
        words = line.decode().split()
        if len(words) != 2 or words[0] != "listening":
            raise RuntimeError(f"the delay proxy did not start: {line!r}")
        yield ProxyProcess(proc, int(words[1]), delay)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


async def _serve(ns: argparse.Namespace) -> None:
    host, _, port = ns.target.rpartition(":")
    proxy = DelayProxy(ns.delay_ms / 1000, target=(host, int(port)), port=ns.port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with proxy:
        print(f"listening {proxy.port}", flush=True)
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

        async def commands() -> None:
            # ``stats``: one JSON line of the totals. End of input: keep serving.
            async for raw in reader:
                if raw.strip() == b"stats":
                    # cpu_seconds: the proxy process's own CPU so far (user + system).
                    cpu = {"cpu_seconds": round(time.process_time(), 4)}
                    line = proxy.counts().to_json() | proxy.timing() | cpu
                    print(json.dumps(line), flush=True)

        task = loop.create_task(commands())
        await stop.wait()
        task.cancel()
        print(json.dumps(proxy.counts().to_json()), file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the proxy until SIGTERM or Ctrl-C (its totals go to stderr at the end)."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.delayproxy", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--delay-ms", type=float, required=True, help="one-way delay, each direction")
    p.add_argument("--port", type=int, default=0, help="port to listen on (0: a free one)")
    p.add_argument("--target", default="127.0.0.1:5432", help="host:port to forward to")
    ns = p.parse_args(argv)
    # select(): timers with microsecond resolution (epoll's are whole milliseconds).
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    try:
        loop.run_until_complete(_serve(ns))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
