"""The failover scenario (issue 43, point 2): producers enqueue and worker processes run
jobs through a multi-host DSN (``target_session_attrs=read-write``) while the primary
fails and its streaming standby is promoted (tests/failover/test_failover.py,
``python -m tests.pgfailover``, docs/failover.md).

Every process keeps the fault suite's ledger (benchmarks/faults/ledger.py) in
append-only files of the run's folder, which the failover cannot touch: each enqueue
acknowledged (``E``) or whose outcome never came (``X``), each processor start and
return (``S``, ``F``) and each success the store acknowledged (``A``, written by the
suite's :class:`~benchmarks.faults.ledger.Acknowledging` store, mixed into each
driver's). At the end the ledger, the new primary's jobs and the failover (a fault of
the database, and for an asynchronous standby PostgreSQL's window) go through the
suite's check (:func:`benchmarks.faults.ledger.check`): an acknowledged enqueue missing
there is *lost*; a job started again after its success was acknowledged had its
completion *undone*; any other re-run must overlap the failover. A token (producer and
sequence number, the payload) names a job: ids are not safe across the promotion,
since an asynchronous standby's sequence may hand out again the ids of lost rows.

Two ways to fail: ``crash`` (the primary stops at once, the standby is promoted) and
``read-only`` (the primary is demoted in place: ``default_transaction_read_only`` on
and reloaded, so the sessions pooled on it answer SQLSTATE 25006; then the standby is
promoted, while the old primary keeps answering read-only to the end). ``stall``
freezes the primary's WAL sender that long before the crash: with an asynchronous
standby the commits acknowledged meanwhile never reach it (PostgreSQL's window, made
wide enough to see on loopback); with a synchronous one they are never acknowledged.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
from benchmarks._procs import ROOT
from benchmarks.faults.ledger import Death, Fault, Ledger, Row, Verdict, async_window, check

import skiplock
from tests.pgcluster import DRIVERS, Cluster, cluster, standby_of, wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Issue 43: workers claim again within this long (seconds) of the promotion.
CLAIM_AGAIN = 2.0

#: The jobs' kind; its processor has no side effect (the ledger's ``effectless``).
KIND = "failover.mark"

#: The worker application: the suite's ledger lines in ``ledger-<pid>.txt``, the job
#: named by its token (the payload) in each.
WORKER_APP = """
import asyncio
import os
import time

from benchmarks.faults.ledger import Acknowledging, LedgerFile
from skiplock import AsyncEngine, Settings

DRIVER = os.environ["FAILOVER_DRIVER"]
if DRIVER == "asyncpg":
    from skiplock.adapters.asyncpg import AsyncpgJobStore as Base
elif DRIVER == "sqlalchemy":
    from skiplock.adapters.sqlalchemy import AsyncSessionJobStore as Base
else:
    from skiplock.adapters.psycopg import AsyncPsycopgJobStore as Base

LEDGER = LedgerFile(f"ledger-{os.getpid()}.txt")
TOKENS = {}  # job id -> token, of the jobs this process started


class Store(Acknowledging, Base):
    def key(self, job_id):
        return TOKENS[job_id]


if DRIVER == "sqlalchemy":
    from sqlalchemy.ext.asyncio import create_async_engine

    store = Store(create_async_engine(os.environ["FAILOVER_URL"], pool_size=4, max_overflow=0))
else:
    store = Store(os.environ["FAILOVER_DSN"], max_size=4)
store.keep(LEDGER)
engine = AsyncEngine(
    store,
    Settings(
        concurrency=8,
        poll_interval=0.5,
        heartbeat_interval=0.5,
        stale_ttl=2.0,
        maintenance_interval=0.5,
        shutdown_timeout=5.0,
    ),
)


@engine.processor("failover.mark")
async def mark(payload, ctx):
    TOKENS[ctx.job_id] = payload
    LEDGER.write("S", payload, ctx.attempt, os.getpid(), time.monotonic())
    await asyncio.sleep(0.005)
    LEDGER.write("F", payload, ctx.attempt, os.getpid(), time.monotonic())
"""

#: The producer: ``FAILOVER_TASKS`` tasks each enqueue one job at a time (one every
#: ``FAILOVER_GAP`` seconds) until ``stop`` exists; each acknowledged enqueue is an ``E``
#: line of ``ledger-producer.txt``, each failed one an ``X`` line (its outcome unknown).
PRODUCER = """
import asyncio
import os
import time
from pathlib import Path

from benchmarks.faults.ledger import LedgerFile
from skiplock.core import EnqueueRequest

DRIVER = os.environ["FAILOVER_DRIVER"]
if DRIVER == "asyncpg":
    from skiplock.adapters.asyncpg import AsyncpgJobStore as Store
elif DRIVER == "sqlalchemy":
    from skiplock.adapters.sqlalchemy import AsyncSessionJobStore as Store
else:
    from skiplock.adapters.psycopg import AsyncPsycopgJobStore as Store

GAP = float(os.environ["FAILOVER_GAP"])
LEDGER = LedgerFile("ledger-producer.txt")


async def produce(store, task):
    n = 0
    while not Path("stop").exists():
        n += 1
        token = (task + 1) * 1_000_000 + n
        try:
            await store.enqueue([EnqueueRequest(kind="failover.mark", payload=token)])
        except Exception as exc:
            LEDGER.write("X", token, time.monotonic(), type(exc).__name__)
        else:
            LEDGER.write("E", token, time.monotonic(), "failover.mark")
        await asyncio.sleep(GAP)


async def main():
    if DRIVER == "sqlalchemy":
        from sqlalchemy.ext.asyncio import create_async_engine

        url = os.environ["FAILOVER_URL"]
        opened = Store(create_async_engine(url, pool_size=4, max_overflow=0))
    else:
        opened = Store(os.environ["FAILOVER_DSN"], max_size=4)
    async with opened as store:
        tasks = int(os.environ["FAILOVER_TASKS"])
        await asyncio.gather(*(produce(store, t) for t in range(tasks)))


asyncio.run(main())
"""


def read_ledger(folder: Path) -> Ledger:
    """Every ledger file of ``folder``, read into one ledger."""
    ledger = Ledger(effectless=frozenset({KIND}))
    for path in sorted(folder.glob("ledger-*.txt")):
        ledger.read_lines(path)
    return ledger


@attrs.frozen
class Result:
    """One failover, accounted for."""

    driver: str
    synchronous: bool
    how: str
    stall: float
    #: The suite's check of the run's ledger: nothing lost, stuck or re-run without the
    #: failover explaining it, no worker dead; for an asynchronous standby the losses
    #: inside PostgreSQL's window counted apart (``lost_in_window``, ``async window``
    #: re-runs).
    verdict: Verdict
    #: Enqueues acknowledged during the stall.
    acknowledged_in_stall: int
    #: Enqueues that failed (outcome unknown), and of those the ones that committed.
    unknown: int
    unknown_committed: int
    #: When the first lost enqueue or undone completion was acknowledged, in seconds from
    #: the freeze (negative: before it; what the standby had not received yet).
    first_loss: float | None
    #: Completions acknowledged during the stall.
    completed_in_stall: int
    #: Seconds from the promotion's start (:meth:`Cluster.promote`) to the first processor
    #: start on the new primary.
    claimed_after: float
    #: Seconds the promotion (:meth:`Cluster.promote`) took (until the new primary accepted
    #: writes).
    promotion: float
    #: Final statuses on the new primary (every job ``succeeded`` when all went well).
    statuses: dict[str, int]
    #: Worker exit codes (0: a clean stop after the whole run).
    exit_codes: list[int]

    @property
    def acknowledged(self) -> int:
        """Enqueues acknowledged over the run."""
        return self.verdict.acked

    @property
    def lost(self) -> list[int]:
        """Acknowledged enqueues missing on the new primary (tokens), in the window or not."""
        return sorted([*self.verdict.lost, *self.verdict.lost_in_window])

    @property
    def undone(self) -> list[int]:
        """Jobs started again after their completion was acknowledged (tokens)."""
        return sorted(set(self.verdict.undone))

    @property
    def outside_stall(self) -> int:
        """Of the lost enqueues and undone completions, those PostgreSQL's window (from
        :data:`~benchmarks.faults.ledger.LAG` before freezing the WAL sender to the crash)
        does not explain: none when it explains all. A synchronous standby has no window:
        every one of them."""
        undone = [r for r in self.verdict.reruns if r.undone and r.reason != "async window"]
        return len(self.verdict.lost) + len(undone)

    @property
    def explained_reruns(self) -> int:
        """Re-runs (starts after the first) the check explained: by the failover, or with
        an asynchronous standby by its window (a completion it undid)."""
        return sum(self.verdict.explained.values())

    def line(self) -> str:
        """The result as one line (benchmarks/results, docs/failover.md)."""
        mode = "sync" if self.synchronous else "async"
        return (
            f"{self.driver} {mode} {self.how} stall={self.stall:g}s: "
            f"acknowledged {self.acknowledged} ({self.acknowledged_in_stall} in the stall), "
            f"lost {len(self.lost)}, completions undone {len(self.undone)} "
            f"(outside the window: {self.outside_stall}; the first "
            f"{'-' if self.first_loss is None else f'{self.first_loss * 1000:.0f} ms'} "
            "from the freeze) "
            f"(acknowledged in the stall: {self.completed_in_stall}), "
            f"explained re-runs {self.explained_reruns}, unknown enqueues {self.unknown} "
            f"({self.unknown_committed} committed); promotion {self.promotion:.2f} s, "
            f"first claim on the new primary {self.claimed_after:.2f} s after it began; "
            f"final {dict(sorted(self.statuses.items()))}; "
            f"check {'pass' if self.verdict.ok else self.verdict.problems()}"
        )


def _dsn(*servers: Cluster) -> str:
    hosts = ",".join(f"127.0.0.1:{server.port}" for server in servers)
    return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"


def _url(*servers: Cluster) -> str:
    """The SQLAlchemy URL of :func:`_dsn` (its psycopg dialect: one ``host`` per server)."""
    hosts = "&".join(f"host=127.0.0.1:{server.port}" for server in servers)
    return f"postgresql+psycopg://postgres@/postgres?{hosts}&target_session_attrs=read-write"


def _final_rows(server: Cluster) -> list[Row]:
    """Every job on ``server``, named by its token."""
    rows = server.query("SELECT payload #>> '{}', kind, status, attempts FROM skiplock.jobs")
    return [Row(int(t), k, st, int(n)) for t, k, st, n in (r.split("|") for r in rows)]


#: The jobs not finished yet (status, the worker running it, its token).
_OPEN = (
    "SELECT status, claimed_by, payload #>> '{}' FROM skiplock.jobs "
    "WHERE status IN ('pending', 'running') ORDER BY id"
)

#: How long (seconds) the workers get to drain the new primary: stale-claim recovery
#: (stale_ttl 2 s) included.
DRAIN = 15.0


def _open_jobs(server: Cluster) -> int:
    return len(server.query(_OPEN))


WORKER = [sys.executable, "-m", "skiplock", "worker", "failover_app:engine"]


def _start(folder: Path, env: dict[str, str], command: list[str]) -> subprocess.Popen[bytes]:
    """Run ``command`` in ``folder``, its output in the next ``process<n>.log``."""
    n = len(list(folder.glob("process*.log")))
    with open(folder / f"process{n}.log", "wb") as log:
        return subprocess.Popen(command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def _processes(
    folder: Path, env: dict[str, str], workers: int
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``workers`` worker processes, then the producer; killed at the end if still
    running (the list may grow meanwhile)."""
    (folder / "failover_app.py").write_text(textwrap.dedent(WORKER_APP), encoding="utf-8")
    (folder / "producer.py").write_text(textwrap.dedent(PRODUCER), encoding="utf-8")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.extend(_start(folder, env, WORKER) for _ in range(workers))
        procs.append(_start(folder, env, [sys.executable, "producer.py"]))
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


def _terminate(procs: list[subprocess.Popen[bytes]]) -> list[int]:
    """SIGTERM every process, then wait for each; their exit codes (-9: killed after
    30 s)."""
    for proc in procs:
        proc.terminate()
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(30))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            codes.append(-9)
    return codes


def _count(ledger: Ledger, what: str) -> int:
    return len(ledger.acked) if what == "E" else len(ledger.completed)


def _wait_ledger(folder: Path, what: str, at_least: int, timeout: float) -> None:
    wait_until(
        lambda: _count(read_ledger(folder), what) >= at_least,
        timeout,
        f"{at_least} ledger lines {what}",
    )


def failover_scenario(
    primary: Cluster,
    standby: Cluster,
    folder: Path,
    *,
    driver: str,
    how: str,
    stall: float = 0.0,
    workers: int = 2,
    producers: int = 4,
    gap: float = 0.01,
) -> Result:
    """Run workers and a producer on ``primary`` through the multi-host DSN, fail it
    (``how``: ``crash`` or ``read-only``; ``stall``: see the module) and promote
    ``standby``; keep going on the new primary, drain, stop, account (:class:`Result`).

    The schema must be applied (and replayed on the standby). Waits are on conditions
    with deadlines; the stall is the only fixed wait.
    """
    here = str(Path(skiplock.__file__).resolve().parent.parent)
    path = os.pathsep.join([here, str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = os.environ | {
        "FAILOVER_DSN": _dsn(primary, standby),
        "FAILOVER_URL": _url(primary, standby),
        "FAILOVER_DRIVER": driver,
        "FAILOVER_TASKS": str(producers),
        "FAILOVER_GAP": str(gap),
        "PYTHONPATH": path.rstrip(os.pathsep),
    }
    synchronous = bool(primary.settings.get("synchronous_standby_names"))
    began = time.monotonic()
    with _processes(folder, env, workers) as procs:
        _wait_ledger(folder, "A", 200, 60)  # a steady run on the primary
        stalled_at = time.monotonic()
        if stall:
            [sender] = primary.query("SELECT pid FROM pg_stat_replication")
            os.kill(int(sender), signal.SIGSTOP)
            time.sleep(stall)  # the window itself: the scenario's parameter
            os.kill(int(sender), signal.SIGKILL)  # never sends what it held back
        if how == "crash":
            primary.crash()
        elif how == "read-only":
            primary.query("ALTER SYSTEM SET default_transaction_read_only = on")
            primary.query("SELECT pg_reload_conf()")
            wait_until(
                lambda: primary.query("SHOW default_transaction_read_only") == ["on"],
                10,
                "the old primary to answer read-only",
            )
        else:
            raise ValueError(f"how must be crash or read-only, got {how!r}")
        # The old primary acknowledges nothing from now on (it may have until the crash
        # was done).
        failed_at = promoted = time.monotonic()
        standby.promote()
        back = time.monotonic()

        def claimed_on_new() -> bool:
            return any(run.at > promoted for run in read_ledger(folder).runs)

        wait_until(claimed_on_new, 30, "a claim on the new primary")
        # Keep going on the new primary, then stop producing and drain.
        acked = len(read_ledger(folder).acked)
        _wait_ledger(folder, "E", acked + 200, 60)
        alive = [proc.poll() is None for proc in procs]
        assert all(alive), f"a process died during the failover: {alive}"
        (folder / "stop").touch()
        procs[-1].wait(30)
        # Completions undone by the failover come back running under a live worker that
        # no longer holds them: its next heartbeats release them, and they run again
        # while every worker keeps running.
        wait_until(lambda: _open_jobs(standby) == 0, DRAIN, "the new primary to drain")
        exit_codes = _terminate(procs[:-1])
        stopped = time.monotonic()
    ledger = read_ledger(folder)
    ledger.rows = _final_rows(standby)
    ledger.faults = [Fault("failover", stalled_at, back, back)]
    ledger.deaths = [
        Death(proc.pid, stopped, None)
        for proc, code in zip(procs[:-1], exit_codes, strict=True)
        if code != 0
    ]
    ledger.load = (began, stopped)
    window = async_window(stalled_at, failed_at)
    if not synchronous:
        ledger.window = window
    verdict = check(ledger)

    def inside(at: float) -> bool:
        return window[0] <= at <= window[1]

    losses = [ledger.enqueued[job] for job in [*verdict.lost, *verdict.lost_in_window]]
    losses += [ledger.completed[(r.run.job, r.run.attempt, r.run.pid)]
               for r in verdict.reruns if r.undone]  # fmt: skip
    tokens = {row.job for row in ledger.rows}
    first = min(run.at for run in ledger.runs if run.at > promoted)
    return Result(
        driver=driver,
        synchronous=synchronous,
        how=how,
        stall=stall,
        verdict=verdict,
        acknowledged_in_stall=sum(1 for at in ledger.enqueued.values() if inside(at)),
        unknown=len(ledger.unknown),
        unknown_committed=sum(1 for token in ledger.unknown if token in tokens),
        first_loss=min(losses) - stalled_at if losses else None,
        completed_in_stall=sum(1 for at in ledger.completed.values() if inside(at)),
        claimed_after=first - promoted,
        promotion=back - promoted,
        statuses=dict(collections.Counter(row.status for row in ledger.rows)),
        exit_codes=exit_codes,
    )


def measure(driver: str, *, synchronous: bool, how: str, stall: float = 0.0) -> Result:
    """The failover scenario on a new primary and standby of their own."""
    settings = {"synchronous_standby_names": "*", "synchronous_commit": "on"} if synchronous else {}
    # The SQLAlchemy store's schema is the psycopg store's (it runs on psycopg here).
    apply_schema, _ = DRIVERS["psycopg" if driver == "sqlalchemy" else driver]
    with (
        cluster(settings) as primary,
        standby_of(primary) as standby,
        tempfile.TemporaryDirectory(prefix="skiplock-failover-") as tmp,
    ):
        # After the standby exists: a synchronous primary's commits wait for it.
        apply_schema(primary.dsn)
        wait_until(
            lambda: standby.query("SELECT to_regclass('skiplock.jobs') IS NOT NULL") == ["t"],
            30,
            "the standby to replay the schema",
        )
        folder = Path(os.environ.get("FAILOVER_KEEP_DIR", tmp))
        return failover_scenario(primary, standby, folder, driver=driver, how=how, stall=stall)


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.pgfailover --driver psycopg``: print one line per scenario
    (benchmarks/results, docs/failover.md)."""
    parser = argparse.ArgumentParser(prog="python -m tests.pgfailover")
    parser.add_argument("--driver", choices=[*sorted(DRIVERS), "sqlalchemy"], action="append")
    parser.add_argument("--stall", type=float, default=0.5)
    args = parser.parse_args(argv)
    for driver in args.driver or ["psycopg"]:
        for synchronous in (True, False):
            for how, stall in (("crash", 0.0), ("crash", args.stall), ("read-only", 0.0)):
                result = measure(driver, synchronous=synchronous, how=how, stall=stall)
                print(result.line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
