"""The lease keeper: a worker's registration and heartbeats (async source; ``_lease.py``
is the sync twin).

A worker's jobs are safe from stale-claim recovery only while its heartbeat is fresh. The
lease keeper knows whether that is so: after a store error, or when the last good
heartbeat is older than half-way to the stale TTL, the lease is *in doubt* — the worker
then starts and claims nothing until :meth:`LeaseKeeper.renew` has heart-beaten again
and learned which held jobs are still its own.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from skiplock._compat_async import Lock
from skiplock.core import DatabaseUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.core import WorkerInfo
    from skiplock.ports import AsyncWorkersRole

logger = logging.getLogger("skiplock.worker")

#: A heartbeat releases the worker's running jobs it does not hold (a completion a
#: failover undid: ``AsyncWorkersRole.heartbeat``) after a store error and at every
#: RELEASE_EVERY-th heartbeat: a job lost without an error the worker saw waits at most
#: that many heartbeat intervals.
RELEASE_EVERY = 6


class LeaseKeeper:
    """Registers the worker, heart-beats for every job it holds, reports lost jobs.

    ``held()`` lists the ids of the jobs the worker holds (running and prefetched);
    ``on_lost(ids)`` drops those that are no longer the worker's (cancelled, recovered,
    deleted); ``on_gone()`` drops every held job when the registration itself is gone —
    only then does the worker register again (which releases any job still running under
    its id, see ``AsyncWorkersRole.register_worker``).

    The heartbeat releases the worker's running jobs missing from ``held()`` that were
    claimed before its previous heartbeat (``AsyncWorkersRole.heartbeat``: jobs the worker
    lost track of, such as a completion a failover undid). :attr:`gate` makes that safe:
    a claim holds it until its jobs are placed (in ``held()``), a heartbeat from reading
    ``held()`` until the store answered — so no claim commits unseen meanwhile.
    """

    def __init__(
        self,
        *,
        store: AsyncWorkersRole,
        info: WorkerInfo,
        interval: float,
        stale_ttl: float,
        held: Callable[[], list[int]],
        on_lost: Callable[[list[int]], None],
        on_gone: Callable[[], None],
    ) -> None:
        self._store = store
        self._info = info
        self._interval = interval
        # Half-way between a heartbeat and the stale TTL: a healthy worker renews well
        # before, and the store cannot have recovered anything yet.
        self._doubt_after = (interval + stale_ttl) / 2
        self._held = held
        self._on_lost = on_lost
        self._on_gone = on_gone
        self._renewing = Lock()
        #: Held by a claim (until its jobs are placed) and by a heartbeat (see the class).
        self.gate = Lock()
        self._last_good = time.monotonic()
        self._failed = False
        self._errors = 0
        self._beats = 0
        #: True once :meth:`register` succeeded (there is a registration to remove).
        self.registered = False

    def in_doubt(self) -> bool:
        """True after a store error or once the last good heartbeat is too old: start
        and claim nothing before :meth:`renew` succeeded."""
        return self._failed or time.monotonic() - self._last_good > self._doubt_after

    def store_failed(self) -> None:
        """A store call failed: the lease is in doubt until the next good heartbeat."""
        self._errors += 1
        self._failed = True

    async def register(self) -> None:
        """Register the worker (its heartbeat starts now)."""
        await self._store.register_worker(self._info)
        self.registered = True
        self._good()

    async def renew(self, *, always: bool = False) -> bool:
        """Heart-beat now if the lease is in doubt (or ``always``); drop what is no longer
        held, re-register when the registration is gone. True when the lease is sound."""
        async with self._renewing:
            if not always and not self.in_doubt():
                return True  # renewed by someone else meanwhile
            started, errors = time.monotonic(), self._errors
            try:
                # Under the gate also when registering again: that releases every job
                # running under this id, so no claim may be in flight.
                async with self.gate:
                    # Releasing the jobs it does not hold reads the worker's running
                    # jobs: asked after a store error (an outcome may have been lost)
                    # and every RELEASE_EVERY heartbeats, not at each one.
                    self._beats += 1
                    release = self._failed or self._beats % RELEASE_EVERY == 0
                    lost = await self._store.heartbeat(
                        self._info.id, self._held(), release_unheld=release
                    )
                    if lost is None:
                        logger.warning(
                            "worker %s: its registration is gone (recovered as stale?); "
                            "dropping every held job and registering again",
                            self._info.id,
                        )
                        self._on_gone()
                        await self._store.register_worker(self._info)
                    elif lost:
                        self._on_lost(lost)
            except DatabaseUnavailableError as exc:  # expected in an outage: one line
                self.store_failed()
                logger.warning("worker %s: heartbeat failed: %s", self._info.id, exc)
                # Not sound: maintenance must not run on it (it would take this worker's
                # own jobs for stale the moment the database is back), nor a held job start.
                return False
            except Exception:
                self.store_failed()
                logger.exception("worker %s: heartbeat failed", self._info.id)
                return False
            self._good(started, errors)
            return True

    def _good(self, at: float | None = None, errors: int | None = None) -> None:
        # Measured from before the heartbeat was sent: the store's time of it is later.
        self._last_good = time.monotonic() if at is None else at
        # A store error reported while the heartbeat was in flight keeps the doubt.
        if errors is None or errors == self._errors:
            self._failed = False
