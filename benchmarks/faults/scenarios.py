"""The fault suite's scenarios: each runs a :class:`~benchmarks.faults.harness.Harness`
through one kind of fault, in a full and a quick (CI) length."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
from typing import TYPE_CHECKING, Any

from benchmarks import pgbouncer, pgcluster
from benchmarks.faults.failover import failover, pair
from benchmarks.faults.harness import Harness, Load, sleep, supervised, wait_until
from benchmarks.faults.ledger import Fault, percentile
from benchmarks.faults.rolling import rolling_deploy, side_by_side
from benchmarks.faults.topology import cut_off
from benchmarks.faults.worker import FLAKY

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager


@dataclasses.dataclass(frozen=True)
class Scenario:
    """A scenario: what it does (one sentence for the report), how it runs, and what
    its ledger check shows a user."""

    name: str
    method: str
    check: str
    run: Callable[[Harness, bool], None]
    #: Whether it stops or freezes the server (only on the suite's throw-away one).
    controls_server: bool = False
    load: Load = dataclasses.field(default_factory=Load)
    #: Its own measurement, once the ledger is complete (the server still up): adds
    #: notes and failed checks to the ledger.
    after: Callable[[Harness], None] | None = None
    #: Where it runs, when not on one throw-away server (a primary and its standby).
    place: Callable[[], AbstractContextManager[Any]] | None = None
    #: Whether the harness applies the current schema first (else the scenario does).
    schema: bool = True


#: Seconds of steady load before the first fault and after the last.
CALM = 5.0


def kill_storm(h: Harness, quick: bool) -> None:
    """A worker killed with SIGKILL every few seconds and replaced at once."""
    rng = random.Random(44)
    with supervised(h, h.load.workers + 1) as top_up:
        wait_until(lambda: len(h.ready()) >= 1, 60, "a worker")
        h.start_load()
        sleep(CALM)
        for _ in range(4 if quick else 15):
            # A worker in the middle of a run, so that every kill interrupts one (a
            # replacement still starting up would be killed for nothing).
            alive = h.alive()
            busy = [worker for worker in alive if h.running(worker) > 0]
            victim = rng.choice(busy or alive)
            at = h.kill(victim)
            h.fault(Fault("kill", at, at, at, (victim.pid,)))
            top_up()
            sleep(3.0)
        sleep(CALM)


def restart(h: Harness, quick: bool) -> None:
    """The server stopped (fast shutdown: every session ended) and started again."""
    for _ in range(h.load.workers):
        h.spawn()
    h.start_load()
    sleep(CALM)
    for outage in [3.0] if quick else [3.0, 10.0]:
        start = time.monotonic()
        h.cluster.stop()
        sleep(outage)
        h.cluster.start(wait=False)
        wait_until(h.cluster.accepts, 60, "the server to accept connections")
        back = time.monotonic()
        h.fault(Fault("restart", start, back, back))
        sleep(CALM)


def freeze(h: Harness, quick: bool) -> None:
    """A worker frozen (SIGSTOP) while it runs jobs, for twice its lease, then resumed."""
    workers = [h.spawn() for _ in range(h.load.workers)]
    victim = workers[0]
    h.start_load()
    sleep(CALM)
    for _ in range(1 if quick else 3):
        wait_until(lambda: h.running(victim) > 0, 30, "the victim to run a job")
        start = time.monotonic()
        os.kill(victim.pid, signal.SIGSTOP)
        victim.frozen = True
        sleep(2 * h.load.lease)
        os.kill(victim.pid, signal.SIGCONT)
        victim.frozen = False
        h.fault(Fault("freeze", start, time.monotonic(), start, (victim.pid,)))
        sleep(CALM)


def hung(h: Harness, quick: bool) -> None:
    """Every process of the server frozen (SIGSTOP): connections are accepted by the
    kernel and never answered, for longer than the lease; then it runs on."""
    for _ in range(h.load.workers):
        h.spawn()
    h.start_load()
    sleep(CALM)
    for _ in range(1 if quick else 2):
        start = time.monotonic()
        pids = pgcluster.hang(h.cluster)
        sleep(1.5 * h.load.lease)
        pgcluster.resume(pids)
        back = time.monotonic()
        h.fault(Fault("hang", start, back, back))
        sleep(CALM)


def poison(h: Harness, quick: bool) -> None:
    """A job whose processor kills its own process (every time), among innocent jobs;
    the dead workers are replaced."""
    with supervised(h, h.load.workers) as top_up:
        wait_until(lambda: len(h.ready()) >= 1, 60, "a worker")
        h.start_load("faults.poison")
        end = time.monotonic() + (15.0 if quick else 30.0)
        while time.monotonic() < end:
            top_up()
            sleep(0.2)


#: The listener-kill scenario's load: a trickle (workers idle between jobs, so each
#: pickup waits for a wakeup) and a fallback poll slow enough to tell the two apart.
LISTEN_LOAD = Load(rate=4.0, workers=2, poll=5.0)


def _replaced(h: Harness, killed: set[int]) -> Callable[[], bool]:
    """Whether every worker listens again, on a session other than ``killed``."""
    return lambda: len(h.listeners() - killed) >= h.load.workers


def listener_kill(h: Harness, quick: bool) -> None:
    """The workers' LISTEN connections terminated (``pg_terminate_backend``) again and
    again, with the fallback poll slowed to 5 s; each time until they are back."""
    for _ in range(h.load.workers):
        h.spawn()
    wait_until(lambda: len(h.listeners()) >= h.load.workers, 30, "the listeners")
    h.start_load()
    sleep(CALM)
    for _ in range(2 if quick else 6):
        wait_until(lambda: len(h.listeners()) >= h.load.workers, 30, "the listeners")
        killed = h.listeners()
        start = time.monotonic()
        h.sql("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", list(killed))
        wait_until(_replaced(h, killed), 30, "the listeners back")
        h.events.append(("listener-kill", start, time.monotonic()))
        sleep(CALM)


def _pickups(h: Harness, since: float, until: float) -> list[float]:
    """Seconds from acknowledged enqueue to first start, of the jobs enqueued in
    [since, until)."""
    first = h.first_starts()
    return [
        first[job] - at
        for job, at in h.ledger.enqueued.items()
        if since <= at < until and job in first
    ]


def listener_pickups(h: Harness) -> None:
    """Pickup latency before the first kill, after each kill and while the listeners were
    down; fails when a job waited for the fallback poll (half of it or more)."""
    kills = [(start, back) for what, start, back in h.events if what == "listener-kill"]
    if not kills:
        h.ledger.failed.append("no listener was killed")
        return
    end = h.ledger.load[1]
    bounds = [start for start, _ in kills[1:]] + [end]
    before = _pickups(h, h.ledger.load[0], kills[0][0])
    after = [p for (start, _), until in zip(kills, bounds, strict=True)
             for p in _pickups(h, start, until)]  # fmt: skip
    down = [p for start, back in kills for p in _pickups(h, start, back)]
    reconnect = [back - start for start, back in kills]
    limit = h.load.poll / 2
    ms = _ms

    h.ledger.notes.append(
        f"{len(kills)} listener kills; listeners back (new LISTEN sessions) after "
        f"p50 / max {ms(reconnect)}; pickup (acknowledged enqueue to first start) "
        f"p50 / max {ms(before)} before the first kill, {ms(after)} after the kills "
        f"({len(after)} jobs), {ms(down)} for the {len(down)} jobs enqueued while the "
        f"listeners were down; the fallback poll is {h.load.poll:g} s"
    )
    slow = [p for p in after if p >= limit]
    if slow:
        h.ledger.failed.append(
            f"{len(slow)} jobs after a listener kill waited {max(slow):.1f} s "
            f"(>= {limit:g} s: the fallback poll, not a wakeup)"
        )


def pgbouncer_restart(h: Harness, quick: bool) -> None:
    """The workers and the producer go through a PgBouncer in transaction pooling (LISTEN
    on the server itself); the PgBouncer is stopped (every client and server connection
    cut) for 1 s, then 5 s, and started again on its port."""
    bouncer = h.resources.enter_context(pgbouncer.pgbouncer(h.cluster.dsn, "transaction"))
    h.via = bouncer.dsn(h.cluster.dsn)
    for _ in range(h.load.workers):
        h.spawn()
    h.start_load()
    sleep(CALM)
    for outage in [1.0] if quick else [1.0, 5.0]:
        start = time.monotonic()
        bouncer.stop()
        sleep(outage)
        bouncer.start()
        back = time.monotonic()
        h.fault(Fault("pgbouncer-restart", start, back, back))
        sleep(CALM)


#: How wrong the clock-skew scenario's worker clocks are (seconds; one ahead, one behind).
SKEW = 600.0
#: Its load: some jobs due a few seconds after their enqueue, some failing their first
#: attempt (a retry due 2 s later), the rest due at once.
SKEW_LOAD = Load(delayed_every=7, flaky_every=10)
#: A claim later than this after the job was due counts as late (the rule a wrong clock
#: would break is minutes, not this).
LATE = 10.0


def clock_skew(h: Harness, quick: bool) -> None:
    """Both workers with a wall clock ``SKEW`` seconds wrong, one ahead, one behind, under
    the load with delayed and retried jobs."""
    h.spawn(FAULTS_SKEW=f"{SKEW:g}")
    h.spawn(FAULTS_SKEW=f"{-SKEW:g}")
    h.start_load()
    sleep(20.0 if quick else 60.0)


_TIMES = """
SELECT j.id, j.kind, j.claimed_by,
       extract(epoch FROM j.available_at - j.created_at)::float8,
       extract(epoch FROM j.claimed_at - j.available_at)::float8,
       (SELECT bool_and(e.at BETWEEN j.claimed_at AND j.completed_at) FROM faults.effects e
        WHERE e.job_id = j.id AND e.attempt = j.attempts AND e.tx)
FROM skiplock.jobs j WHERE j.status = 'succeeded'
"""


def clock_rules(h: Harness) -> None:
    """The database's clock rules, on the final rows (every time there is the database's):
    no job claimed before it was due, none late by more than ``LATE``, every due time
    (delay, retry) within seconds of the enqueue (not ``SKEW`` off), each transactional
    effect between its claim and its completion; and the skew each worker's clock
    showed."""
    lines = h.path.read_text(encoding="utf-8").splitlines()
    seen = sorted(int(line.split()[2]) for line in lines if line.startswith("C "))
    if len(seen) != 2 or min(seen) > -SKEW / 2 or max(seen) < SKEW / 2:
        h.ledger.failed.append(f"the workers' clocks were not skewed: {seen}")
    rows = h.sql(_TIMES)
    waits = [r[4] for r in rows if r[4] is not None]
    early = [r[0] for r in rows if r[4] is not None and r[4] < 0]
    delayed = [r[3] for r in rows if r[1] != FLAKY and r[3] >= h.load.delay / 2]
    retries = [r[3] for r in rows if r[1] == FLAKY]
    off = [r[0] for r in rows if not 0 <= r[3] <= h.load.delay + LATE]
    outside = [r[0] for r in rows if r[5] is False]
    by = {w: sum(1 for r in rows if r[2] == w) for w in {r[2] for r in rows}}
    h.ledger.notes.append(
        f"worker clocks {' and '.join(f'{s:+d} s' for s in seen)} (as skiplock's system "
        f"clock read them); {len(rows):,} succeeded jobs claimed by "
        f"{len(by)} workers ({', '.join(str(n) for n in sorted(by.values()))}); claim "
        f"after due p50 / max {_ms(waits)}; "
        f"{len(delayed)} delayed jobs due {_range(delayed)} s after their enqueue, "
        f"{len(retries)} retried jobs due {_range(retries)} s after theirs; "
        f"{len(early)} claimed early, {len(off)} due times off, {len(outside)} effects "
        "outside their claim"
    )
    for count, what in (
        (len(early), "claimed before they were due"),
        (len(off), f"due more than {LATE:g} s from their enqueue (a wrong clock's due time)"),
        (sum(1 for w in waits if w > LATE), f"claimed more than {LATE:g} s after due"),
        (len(outside), "with an effect outside their claim (by the database's clock)"),
    ):
        if count:
            h.ledger.failed.append(f"{count} jobs {what}")


def _ms(values: list[float]) -> str:
    p50, top = percentile(values, 0.5), max(values, default=None)
    return "-" if p50 is None or top is None else f"{p50 * 1000:.0f} / {top * 1000:.0f} ms"


def _range(data: list[float]) -> str:
    return f"{min(data):.1f}-{max(data):.1f}" if data else "-"


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "kill-storm",
            "a worker process in the middle of a run killed with SIGKILL every 3 s and replaced "
            "(3 processes)",
            "every re-run follows a run in a process the harness killed; each job's "
            "effect committed once",
            kill_storm,
        ),
        Scenario(
            "pg-restart",
            "the server stopped (fast: sessions ended) for 3 s, then 10 s, and started again",
            "every re-run overlaps an outage; nothing lost; each job's effect committed once",
            restart,
            controls_server=True,
        ),
        Scenario(
            "freeze",
            "a worker frozen with SIGSTOP while it runs jobs, for twice its lease, then SIGCONT",
            "the frozen worker's runs are re-run elsewhere; its late returns commit "
            "nothing (no second effect)",
            freeze,
        ),
        Scenario(
            "pg-hang",
            "every server process frozen with SIGSTOP (connections accepted, never "
            "answered) for 1.5x the lease, then resumed",
            "every re-run overlaps the hang; nothing lost or stuck; each effect once",
            hung,
            controls_server=True,
        ),
        Scenario(
            "poison",
            "one job whose processor kills its process every time (max_attempts 3), among "
            "innocent jobs; dead workers replaced",
            "the poison job ends dead; every innocent job succeeds with one effect; each "
            "worker death follows a poison run",
            poison,
        ),
        Scenario(
            "listener-kill",
            "the workers' LISTEN connections terminated with pg_terminate_backend, six "
            "times, the fallback poll slowed to 5 s (2 processes, 4 jobs/s)",
            "nothing lost, stuck or re-run; the listeners come back within a second and "
            "every job enqueued after a kill starts well within the poll interval",
            listener_kill,
            # It terminates sessions of the server: only on the throw-away one.
            controls_server=True,
            load=LISTEN_LOAD,
            after=listener_pickups,
        ),
        Scenario(
            "clock-skew",
            f"both workers' wall clocks wrong by {SKEW / 60:g} minutes, one ahead and one "
            "behind (time.time and datetime.now shifted in their processes), for 60 s; "
            "every 7th job due 3 s after its enqueue, every 10th failing its first attempt "
            "(retry due 2 s later)",
            "nothing lost, stuck or re-run (no lease expired early); no job claimed before "
            "it was due or minutes late; every due time and effect on the database's clock",
            clock_skew,
            load=SKEW_LOAD,
            after=clock_rules,
        ),
        Scenario(
            "pgbouncer-restart",
            "workers and producer through a PgBouncer in transaction pooling (LISTEN on the "
            "server); the PgBouncer stopped (SIGTERM: every connection cut) for 1 s, then "
            "5 s, and started again",
            "every re-run overlaps a PgBouncer outage; nothing lost or stuck; each "
            "transactional effect once",
            pgbouncer_restart,
            # It starts its PgBouncer in front of the throw-away server.
            controls_server=True,
        ),
        Scenario(
            "cut-off",
            "one worker's connections through a proxy that drops every byte (both ways; "
            "new connections never answered) while it runs jobs, for twice its lease, then "
            "restored, the connections open during the cut reset; three times",
            "the cut-off worker's runs are re-run elsewhere after its lease; its returns "
            "during the cut commit nothing (no second effect); it takes jobs again once "
            "reconnected",
            cut_off,
            # Its proxy forwards to the throw-away server's port.
            controls_server=True,
        ),
        Scenario(
            "failover-sync",
            "a primary with a synchronous standby, workers and producer on a multi-host DSN "
            "(target_session_attrs=read-write); the primary's WAL sender frozen 0.5 s, the "
            "primary crashed (immediate stop) and the standby promoted",
            "nothing acknowledged is missing on the new primary, no acknowledged completion "
            "is undone (a job run again after its success was acknowledged), every re-run "
            "overlaps the failover; each effect once",
            failover,
            controls_server=True,
            place=pair(synchronous=True),
        ),
        Scenario(
            "failover-async",
            "the same with an asynchronous standby: what the primary acknowledged while its "
            "WAL sender was frozen never reaches the standby",
            "every acknowledged enqueue missing on the new primary and every completion "
            "undone was acknowledged in PostgreSQL's window (0.1 s before the WAL sender "
            "froze to the crash), counted apart; none outside it; each effect once",
            failover,
            controls_server=True,
            place=pair(synchronous=False),
        ),
        Scenario(
            "rolling-deploy",
            "workers and a producer of the previous version (the newest earlier commit "
            "whose migrations the current ones extend, from git) on its schema; "
            "`skiplock schema apply` of the current code migrates it under them; workers "
            "and a producer of the current version start beside them; the old workers "
            "stopped one by one (SIGTERM)",
            "no fault is recorded, so any re-run fails it: nothing lost, stuck or re-run; "
            "old workers take jobs on the migrated schema, new ones run jobs the old "
            "producer enqueued",
            rolling_deploy,
            # It runs `skiplock schema apply` on the server, as a deploy does.
            controls_server=True,
            after=side_by_side,
            schema=False,
        ),
    ]
}

#: The CI subset (``--quick`` runs these, shortened).
QUICK = ("kill-storm", "freeze", "pg-restart")
