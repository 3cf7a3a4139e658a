"""The cut switch of the fault suite's proxy (benchmarks/cutproxy.py), on an echo server:
bytes pass; cut, nothing passes either way, on open and new connections; restored, the
connections open during the cut are reset and new ones pass again. No database."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import TYPE_CHECKING

import pytest
from benchmarks.cutproxy import running

if TYPE_CHECKING:
    from collections.abc import Iterator

#: How long a read waits for bytes that must not come (the cut's whole point).
SILENCE = 0.5


@contextlib.contextmanager
def echo_server() -> Iterator[int]:
    """A TCP echo server on a free port of 127.0.0.1, served by threads."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    done = threading.Event()

    def echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                threading.Thread(target=echo, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        listener.close()


def _client(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.settimeout(5)
    return sock


def test_a_cut_drops_every_byte_and_a_restore_resets_what_it_cut() -> None:
    with echo_server() as port, running(("127.0.0.1", port)) as switch:
        before = _client(switch.port)
        before.sendall(b"ping")
        assert before.recv(4) == b"ping"

        switch.cut()
        before.sendall(b"lost")
        during = _client(switch.port)  # accepted, never answered
        during.sendall(b"void")
        for sock in (before, during):
            sock.settimeout(SILENCE)
            with pytest.raises(TimeoutError):
                sock.recv(4)
        assert switch.dropped >= 2

        switch.restore()
        for sock in (before, during):
            sock.settimeout(5)
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(4) == b""  # reset: its stream lost bytes
            sock.close()
        assert switch.reset == 2
        after = _client(switch.port)
        after.sendall(b"back")
        assert after.recv(4) == b"back"
        after.close()
