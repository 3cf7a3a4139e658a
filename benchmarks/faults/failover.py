"""The fault suite's failover scenarios: a primary and its streaming standby (synchronous
or asynchronous, :func:`benchmarks.pgcluster.standby_of`), the workers and the producer
on a multi-host DSN (``target_session_attrs=read-write``); the primary's WAL sender
frozen for :data:`STALL` seconds (the standby stops receiving), the primary crashed, the
standby promoted, and the load goes on against it.

With a synchronous standby no commit is acknowledged that the standby has not flushed:
nothing acknowledged may be missing afterwards, and no completion acknowledged may be
undone (a job run again after its success was acknowledged). With an asynchronous one,
what was acknowledged in PostgreSQL's window — from :data:`~benchmarks.faults.ledger.LAG`
before the WAL sender froze to the crash — may be missing on the new primary: the ledger
(:attr:`~benchmarks.faults.ledger.Ledger.window`) counts those losses apart, as the
window's, and any loss outside it still fails the scenario. The failover tests
(tests/pgfailover.py, issue 43) keep the same ledger and run the same check.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from typing import TYPE_CHECKING

from benchmarks.faults.harness import Harness, sleep
from benchmarks.faults.ledger import Fault, async_window
from benchmarks.pgcluster import Cluster, cluster, standby_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: Seconds the primary's WAL sender is frozen before the crash: commits acknowledged
#: meanwhile never reach an asynchronous standby (PostgreSQL's window, made wide enough
#: to see on loopback); a synchronous primary acknowledges none of them.
STALL = 0.5
#: Seconds of load before the failover and after it.
CALM = 5.0


@dataclasses.dataclass(frozen=True)
class Pair:
    """A primary and its standby, reached through one multi-host DSN."""

    primary: Cluster
    standby: Cluster

    @property
    def dsn(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in (self.primary, self.standby))
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"


def pair(synchronous: bool) -> Callable[[], contextlib.AbstractContextManager[Pair]]:
    """The scenario's place: a new primary and a standby streaming from it."""

    @contextlib.contextmanager
    def place() -> Iterator[Pair]:
        settings = (
            {"synchronous_standby_names": "*", "synchronous_commit": "on"} if synchronous else {}
        )
        with cluster(settings) as primary, standby_of(primary) as standby:
            yield Pair(primary, standby)

    return place


def failover(h: Harness, quick: bool) -> None:
    """Load on the primary; the WAL sender frozen, the primary crashed, the standby
    promoted; load on the new primary (see the module)."""
    servers = h.server
    assert isinstance(servers, Pair), "the failover scenarios run on a primary and a standby"
    synchronous = bool(servers.primary.settings.get("synchronous_standby_names"))
    for _ in range(h.load.workers):
        h.spawn()
    h.start_load()
    sleep(CALM)
    [sender] = servers.primary.query("SELECT pid FROM pg_stat_replication")
    start = time.monotonic()
    os.kill(int(sender), signal.SIGSTOP)
    sleep(STALL)  # the window itself: the scenario's parameter
    os.kill(int(sender), signal.SIGKILL)  # never sends what it held back
    servers.primary.crash()
    crashed = time.monotonic()
    if not synchronous:
        h.ledger.window = async_window(start, crashed)
    servers.standby.promote()
    back = time.monotonic()
    h.fault(Fault("failover", start, back, back))
    h.ledger.notes.append(
        f"WAL sender frozen {STALL:g} s, then the primary crashed; promotion took "
        f"{back - crashed:.2f} s"
    )
    sleep(2 * CALM if not quick else CALM)
