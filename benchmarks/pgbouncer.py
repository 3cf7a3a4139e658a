"""A throw-away PgBouncer: Debian's ``pgbouncer`` (``.ci/run`` installs it) on a free port
of 127.0.0.1, in front of a server given by its URL, stopped and started by its PID (the
fault suite's pgbouncer-restart scenario; tests/pgbouncer.py re-exports it for the tests,
in front of the test server).

Its configuration and files live in a temporary directory, removed afterwards: every
database of the server is reachable under its own name (``* =``), authentication is
``trust`` (the test server's is), and ``pool_mode`` is the one asked for. As root it runs
as the ``postgres`` user (PgBouncer refuses root). Whether it accepts connections is asked
with a TCP connect, so this module imports no database driver.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from benchmarks.pgcluster import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Where Debian installs it.
DEBIAN_BINARY = "/usr/sbin/pgbouncer"


def binary() -> str:
    """The ``pgbouncer`` program (RuntimeError naming how to install it if missing)."""
    found = shutil.which("pgbouncer") or (
        DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None
    )
    if found is None:
        raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    return found


def _server(server: str) -> tuple[str, int, str]:
    """Host, port and user of ``server`` (a URL)."""
    parts = urllib.parse.urlsplit(server)
    return parts.hostname or "127.0.0.1", parts.port or 5432, parts.username or "postgres"


def _config(folder: Path, port: int, mode: str, server: str) -> str:
    host, server_port, user = _server(server)
    return textwrap.dedent(
        f"""\
        [databases]
        * = host={host} port={server_port}

        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = {port}
        unix_socket_dir =
        auth_type = trust
        auth_file = {folder}/userlist.txt
        pool_mode = {mode}
        max_client_conn = 400
        default_pool_size = 20
        ; the server's connections are shared with other test runs: stay small, and
        ; let idle ones go soon
        server_idle_timeout = 10
        ; psycopg and asyncpg send none, SQLAlchemy's dialects neither; kept for tools
        ignore_startup_parameters = extra_float_digits
        logfile = {folder}/pgbouncer.log
        pidfile =
        admin_users = {user}
        """
    )


@attrs.define
class PgBouncer:
    """A PgBouncer of its own in ``folder`` (see :func:`pgbouncer`); one process at a time,
    started and stopped by PID."""

    folder: Path
    port: int
    mode: str
    as_user: list[str]
    process: subprocess.Popen[bytes] | None = None

    def dsn(self, dsn: str) -> str:
        """``dsn`` (a URL of its server) through this PgBouncer."""
        parts = urllib.parse.urlsplit(dsn)
        user = parts.username or "postgres"
        return parts._replace(netloc=f"{user}@127.0.0.1:{self.port}").geturl()

    @property
    def pid(self) -> int | None:
        """The running process's id (None when stopped)."""
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Start the process (foreground, so its PID is the Popen's) and wait until it
        accepts connections."""
        assert self.process is None, "already running"
        with open(self.folder / "stdout.log", "ab") as out:
            self.process = subprocess.Popen(
                [binary(), *self.as_user, str(self.folder / "pgbouncer.ini")],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 30
        while not self.accepts():
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited at start: {self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"pgbouncer did not accept connections: {self.log()}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the process at once (SIGTERM: PgBouncer's immediate shutdown, every client
        and server connection closed) and wait for it to exit."""
        process, self.process = self.process, None
        if process is None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)

    def accepts(self) -> bool:
        """Whether something listens on the port now."""
        with socket.socket() as sock:
            sock.settimeout(1)
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def log(self) -> str:
        """PgBouncer's log so far (for failure messages)."""
        texts = []
        for name in ("pgbouncer.log", "stdout.log"):
            path = self.folder / name
            if path.exists():
                texts.append(path.read_text(encoding="utf-8", errors="replace")[-4000:])
        return "\n".join(texts)


@contextlib.contextmanager
def pgbouncer(server: str, mode: str = "transaction") -> Iterator[PgBouncer]:
    """A new PgBouncer in ``mode`` (``transaction`` or ``session`` pooling) in front of
    ``server`` (a URL), started; stopped by PID and its folder removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="skiplock-pgbouncer-"))
    as_user: list[str] = []
    port = free_port()
    try:
        config = _config(folder, port, mode, server)
        (folder / "pgbouncer.ini").write_text(config, encoding="utf-8")
        (folder / "userlist.txt").write_text(f'"{_server(server)[2]}" ""\n', encoding="utf-8")
        if os.geteuid() == 0:  # PgBouncer refuses root: it switches to postgres itself
            for path in (folder, *folder.iterdir()):
                shutil.chown(path, "postgres", "postgres")
            as_user = ["-u", "postgres"]
        bouncer = PgBouncer(folder=folder, port=port, mode=mode, as_user=as_user)
        bouncer.start()
        try:
            yield bouncer
        finally:
            bouncer.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
