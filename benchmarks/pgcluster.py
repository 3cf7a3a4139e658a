"""A throw-away PostgreSQL server for the benchmarks and tests that stop, restart or
freeze it (the fault suite, ``benchmarks/faults``; tests/pgcluster.py's restart scenario):
the one module of the repository that runs PostgreSQL's server-control programs, so the
machine's shared server is never touched (tests/drift/test_shared_server.py).

The cluster lives in a temporary directory (``initdb``), listens on a free port of
127.0.0.1 with trust authentication, and is removed afterwards. The binaries are
PostgreSQL's own (``pg_config --bindir``, else ``/usr/lib/postgresql/<version>/bin``); as
root they run as the ``postgres`` user, since ``initdb`` refuses root. Imports no
database driver: whether the server accepts connections is asked with ``pg_isready``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Iterator


def bindir() -> Path:
    """The folder of ``initdb``, ``pg_ctl`` and ``pg_isready``."""
    found = shutil.which("pg_config")
    if found is not None:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not candidates:
        raise RuntimeError("PostgreSQL's initdb is not installed (pg_config --bindir)")
    return Path(candidates[-1]).parent


def free_port() -> int:
    """A TCP port of 127.0.0.1 nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class Cluster:
    """A PostgreSQL server of its own in ``folder`` (see :func:`cluster`)."""

    folder: Path
    port: int
    bin: Path
    as_user: list[str]

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.as_user, *args], capture_output=True, text=True, check=check, timeout=60
        )

    def start(self, *, wait: bool = True) -> None:
        """Start the server; with ``wait`` return once it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.folder} -c fsync=off "
            "-c shared_buffers=16MB -c max_connections=60"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "start",
            "-D",
            str(self.folder / "data"),
            "-l",
            str(self.folder / "server.log"),
            "-o",
            options,
            "-w" if wait else "-W",
        )

    def stop(self) -> None:
        """Stop the server (fast: sessions are ended, as in a restart)."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.folder / "data"), "-m", "fast")

    def accepts(self) -> bool:
        """Whether the server accepts connections now."""
        command = [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(command, check=False, timeout=10).returncode == 0


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    """A new server, started; stopped and removed afterwards."""
    binaries = bindir()
    folder = Path(tempfile.mkdtemp(prefix="skiplock-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root
        shutil.chown(folder, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    server = Cluster(folder=folder, port=free_port(), bin=binaries, as_user=as_user)
    try:
        server._run(
            str(binaries / "initdb"),
            "-D",
            str(folder / "data"),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            server._run(
                str(binaries / "pg_ctl"),
                "stop",
                "-D",
                str(folder / "data"),
                "-m",
                "immediate",
                check=False,
            )
        shutil.rmtree(folder, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux: /proc/<pid>/stat)."""
    found: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # The command name (field 2) is in parentheses and may hold spaces.
            fields = stat.read_text().rpartition(")")[2].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def server_processes(server: Cluster) -> list[int]:
    """The postmaster's PID (its ``postmaster.pid``) and its children's (the backends,
    the checkpointer, ...): what :func:`hang` and :func:`resume` signal."""
    first = (server.folder / "data" / "postmaster.pid").read_text().split("\n", 1)[0]
    postmaster = int(first)
    return [postmaster, *_children(postmaster)]


def hang(server: Cluster) -> list[int]:
    """Freeze every process of the server (SIGSTOP): the kernel still accepts TCP
    connections into the listen backlog, and nothing ever answers them or the open ones.
    Returns the PIDs stopped, for :func:`resume`."""
    pids = server_processes(server)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    return pids


def resume(pids: list[int]) -> None:
    """Continue the processes :func:`hang` stopped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
