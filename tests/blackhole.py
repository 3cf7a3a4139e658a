"""A hung database for tests: a TCP listener that accepts connections and never answers,
or that relays them to a real server and can be made to hang and answer again.

``Blackhole()`` listens on a free port of 127.0.0.1 (``dsn()``: a connection string to
it). Without ``upstream`` every connection is accepted and held: the client's bytes are
read and dropped, nothing is ever sent back (a server whose kernel accepts connections
while PostgreSQL does not answer). With ``upstream=(host, port)`` each connection is
relayed to that server while :meth:`Blackhole.forward` is on; :meth:`Blackhole.hang`
stops the relay on every connection, the open ones included (bytes wait, as on a stopped
server), and :meth:`Blackhole.forward` lets them through again. ``close()`` (or leaving
the ``with`` block) closes the listener and every connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import TracebackType


class Blackhole:
    """A TCP listener that holds connections (see the module)."""

    def __init__(self, upstream: tuple[str, int] | None = None) -> None:
        self._upstream = upstream
        self._flowing = threading.Event()
        if upstream is not None:
            self._flowing.set()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        # accept() wakes up now and then to see close(): closing a socket from another
        # thread does not wake a blocked accept() on every platform.
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        #: How many connections it accepted so far.
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, name="blackhole", daemon=True)
        self._thread.start()

    def dsn(self, dbname: str = "postgres", **params: str | int) -> str:
        """A libpq connection string to the listener."""
        extra = "".join(f" {key}={value}" for key, value in params.items())
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={dbname}{extra}"

    def hang(self) -> None:
        """Stop relaying on every connection, new and open (no-op without upstream)."""
        self._flowing.clear()

    def forward(self) -> None:
        """Relay again to the upstream server (ValueError without one)."""
        if self._upstream is None:
            raise ValueError("a blackhole without upstream has nowhere to forward")
        self._flowing.set()

    def close(self) -> None:
        """Close the listener and every connection; the relay threads end."""
        self._closed.set()
        self._flowing.set()  # wake the relays: they see the closed flag and stop
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(5)

    def __enter__(self) -> Blackhole:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _keep(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed.is_set():
                sock.close()
                return False
            self._sockets.append(sock)
            return True

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            self.accepted += 1
            if not self._keep(client):
                return
            if self._upstream is None:
                self._start(self._drain, client)
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            if not self._keep(server):
                return
            self._start(self._relay, client, server)
            self._start(self._relay, server, client)

    @staticmethod
    def _start(target: object, *args: socket.socket) -> None:
        threading.Thread(target=target, args=args, name="blackhole-pump", daemon=True).start()  # type: ignore[arg-type]

    def _drain(self, sock: socket.socket) -> None:
        # Read and drop: the client's writes never block, nothing comes back.
        with contextlib.suppress(OSError):
            while sock.recv(65536):
                pass

    def _relay(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._flowing.wait()  # held here while the server "hangs"
                if self._closed.is_set():
                    break
                target.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)
