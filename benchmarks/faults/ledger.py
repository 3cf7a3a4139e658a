"""The fault suite's ledger and its check: what every process saw, and what it proves.

The processes write it (:class:`LedgerFile`, and :class:`Acknowledging` for the ``A``
lines of a store); the check is pure data and arithmetic, no database: the suite's test
builds ledgers by hand to show that the check flags a lost job, an effect done twice, an
unexplained re-run.

The ledger of one scenario run holds every enqueue the producer saw acknowledged, every
processor start and return (job, attempt, process, time), every side effect that
committed (``faults.effects``), the final rows of the jobs table, the faults the harness
caused (with the processes they hit) and every worker process that ended before the
harness stopped it. Times are ``time.monotonic()`` seconds: one clock for every process
of the machine.

One ledger and one check for the fault suite and the failover tests
(tests/pgfailover.py): there a job is named by a token of its payload (ids are not safe
across a promotion), the producer is a process of its own that writes ``E``/``X`` lines,
and its processor has no side effect (:attr:`Ledger.effectless`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import statistics
import time
from collections import defaultdict
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from skiplock.adapters._pg._store_async import AsyncPgJobStore
from skiplock.core import Succeeded

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence
    from pathlib import Path

    from skiplock.core import Completion

#: Seconds after a process fault's end within which a run of that process still counts
#: as hit by it (the resumed process writes its ledger lines first thing).
FAULT_SLACK = 1.0
#: Job states that end a job (anything else at the deadline is stuck).
TERMINAL = frozenset({"succeeded", "dead", "cancelled", "failed"})
#: How far (seconds) an asynchronous standby may lag behind what the primary acknowledged
#: when its WAL sender froze: a few milliseconds on loopback.
LAG = 0.1


def async_window(frozen: float, crashed: float) -> tuple[float, float]:
    """PostgreSQL's window of a failover to an asynchronous standby whose primary's WAL
    sender froze at ``frozen`` and which crashed (or stopped acknowledging) at
    ``crashed``: what was acknowledged in it may be missing on the new primary."""
    return (frozen - LAG, crashed)


# ---- writing it: the processes' side ------------------------------------------------


class LedgerFile:
    """A ledger file that processes append lines to: one ``O_APPEND`` write per line,
    so lines of processes never interleave, and it works while the database is down."""

    def __init__(self, path: str) -> None:
        self._path = path

    def write(self, *fields: object) -> None:
        line = (" ".join(str(f) for f in fields) + "\n").encode()
        fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


class Acknowledging(AsyncPgJobStore[Any, Any]):
    """A store writing an ``A`` line for each success the database acknowledged: at once
    for a completion of its own, at the commit for one in a job's transaction. Mixed into
    any PostgreSQL store (the fault suite's :class:`~benchmarks.faults.worker.LedgerStore`;
    the failover tests' stores of every driver), then given its ledger with :meth:`keep`."""

    ledger: LedgerFile
    _held: dict[int, list[Completion]]

    def keep(self, ledger: LedgerFile) -> None:
        """Write to ``ledger`` from now on."""
        self.ledger, self._held = ledger, {}

    def key(self, job_id: int) -> int:
        """The job's name in the ledger: its id (the failover tests name it by a token)."""
        return job_id

    async def complete(
        self, completions: Sequence[Completion], *, connection: Any = None, **kwargs: Any
    ) -> list[bool]:
        applied = await super().complete(completions, connection=connection, **kwargs)
        done = [c for c, ok in zip(completions, applied, strict=True)
                if ok and isinstance(c.outcome, Succeeded)]  # fmt: skip
        if connection is None:
            self._acked(done)
        else:
            self._held.setdefault(id(connection), []).extend(done)
        return applied

    @asynccontextmanager
    async def transaction(self, **kwargs: Any) -> AsyncIterator[Any]:
        key = None
        try:
            async with super().transaction(**kwargs) as tx:
                key = id(tx)
                yield tx
        except BaseException:
            self._held.pop(key or 0, None)
            raise
        self._acked(self._held.pop(key or 0, []))  # committed

    def _acked(self, done: list[Completion]) -> None:
        now = time.monotonic()
        for c in done:
            self.ledger.write("A", self.key(c.lease.job_id), c.lease.attempt, os.getpid(), now)


# ---- reading and checking it -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Run:
    """A processor run: its ``S`` line, and its ``F`` line's time if it returned."""

    job: int
    attempt: int
    pid: int
    at: float
    returned: float | None = None


@dataclasses.dataclass(frozen=True)
class Effect:
    """A side effect that committed."""

    job: int
    attempt: int
    pid: int
    tx: bool


@dataclasses.dataclass(frozen=True)
class Row:
    """A final row of the jobs table."""

    job: int
    kind: str
    status: str
    attempts: int


@dataclasses.dataclass(frozen=True)
class Fault:
    """A fault the harness caused: from ``start`` to ``end``; ``pids``: the worker
    processes it hit (none: the database, which every process shares); recovery is
    measured from ``recover_from`` (the kill, the freeze, the server answering again)."""

    name: str
    start: float
    end: float
    recover_from: float
    pids: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class Death:
    """A worker process that ended before the harness stopped it. ``planned``: why, when
    the scenario meant it (``kill``: the harness's SIGKILL; ``poison``: it ran the job
    that kills its process); None: nobody meant it."""

    pid: int
    at: float
    planned: str | None


@dataclasses.dataclass
class Ledger:
    """Everything one scenario run recorded (its processes' lines read from their
    :class:`LedgerFile` files with :meth:`read_lines`)."""

    #: Acknowledged enqueues: job id -> kind.
    acked: dict[int, str] = dataclasses.field(default_factory=dict)
    runs: list[Run] = dataclasses.field(default_factory=list)
    effects: list[Effect] = dataclasses.field(default_factory=list)
    rows: list[Row] = dataclasses.field(default_factory=list)
    faults: list[Fault] = dataclasses.field(default_factory=list)
    deaths: list[Death] = dataclasses.field(default_factory=list)
    #: Kinds whose jobs are meant to die (their final ``dead`` is not a loss).
    poison: frozenset[str] = frozenset()
    #: Kinds whose processor writes its effect in the job's transaction.
    transactional: frozenset[str] = frozenset()
    #: When the load began and ended (throughput before the first fault, after the last).
    load: tuple[float, float] = (0.0, 0.0)
    #: When the producer saw each job's enqueue acknowledged (pickup latency).
    enqueued: dict[int, float] = dataclasses.field(default_factory=dict)
    #: Kinds whose processor fails its first attempt on purpose (a retry explains it).
    flaky: frozenset[str] = frozenset()
    #: What a scenario measured beyond the common figures, for the report.
    notes: list[str] = dataclasses.field(default_factory=list)
    #: A scenario's own checks that failed (each fails the verdict), in words.
    failed: list[str] = dataclasses.field(default_factory=list)
    #: Successes the database acknowledged: (job, attempt, pid) -> when (``A`` lines). A
    #: job run again after that had its completion undone.
    completed: dict[tuple[int, int, int], float] = dataclasses.field(default_factory=dict)
    #: PostgreSQL's window of a failover to an asynchronous standby: what was
    #: acknowledged in it (from just before the standby stopped receiving to the crash)
    #: may be missing on the new primary. None: no such window (nothing may be missing).
    window: tuple[float, float] | None = None
    #: Acknowledged enqueues (id, kind, when) whose id the new primary gave to another job
    #: (its sequence had not seen them): lost, like a missing row.
    superseded: list[tuple[int, str, float]] = dataclasses.field(default_factory=list)
    #: Enqueues whose outcome never came (the call failed): job -> when. Not acknowledged,
    #: so never lost; a row of one is a job like any other (it must end).
    unknown: dict[int, float] = dataclasses.field(default_factory=dict)
    #: Kinds whose processor has no side effect: a succeeded row is their work done.
    effectless: frozenset[str] = frozenset()

    def acknowledge(self, job: int, kind: str, at: float) -> None:
        """Record an enqueue the producer saw acknowledged at ``at``. An id already in
        the ledger was handed out again (a new primary whose sequence had not seen it):
        the earlier job is :attr:`superseded`."""
        if job in self.acked:
            self.superseded.append((job, self.acked[job], self.enqueued[job]))
        self.acked[job] = kind
        self.enqueued[job] = at

    def in_window(self, at: float | None) -> bool:
        """Whether ``at`` lies in :attr:`window`."""
        return self.window is not None and at is not None and self.window[0] <= at <= self.window[1]

    def read_lines(self, path: Path) -> None:
        """Add the lines of a ledger file: the processors' ``S``/``F``/``A`` lines (see
        benchmarks/faults/worker.py), and a producer process's ``E <job> <t> <kind>``
        (acknowledged) and ``X <job> <t>`` (outcome unknown)."""
        # A process may run the same attempt of a job twice (a completion undone by a
        # failover releases the job without charging an attempt): every start is a run,
        # its return the first one after it, and a success counts from its first
        # acknowledgement.
        starts: dict[tuple[int, int, int], list[float]] = defaultdict(list)
        returns: dict[tuple[int, int, int], list[float]] = defaultdict(list)
        for line in path.read_text(encoding="utf-8").splitlines():
            tag, *fields = line.split()
            if tag == "E":
                self.acknowledge(int(fields[0]), fields[2], float(fields[1]))
            elif tag == "X":
                self.unknown[int(fields[0])] = float(fields[1])
            elif tag in ("S", "F", "A"):
                key = (int(fields[0]), int(fields[1]), int(fields[2]))
                at = float(fields[3])
                if tag == "A":
                    self.completed[key] = min(at, self.completed.get(key, at))
                else:
                    (starts if tag == "S" else returns)[key].append(at)
        for key, times in starts.items():
            ends = sorted(returns.get(key, []))
            times.sort()
            for at, until in zip(times, [*times[1:], float("inf")], strict=True):
                returned = next((t for t in ends if at <= t < until), None)
                self.runs.append(Run(*key, at, returned))


@dataclasses.dataclass(frozen=True)
class ReRun:
    """A run that was followed by another run of its job, and why."""

    run: Run
    next_at: float
    reason: str | None  # None: unexplained
    #: The fault that explains it (None: a death or the job's own poison).
    fault: Fault | None = None
    #: The planned death that explains it (a process the poison job killed), if any.
    death: Death | None = None
    #: Whether the database had acknowledged this run's success before the next run: its
    #: completion was undone (only an asynchronous failover's window explains that).
    undone: bool = False


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What a ledger shows: the figures of the report and whether the promise held."""

    acked: int
    succeeded: int
    lost: list[int]
    stuck: list[int]
    reruns: list[ReRun]
    #: Transactional jobs with more than one committed effect.
    effects_twice: list[int]
    #: Plain (non-transactional) jobs whose effect committed more than once: allowed,
    #: each one a re-run's (at-least-once), reported for what it is.
    repeated_plain: int
    unplanned_deaths: list[int]
    #: Returns by a worker after its lease was lost whose effect never committed.
    refused_late: int
    recovery: list[float]
    throughput: tuple[float | None, float | None]
    #: The scenario's own measurements and failed checks (see :class:`Ledger`).
    notes: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    #: Acknowledged jobs missing on the new primary of an asynchronous failover, all
    #: acknowledged in PostgreSQL's window (:attr:`Ledger.window`): that window's loss,
    #: not skiplock's (a loss outside it is in :attr:`lost`).
    lost_in_window: tuple[int, ...] = ()

    @property
    def undone(self) -> list[int]:
        """Jobs run again after the database acknowledged their success."""
        return [r.run.job for r in self.reruns if r.undone]

    @property
    def unexplained(self) -> list[ReRun]:
        return [r for r in self.reruns if r.reason is None]

    @property
    def explained(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for r in self.reruns:
            if r.reason is not None:
                counts[r.reason] += 1
        return dict(sorted(counts.items()))

    @property
    def ok(self) -> bool:
        """Nothing lost, stuck, re-run without a reason or done twice; no process died
        that was not meant to."""
        return not (
            self.lost or self.stuck or self.unexplained or self.effects_twice
            or self.unplanned_deaths or self.failed
        )  # fmt: skip

    def problems(self) -> list[str]:
        """What broke the promise, in words (empty when :attr:`ok`)."""
        out = []
        for name, items in (
            ("lost", self.lost),
            ("stuck", self.stuck),
            ("re-run unexplained", [r.run.job for r in self.unexplained]),
            ("effect done twice", self.effects_twice),
            ("worker died unplanned (pid)", self.unplanned_deaths),
        ):
            if items:
                out.append(f"{len(items)} {name}: {sorted(items)[:10]}")
        out += [f"unexplained: {r.run} then a run at {r.next_at}" for r in self.unexplained[:5]]
        return out + list(self.failed)


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values``, None if there are none."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    return statistics.quantiles(data, n=100, method="inclusive")[round(q * 100) - 1]


def _rerun(run: Run, following: Run, ledger: Ledger, kinds: dict[int, str]) -> ReRun:
    """``run``, followed by another run of its job (``following``), and why."""
    next_at = following.at
    for fault in ledger.faults:
        # A frozen process's late entry of the same attempt: it had dispatched the job
        # (a held job, started without charging it) before SIGSTOP, and its processor
        # wrote its start line first thing after SIGCONT — after ``run``, the recovered
        # job's run elsewhere, even after that run's acknowledged success. Not a new claim
        # (the frozen process claimed nothing in the freeze), so not a re-run of ``run``.
        if (
            following.pid in fault.pids
            and following.attempt == run.attempt
            and fault.end <= next_at <= fault.end + FAULT_SLACK
            and fault.start <= run.at
        ):
            return ReRun(run, next_at, fault.name, fault)
    done = ledger.completed.get((run.job, run.attempt, run.pid))
    if done is not None and done <= next_at:
        # Its success was acknowledged, yet the job ran again: the completion was undone.
        # Only PostgreSQL's window of an asynchronous failover explains that.
        reason = "async window" if ledger.in_window(done) else None
        return ReRun(run, next_at, reason, undone=True)
    for fault in ledger.faults:
        if fault.pids:
            # A frozen process's run: the next one started after the freeze, and this one
            # was under way by the end of it (a run dispatched just before SIGSTOP enters
            # its processor just after SIGCONT: its attempt is still the earlier one).
            # Its line came after its successor's (an earlier attempt entered later):
            # only a stalled process does that, however long it took to get going again.
            late = next_at < run.at
            hit = run.pid in fault.pids and (run.at <= fault.end + FAULT_SLACK or late)
        else:
            hit = fault.end >= run.at  # a database fault under way while this run was
        if hit and fault.start <= next_at:
            return ReRun(run, next_at, fault.name, fault)
    for death in ledger.deaths:
        if death.pid == run.pid and run.at <= death.at and death.planned is not None:
            return ReRun(run, next_at, death.planned, death=death)
    if kinds.get(run.job) in ledger.poison:
        return ReRun(run, next_at, "poison")
    if kinds.get(run.job) in ledger.flaky and run.attempt == 1:
        return ReRun(run, next_at, "retry")
    return ReRun(run, next_at, None)


def _throughput(returns: list[float], start: float, end: float) -> float | None:
    if end - start < 1.0:
        return None
    return sum(1 for t in returns if start <= t < end) / (end - start)


def check(ledger: Ledger) -> Verdict:
    """What the ledger shows (see :class:`Verdict`)."""
    kinds = {row.job: row.kind for row in ledger.rows} | ledger.acked
    rows = {row.job: row for row in ledger.rows}
    effects: dict[int, list[Effect]] = defaultdict(list)
    for effect in ledger.effects:
        effects[effect.job].append(effect)
    lost, stuck = [], []
    for job, kind in ledger.acked.items():
        row = rows.get(job)
        if row is None:
            lost.append(job)
        elif row.status not in TERMINAL:
            stuck.append(job)
        elif kind in ledger.poison:
            continue
        elif row.status != "succeeded" or (kind not in ledger.effectless and not effects[job]):
            lost.append(job)  # it ended without its work done
    stuck += [r.job for r in ledger.rows if r.job not in ledger.acked and r.status not in TERMINAL]
    lost += [job for job, _, _ in ledger.superseded]
    acked_at = dict(ledger.enqueued) | {job: at for job, _, at in ledger.superseded}
    in_window = [job for job in lost if ledger.in_window(acked_at.get(job))]
    lost = [job for job in lost if job not in in_window]
    by_job: dict[int, list[Run]] = defaultdict(list)
    for run in ledger.runs:
        by_job[run.job].append(run)
    reruns: list[ReRun] = []
    for runs in by_job.values():
        runs.sort(key=lambda r: (r.attempt, r.at))  # attempts order the runs
        for run, following in itertools.pairwise(runs):
            reruns.append(_rerun(run, following, ledger, kinds))
    twice = [
        job
        for job, done in effects.items()
        if len(done) > 1 and any(e.tx for e in done) and kinds.get(job) in ledger.transactional
    ]
    repeated = sum(
        1
        for job, done in effects.items()
        if len(done) > 1 and kinds.get(job) not in ledger.transactional
    )
    committed = {(e.job, e.attempt, e.pid) for e in ledger.effects}
    dead = {d.pid for d in ledger.deaths}
    lease_faults = [f for f in ledger.faults if f.pids and not set(f.pids) & dead]
    refused = sum(
        1
        for run in ledger.runs
        if run.returned is not None
        and kinds.get(run.job) in ledger.transactional
        and (run.job, run.attempt, run.pid) not in committed
        and any(run.pid in f.pids and run.at <= f.end + FAULT_SLACK for f in lease_faults)
    )
    recovery = []
    for fault in ledger.faults:
        after = [
            r.next_at - fault.recover_from
            for r in reruns
            if r.fault is fault and r.next_at >= fault.recover_from
        ]
        if not fault.pids:  # the database: how soon work resumed at all
            resumed = [run.at for run in ledger.runs if run.at >= fault.recover_from]
            after.append(min(resumed) - fault.recover_from if resumed else float("inf"))
        recovery += after
    # A planned death no fault recorded (the poison job killing its process): from the
    # death to each interrupted job's next run.
    recovery += [
        r.next_at - r.death.at
        for r in reruns
        if r.fault is None and r.death is not None and r.next_at >= r.death.at
    ]
    returns = [run.returned for run in ledger.runs if run.returned is not None]
    start, end = ledger.load
    first = min((f.start for f in ledger.faults), default=end)
    last = max((f.end for f in ledger.faults), default=start)
    return Verdict(
        acked=len(ledger.acked) + len(ledger.superseded),
        succeeded=sum(1 for r in ledger.rows if r.status == "succeeded"),
        lost=lost,
        stuck=stuck,
        reruns=reruns,
        effects_twice=twice,
        repeated_plain=repeated,
        unplanned_deaths=[d.pid for d in ledger.deaths if d.planned is None],
        refused_late=refused,
        recovery=recovery,
        throughput=(_throughput(returns, start, first), _throughput(returns, last, end)),
        notes=tuple(ledger.notes),
        failed=tuple(ledger.failed),
        lost_in_window=tuple(in_window),
    )
