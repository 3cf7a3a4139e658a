"""The delay proxy (:mod:`benchmarks.delayproxy`) with a cut switch: a network partition
between one client and PostgreSQL, for the fault suite's cut-off scenario.

:meth:`CutProxy.cut` blackholes every connection, the open ones and those made while
cut: every byte either side sends is dropped, nothing answers (a firewall dropping the
packets; a new connection is accepted and its startup packet vanishes, so the client's
``connect_timeout`` ends it). :meth:`CutProxy.restore` lets bytes through again, for the
connections made from then on; each connection that was open during the cut is reset
(both sockets aborted), since bytes of its stream were dropped: what TCP does once its
retransmissions or keepalives give up, and what lets the server end the sessions (and
roll back the transactions) of the client it lost. Additive: the delay proxy itself is
unchanged.

:func:`running` runs one in a thread of its own (its own event loop), for the fault
suite's harness, which is not asynchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import TYPE_CHECKING

from benchmarks.delayproxy import DelayProxy, _Link, _Timing

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class _CutLink(_Link):
    """A proxied connection that drops what it receives while its proxy is cut."""

    def __init__(self, timing: _Timing, done: Callable[[_Link], None], proxy: CutProxy) -> None:
        super().__init__(timing, done)
        self._proxy = proxy
        #: Whether it was open during a cut (reset on :meth:`CutProxy.restore`).
        self.hit = proxy.is_cut

    def received(self, up: bool, data: bytes) -> None:
        if self._proxy.is_cut:
            self.hit = True
            self._proxy.dropped += 1
            return
        super().received(up, data)


class CutProxy(DelayProxy):
    """A :class:`DelayProxy` that can be cut and restored (see the module)."""

    def __init__(self, delay: float, *, target: tuple[str, int]) -> None:
        super().__init__(delay, target=target)
        self.is_cut = False
        #: Chunks dropped during cuts; connections reset on restore.
        self.dropped = 0
        self.reset = 0

    def cut(self) -> None:
        """Drop every byte from now on, on every connection."""
        self.is_cut = True
        for link in self._links:
            if isinstance(link, _CutLink):
                link.hit = True

    def restore(self) -> None:
        """Let bytes through again; reset every connection that was open during the cut."""
        self.is_cut = False
        for link in list(self._links):
            if isinstance(link, _CutLink) and link.hit:
                self.reset += 1
                for side in (link.client, link.server):
                    if side.transport is not None:
                        side.transport.abort()

    def _accept(self) -> asyncio.Protocol:
        assert self._timing is not None
        link = _CutLink(self._timing, self._forget, self)
        self._links.add(link)
        task = self._timing.loop.create_task(self._connect(link))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return link.client


class Switch:
    """A :class:`CutProxy` running in its own thread: its port and the switch."""

    def __init__(self, proxy: CutProxy, loop: asyncio.AbstractEventLoop) -> None:
        self._proxy = proxy
        self._loop = loop

    @property
    def port(self) -> int:
        return self._proxy.port

    def dsn(self, dbname: str = "postgres") -> str:
        """A connection string through the proxy."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _call(self, what: Callable[[], None]) -> None:
        async def run() -> None:
            what()

        asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def cut(self) -> None:
        self._call(self._proxy.cut)

    def restore(self) -> None:
        self._call(self._proxy.restore)

    @property
    def dropped(self) -> int:
        return self._proxy.dropped

    @property
    def reset(self) -> int:
        return self._proxy.reset


@contextlib.contextmanager
def running(target: tuple[str, int], delay: float = 0.0) -> Iterator[Switch]:
    """A :class:`CutProxy` to ``target`` on a free port, served by a thread; closed
    afterwards."""
    loop = asyncio.new_event_loop()
    proxy = CutProxy(delay, target=target)
    thread = threading.Thread(target=loop.run_forever, name="cutproxy", daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(proxy.start(), loop).result(10)
        yield Switch(proxy, loop)
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(proxy.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
