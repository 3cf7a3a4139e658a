"""The fault suite's harness: a throw-away server, a producer, worker processes, faults,
and the ledger collected at the end (:mod:`benchmarks.faults.ledger`).

A scenario is a function of a :class:`Harness`: it starts workers, lets the producer's
steady load run, causes its faults (recording each), and returns; the harness then
stops the producer, waits for every acknowledged job to end (up to the deadline),
stops the workers and reads the final rows and effects.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

import psycopg

from benchmarks._procs import ROOT
from benchmarks.faults import peers, producer
from benchmarks.faults.ledger import TERMINAL, Death, Effect, Fault, Ledger, Row
from benchmarks.faults.worker import FLAKY, PLAIN, POISON, TX
from benchmarks.pgcluster import Cluster
from skiplock.adapters.psycopg import PsycopgJobStore, apply_schema
from skiplock.core import EnqueueRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

#: How often waits look at their condition (seconds).
POLL = 0.05

_EFFECTS = """
CREATE SCHEMA IF NOT EXISTS faults;
CREATE TABLE IF NOT EXISTS faults.effects (
    job_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL, tx boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@dataclasses.dataclass(frozen=True)
class External:
    """A database of the user's topology (``--dsn``): the scenarios that leave the server
    alone run there (a fresh database each, see :func:`external_database`)."""

    dsn: str


@contextlib.contextmanager
def external_database(dsn: str) -> Iterator[External]:
    """A new database on the server of ``dsn`` (reached through whatever ``dsn`` names: a
    pooler, a proxy), dropped afterwards."""
    name = f"skiplock_faults_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield External(psycopg.conninfo.make_conninfo(dsn, dbname=name))
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


class Server(Protocol):
    """Where a scenario runs: a throw-away server, a database of ``--dsn``, a primary and
    its standby (one multi-host DSN)."""

    @property
    def dsn(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Load:
    """The producer's steady load and the workers' shape."""

    #: Jobs per second the producer enqueues.
    rate: float = 40.0
    #: How long each processor works (ms).
    job_ms: float = 100.0
    #: Every n-th job is of the plain (non-transactional) kind.
    plain_every: int = 5
    workers: int = 2
    concurrency: int = 4
    prefetch: int = 4
    #: The lease: ``stale_ttl`` (seconds).
    lease: float = 4.0
    #: The workers' fallback poll (``poll_interval``, seconds); LISTEN wakes them sooner.
    poll: float = 0.5
    #: Seconds every acknowledged job has to end after the load stops.
    deadline: float = 90.0
    #: Every n-th job (0: none) is due ``delay`` seconds after its enqueue.
    delayed_every: int = 0
    delay: float = 3.0
    #: Every n-th job (0: none) is of the kind that fails its first attempt.
    flaky_every: int = 0


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``check`` until it holds; TimeoutError naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(POLL)


def sleep(seconds: float) -> None:
    """The scenario's fixed waits: the fault's length, the load between faults."""
    time.sleep(max(seconds, 0.0))


class Producer(producer.Producer):
    """skiplock's producer: the load's kinds through a store of its own (see
    :mod:`benchmarks.faults.producer`)."""

    def __init__(
        self, dsn: str, load: Load, ledger: Ledger, extra: list[str], *, bounced: bool
    ) -> None:
        super().__init__("faults-producer", load.rate, ledger, extra)
        self._dsn, self._bounced, self._load = dsn, bounced, load
        self._store: PsycopgJobStore | None = None

    def _request(self, n: int) -> EnqueueRequest:
        load = self._load
        kind = PLAIN if n % load.plain_every == 0 else TX
        if load.flaky_every and n % load.flaky_every == 1:
            kind = FLAKY
        late = load.delayed_every and n % load.delayed_every == 2
        delay = dt.timedelta(seconds=load.delay) if late else None
        return EnqueueRequest(kind=kind, payload={"ms": load.job_ms}, delay=delay)

    def enqueue(self, extra: list[str], numbers: range) -> list[tuple[int, str]]:
        assert self._store is not None
        batch = [EnqueueRequest(kind=k, payload={"ms": 0}) for k in extra]
        batch += [self._request(n) for n in numbers]
        results = self._store.enqueue(batch)
        return [(r.id, q.kind) for q, r in zip(batch, results, strict=True)]

    def run(self) -> None:
        with PsycopgJobStore(
            self._dsn, max_size=1, connect_timeout=2, read_timeout=5, pgbouncer=self._bounced
        ) as self._store:
            self.produce()


@dataclasses.dataclass
class Worker:
    """A worker process the harness started."""

    proc: subprocess.Popen[bytes]
    #: Why the harness ended it, once it did (``kill``), or None.
    ended_by: str | None = None
    ended_at: float | None = None
    frozen: bool = False

    @property
    def pid(self) -> int:
        return self.proc.pid


class Harness:
    """One scenario run (see the module)."""

    def __init__(
        self,
        server: Server,
        folder: Path,
        load: Load,
        *,
        broken: bool = False,
        schema: bool = True,
        peer: str | None = None,
    ) -> None:
        self.server = server
        self.folder = folder
        self.load = load
        self.broken = broken
        self.path = folder / "ledger.txt"
        self.path.touch()
        self.ledger = Ledger(
            poison=frozenset({POISON}),
            transactional=frozenset({TX, FLAKY}),
            flaky=frozenset({FLAKY}),
        )
        self.workers: list[Worker] = []
        self._producer: producer.Producer | None = None
        self._load_start = 0.0
        #: A scenario's own marks (what, from, to) for its ``after`` measurement.
        self.events: list[tuple[str, float, float]] = []
        #: The PgBouncer (transaction pooling) the workers and the producer go through,
        #: when a scenario sets one (the harness's own SQL goes to the server).
        self.via: str | None = None
        #: What a scenario started that must outlive it (a PgBouncer): closed once the
        #: workers are stopped.
        self.resources = contextlib.ExitStack()
        #: The other queue it runs instead of skiplock (``--competitors``), or None.
        self.peer = peer
        if peer is not None:
            asyncio.run(peers.install(peer, server.dsn))
        elif schema:  # else the scenario applies the schema it starts from
            apply_schema(server.dsn)
        self.sql(_EFFECTS)

    @property
    def cluster(self) -> Cluster:
        """The throw-away server, for the scenarios that stop or freeze it."""
        assert isinstance(self.server, Cluster), "this scenario controls the server"
        return self.server

    @property
    def dsn(self) -> str:
        return self.server.dsn

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """One statement on a connection of its own."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(query.encode(), params)  # bytes: a query built at run time
            return cur.fetchall() if cur.description else []

    def listeners(self) -> set[int]:
        """The server processes of the workers' LISTEN connections (their last statement
        was the LISTEN: the notifier's idle ping comes only after ``ping_interval``)."""
        rows = self.sql(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' "
            "AND pid <> pg_backend_pid()"
        )
        return {int(pid) for (pid,) in rows}

    def first_starts(self) -> dict[int, float]:
        """Each job's first processor start (after :meth:`finish`)."""
        first: dict[int, float] = {}
        for run in self.ledger.runs:
            first[run.job] = min(run.at, first.get(run.job, run.at))
        return first

    # ---- workers ------------------------------------------------------------------------

    def ready(self) -> set[int]:
        """The pids that wrote their ``R`` line."""
        text = self.path.read_text(encoding="utf-8")
        return {int(line.split()[1]) for line in text.splitlines() if line.startswith("R ")}

    def spawn(self, *, wait: bool = True, dsn: str | None = None, **env: str) -> Worker:
        """Start a worker process (``wait``: until it is ready to take jobs; ``dsn``: its
        own way to the database, e.g. through a proxy)."""
        load = self.load
        module = "benchmarks.faults.worker" if self.peer is None else "benchmarks.faults.peers"
        command = [
            sys.executable, "-m", module,
            "--dsn", dsn or self.via or self.dsn,
            "--ledger", str(self.path), "--concurrency", str(load.concurrency),
            "--prefetch", str(load.prefetch), "--lease", str(load.lease),
            "--poll", str(load.poll),
        ]  # fmt: skip
        if self.via is not None:
            command += ["--listen-dsn", self.dsn]
        if self.peer is not None:
            command += ["--system", self.peer]
        extra = dict(env) | ({"FAULTS_BROKEN": "outside"} if self.broken else {})
        log = open(self.folder / f"worker{len(self.workers)}.log", "wb")  # noqa: SIM115
        with log:
            proc = subprocess.Popen(
                command, cwd=ROOT, env=os.environ | extra, stdout=log, stderr=subprocess.STDOUT
            )
        worker = Worker(proc)
        self.workers.append(worker)
        if wait:
            wait_until(lambda: proc.pid in self.ready() or proc.poll() is not None, 60, "a worker")
        return worker

    def alive(self) -> list[Worker]:
        return [w for w in self.workers if w.proc.poll() is None and w.ended_by is None]

    def running(self, worker: Worker) -> int:
        """How many processor runs of ``worker`` have started and not returned."""
        starts: set[tuple[str, str]] = set()
        returns: set[tuple[str, str]] = set()
        for line in self.path.read_text(encoding="utf-8").splitlines():
            tag, *fields = line.split()
            if tag in ("S", "F") and int(fields[2]) == worker.pid:
                (starts if tag == "S" else returns).add((fields[0], fields[1]))
        return len(starts - returns)

    def kill(self, worker: Worker) -> float:
        """SIGKILL ``worker`` (a planned death); the moment it was sent."""
        worker.ended_by, worker.ended_at = "kill", time.monotonic()
        worker.proc.kill()
        worker.proc.wait(30)
        return worker.ended_at

    def fault(self, fault: Fault) -> None:
        self.ledger.faults.append(fault)

    # ---- the load -----------------------------------------------------------------------

    def start_load(self, *extra: str) -> None:
        """Start the producer (``extra``: kinds to enqueue once, first)."""
        if self.peer is not None:
            self._producer = peers.Producer(
                self.peer, self.via or self.dsn, self.load, self.ledger, list(extra),
                bounced=bool(self.via),
            )  # fmt: skip
        else:
            self._producer = Producer(
                self.via or self.dsn, self.load, self.ledger, list(extra), bounced=bool(self.via)
            )
        self._load_start = time.monotonic()
        self._producer.start()

    def finish(self) -> Ledger:
        """Stop the load, wait for every acknowledged job to end (the deadline), stop the
        workers, and complete the ledger."""
        if self._producer is not None:  # None: the scenario failed before the load began
            self._producer.stop()
            self._producer.join(60)
        load_end = time.monotonic()
        ids = list(self.ledger.acked)
        with contextlib.suppress(TimeoutError):
            wait_until(lambda: self._open(ids) == 0, self.load.deadline, "every job to end")
        self._stop_workers()
        self.resources.close()
        self.ledger.read_lines(self.path)
        self.ledger.rows = (
            peers.rows(self.peer, self)
            if self.peer is not None
            else [
                Row(int(i), k, s, int(a))
                for i, k, s, a in self.sql(
                    "SELECT id, kind, status::text, attempts FROM skiplock.jobs"
                )
            ]
        )
        self.ledger.effects = [
            Effect(int(j), int(a), int(p), bool(t))
            for j, a, p, t in self.sql("SELECT job_id, attempt, pid, tx FROM faults.effects")
        ]
        self.ledger.load = (self._load_start, load_end)
        return self.ledger

    def _open(self, ids: list[int]) -> int:
        if self.peer is not None:
            return peers.open_jobs(self.peer, self, ids)
        rows = self.sql(
            "SELECT count(*) FROM skiplock.jobs WHERE id = ANY(%s) AND NOT status::text = ANY(%s)",
            ids,
            sorted(TERMINAL),
        )
        return int(rows[0][0])

    def _stop_workers(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                os.kill(worker.pid, signal.SIGCONT)
                worker.proc.terminate()
        for worker in self.workers:
            try:
                code = worker.proc.wait(30)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                code = worker.proc.wait(10)
                self.ledger.deaths.append(Death(worker.pid, time.monotonic(), None))
                continue
            if worker.ended_by is not None:
                assert worker.ended_at is not None
                self.ledger.deaths.append(Death(worker.pid, worker.ended_at, worker.ended_by))
            elif code != 0:
                self.ledger.deaths.append(
                    Death(worker.pid, self._died_at(worker), self._why(worker))
                )

    def _died_at(self, worker: Worker) -> float:
        # The last thing the process wrote: it died after that.
        times = [float(line.split()[-1]) for line in self._lines(worker)]
        return max(times, default=0.0)

    def _lines(self, worker: Worker) -> Iterator[str]:
        for line in self.path.read_text(encoding="utf-8").splitlines():
            parts = line.split()
            if (parts[0] == "R" and int(parts[1]) == worker.pid) or (
                parts[0] in ("S", "F") and int(parts[3]) == worker.pid
            ):
                yield line

    def _why(self, worker: Worker) -> str | None:
        """``poison`` when the process died of SIGKILL right after starting a poison job."""
        if worker.proc.returncode != -signal.SIGKILL:
            return None
        kinds = self.ledger.acked
        started = [line.split() for line in self._lines(worker) if line.startswith("S ")]
        if any(kinds.get(int(parts[1])) == POISON for parts in started):
            return "poison"
        return None


@contextlib.contextmanager
def supervised(harness: Harness, count: int) -> Iterator[Callable[[], None]]:
    """Keep ``count`` workers alive: yields ``top_up()``, which starts a replacement for
    every one that ended (killed by the harness or by its own poison job)."""

    def top_up() -> None:
        for _ in range(count - len(harness.alive())):
            harness.spawn(wait=False)

    top_up()
    yield top_up
