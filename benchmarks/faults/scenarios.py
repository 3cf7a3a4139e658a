"""The fault suite's scenarios: each runs a :class:`~benchmarks.faults.harness.Harness`
through one kind of fault, in a full and a quick (CI) length."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
from typing import TYPE_CHECKING

from benchmarks import pgcluster
from benchmarks.faults.harness import Harness, Load, sleep, supervised, wait_until
from benchmarks.faults.ledger import Fault

if TYPE_CHECKING:
    from collections.abc import Callable


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
    ]
}

#: The CI subset (``--quick`` runs these, shortened).
QUICK = ("kill-storm", "freeze", "pg-restart")
