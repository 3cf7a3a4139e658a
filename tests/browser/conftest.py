"""Fixtures of the browser tests: Debian's chromium driven by Playwright (tests/chromium.py:
never downloaded; a missing one fails the tests, never skips), and HTTP servers running an
app in a thread of the test process.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tests.chromium import browser  # noqa: F401  (the fixture of these tests)

if TYPE_CHECKING:
    from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.02)


@contextmanager
def serve_asgi(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn in a thread (its lifespan run); yields the base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    try:
        _wait(lambda: server.started or not thread.is_alive(), "uvicorn did not start")
        assert server.started, "uvicorn failed to start"
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "uvicorn did not stop"


@contextmanager
def serve_wsgi(app: Any) -> Iterator[str]:
    """``app`` served by werkzeug's threaded server in a thread; yields the base URL."""
    from werkzeug.serving import make_server

    server = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="werkzeug", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=30)
        server.server_close()
