"""The shape every benchmarked queue system takes (skiplock and its competitors).

A system has a *client* side, used by the harness process to install the schema,
enqueue and verify, and a *worker* side, run inside ``benchmarks.worker_proc``
subprocesses. Processors report to the harness through :class:`Hooks` (lines on
stdout, timestamps from ``time.monotonic()``, which on Linux is CLOCK_MONOTONIC and
therefore shared by every process of the machine).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Literal, Protocol, TextIO

Mode = Literal["noop", "tx", "latency"]
MODES: tuple[Mode, ...] = ("noop", "tx", "latency")

#: The one job kind (entrypoint, task name) every system processes.
KIND = "bench.noop"


@dataclasses.dataclass(frozen=True)
class WorkerArgs:
    """Everything a worker subprocess needs; travels as command-line options."""

    system: str
    conninfo: str
    concurrency: int
    mode: Mode = "noop"
    schema: str = "bench"
    adapter: str = "psycopg"
    #: Claim batch size where the system has one (pgqueuer); 0 means its default.
    batch_size: int = 0

    def to_argv(self) -> list[str]:
        """The options ``from_argv`` parses back."""
        return [
            "--system", self.system,
            "--dsn", self.conninfo,
            "--concurrency", str(self.concurrency),
            "--mode", self.mode,
            "--schema", self.schema,
            "--adapter", self.adapter,
            "--batch-size", str(self.batch_size),
        ]  # fmt: skip

    @classmethod
    def from_argv(cls, argv: list[str] | None = None) -> WorkerArgs:
        """Parse worker options."""
        p = argparse.ArgumentParser(prog="python -m benchmarks.worker_proc")
        p.add_argument("--system", required=True)
        p.add_argument("--dsn", required=True)
        p.add_argument("--concurrency", type=int, required=True)
        p.add_argument("--mode", choices=MODES, default="noop")
        p.add_argument("--schema", default="bench")
        p.add_argument("--adapter", default="psycopg")
        p.add_argument("--batch-size", type=int, default=0)
        ns = p.parse_args(argv)
        return cls(
            system=ns.system,
            conninfo=ns.dsn,
            concurrency=ns.concurrency,
            mode=ns.mode,
            schema=ns.schema,
            adapter=ns.adapter,
            batch_size=ns.batch_size,
        )


class Hooks:
    """Called by every processor as its first action; reports to the harness."""

    def __init__(self, mode: Mode, out: TextIO | None = None) -> None:
        self.mode = mode
        self._out = out if out is not None else sys.stdout
        self._first = False

    def started(self, number: int) -> None:
        """Job ``number`` has reached its processor."""
        now = time.monotonic()
        if self.mode == "latency":
            self._send(f"start {number} {now!r}")
        elif not self._first:
            self._first = True
            self._send(f"first {now!r}")

    def send(self, line: str) -> None:
        """A protocol line (``ready``, ...)."""
        self._send(line)

    def _send(self, line: str) -> None:
        self._out.write(line + "\n")
        self._out.flush()


class Client(Protocol):
    """The harness-side handle on one installed system in one fresh database."""

    label: str
    #: An SQL query returning the number of jobs not yet finished (pending or running).
    unfinished_sql: str

    async def enqueue_single(self, number: int) -> None:
        """Enqueue one job in its own transaction."""

    async def enqueue_bulk(self, numbers: range) -> None:
        """Enqueue many jobs in one call (one transaction where the system allows)."""

    async def enqueue_scheduled(self, number: int, delay: float) -> None:
        """Enqueue one job due ``delay`` seconds after the server's now."""

    async def lateness_ms(self) -> list[float] | None:
        """After the scheduled workload: each job's start minus its due time on the
        server's clock, in ms (None if the system does not record its start)."""

    async def verify(self, n: int, *, transactional: bool) -> str | None:
        """After a drain of ``n`` jobs: None if each succeeded exactly once, else why not."""
        ...

    async def close(self) -> None:
        """Release connections."""


class WorkerRunner(Protocol):
    """The worker side of a system inside a worker subprocess."""

    async def run(self) -> None:
        """Process jobs until :meth:`stop`."""

    def stop(self) -> None:
        """Ask :meth:`run` to return (called from the SIGTERM handler)."""

    async def close(self) -> None:
        """Release connections."""


@dataclasses.dataclass(frozen=True)
class DrainConfig:
    """One worker configuration a competitor's drain is tried with."""

    label: str
    concurrency: int
    batch_size: int = 0


class System(Protocol):
    """A benchmarked queue system."""

    #: Name used on the command line, in worker options and in the report.
    name: str
    #: Configurations a drain is tried with to find the system's best (competitors).
    drain_configs: tuple[DrainConfig, ...]
    #: The one configuration of its backlog drain (competitors: their best drain of the
    #: reference run; skiplock runs it at the largest ``--drain-concurrency``).
    backlog_config: DrainConfig

    async def install(self, conninfo: str, schema: str) -> Client:
        """Install the system into a fresh database and return a client for it."""
        ...

    async def open_worker(self, args: WorkerArgs, hooks: Hooks) -> WorkerRunner:
        """Worker side: ready to ``run()`` (connections open, processors registered)."""
        ...
