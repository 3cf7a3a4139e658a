"""A throw-away PostgreSQL server for the benchmarks and tests that stop, restart or
freeze it (the fault suite, ``benchmarks/faults``; tests/pgcluster.py's restart scenario;
the failover tests' primary and streaming standby, :func:`standby_of`):
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
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


#: How often :func:`wait_until` asks (seconds).
READY_POLL = 0.02


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``timeout``
    (also the tests' wait: tests/pgcluster.py re-exports it)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(READY_POLL)


_wait_until = wait_until  # its former name


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
    #: Server settings given on its command line (``-c name=value``) at every start: not
    #: in postgresql.conf, so a standby copied from it (``pg_basebackup``) does not
    #: inherit them.
    settings: dict[str, str] = attrs.field(factory=dict)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def data(self) -> Path:
        """The data directory."""
        return self.folder / "data"

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
        for name, value in self.settings.items():
            options += f" -c {name}={shlex.quote(value)}"  # pg_ctl runs it through sh
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

    def crash(self) -> None:
        """Stop the server as a crash would (immediate: no shutdown checkpoint, sessions
        cut, nothing more sent to a standby)."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-D", str(self.data), "-m", "immediate")

    def promote(self) -> None:
        """Promote a standby; returns once it accepts writes."""
        self._run(str(self.bin / "pg_ctl"), "promote", "-D", str(self.data), "-w")

    def query(self, text: str) -> list[str]:
        """Run ``text`` with ``psql`` (no driver needed); its rows, one string each."""
        out = self._run(str(self.bin / "psql"), "-X", "-A", "-t", "-q", "-d", self.dsn, "-c", text)
        return [line for line in out.stdout.splitlines() if line]

    def accepts(self) -> bool:
        """Whether the server accepts connections now."""
        command = [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)]
        return subprocess.run(command, check=False, timeout=10).returncode == 0


def _new_folder(prefix: str) -> tuple[Path, list[str]]:
    """A temporary folder for a server, and the command prefix its binaries run with."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:  # initdb refuses root
        shutil.chown(folder, "postgres", "postgres")
        return folder, ["runuser", "-u", "postgres", "--"]
    return folder, []


def _remove(server: Cluster) -> None:
    """Stop ``server`` at once if it runs (its postmaster's PID, from its data directory)
    and remove its folder."""
    with contextlib.suppress(subprocess.SubprocessError):
        server._run(
            str(server.bin / "pg_ctl"),
            "stop",
            "-D",
            str(server.data),
            "-m",
            "immediate",
            check=False,
        )
    shutil.rmtree(server.folder, ignore_errors=True)


@contextlib.contextmanager
def cluster(settings: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A new server, started; stopped and removed afterwards. ``settings``: see
    :attr:`Cluster.settings`."""
    binaries = bindir()
    folder, as_user = _new_folder("skiplock-pg-")
    server = Cluster(
        folder=folder, port=free_port(), bin=binaries, as_user=as_user, settings=settings or {}
    )
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
        _remove(server)


_STREAMING = "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"


@contextlib.contextmanager
def standby_of(primary: Cluster) -> Iterator[Cluster]:
    """A streaming hot standby of ``primary`` (``pg_basebackup -R``: it follows the primary
    from the moment of the copy), started on a port of its own; stopped and removed
    afterwards. The primary's defaults allow it: ``wal_level=replica``, ten WAL senders,
    ``pg_hba`` trusting replication from 127.0.0.1 (initdb's), and no replication slot
    (the standby stays connected for the test's few seconds)."""
    folder, as_user = _new_folder("skiplock-standby-")
    server = Cluster(folder=folder, port=free_port(), bin=primary.bin, as_user=as_user)
    try:
        server._run(
            str(primary.bin / "pg_basebackup"),
            "-D",
            str(server.data),
            "-R",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
            "--checkpoint=fast",
            "--no-sync",
        )
        server.start()
        # Streaming (and the synchronous standby, if the primary names one) before the
        # scenario starts: at first the primary lists it as catching up, or async.
        wanted = "sync" if primary.settings.get("synchronous_standby_names") else "async"
        wait_until(lambda: primary.query(_STREAMING) == [wanted], 30, "the standby to stream")
        yield server
    finally:
        _remove(server)


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
