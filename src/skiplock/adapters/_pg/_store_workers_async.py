"""The workers role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgWorkersRole` implements ``skiplock.ports.AsyncWorkersRole`` but for
``notifier()``, which each adapter builds on its own connection: registration,
heartbeats and unregistration on the dedicated bookkeeping connection, stale-claim
recovery, and the worker's next-due read. Contract kit (``skiplock.testing.contract``):
``AsyncWorkersContract`` (whose maintenance and retention tests are the upkeep role's),
``AsyncNotifierContract``, and the re-registration and recovery tests of
``AsyncLifecycleContract`` (a jobs-role mixin otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import NextDue, StoreError

from ._driver_async import TX, C
from ._ops import recover_steps
from ._rows import utc
from ._rows_workers import heartbeat_params, worker_params
from ._store_base_async import AsyncPgStoreBase

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from datetime import timedelta

    from skiplock.core import (
        WorkerInfo,
    )
    from skiplock.ports import AsyncAudit

    from ._migrate import Rows


class AsyncPgWorkersRole(AsyncPgStoreBase[C, TX]):
    """``AsyncWorkersRole`` of the PostgreSQL store (see the module)."""

    async def register_worker(self, info: WorkerInfo) -> None:
        """Insert or refresh the worker's row (heartbeat = the database's now) and, in
        the same statement, release the jobs an earlier life of this id left running."""
        await self._aux_execute("register_worker", worker_params(info))

    async def heartbeat(
        self, worker_id: str, running: Sequence[int] = (), *, release_unheld: bool = False
    ) -> list[int] | None:
        """Refresh the worker's heartbeat to the database's now, in one statement; None if
        the worker row is gone, else the ids among ``running`` no longer running under
        this worker (ascending). ``release_unheld``: see the port."""
        params = heartbeat_params(worker_id, running, release_unheld)
        rows = await self._aux_execute("heartbeat", params)
        if not rows:
            return None
        return [int(job_id) for job_id in rows[0]["gone"]]

    async def unregister_worker(self, worker_id: str) -> list[int]:
        """Remove the worker's row and, in the same statement, release the jobs still
        running under its id; returns their ids (ascending)."""
        rows = await self._aux_execute("unregister_worker", {"id": worker_id})
        return [int(row["id"]) for row in rows]

    async def recover_stale(
        self,
        *,
        default_ttl: timedelta,
        ttls: Mapping[str, timedelta],
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Recover claims of workers that stopped heart-beating, then delete the rows of
        workers silent for longer than every TTL; [] if another node is running the
        recovery right now. With ``audit`` each job moved to dead is audited."""
        if audit is None:
            async with self._use(None, atomic=True) as conn:
                return await self._run(conn, recover_steps(self._schema, default_ttl, ttls))
        async with self._audited(None, audit, kept=True, atomic=True) as (conn, note):
            ids = await self._run(conn, recover_steps(self._schema, default_ttl, ttls, note))
        return ids

    async def next_due(
        self, kinds: frozenset[str] | None, tenants: frozenset[str] | None
    ) -> NextDue | None:
        """When the next pending job of ``kinds`` and ``tenants`` (None: any) that is not
        due yet falls due, on the database's clock: one bounded read (the ``next_due``
        query); None if there is none."""
        params = {
            "kinds": None if kinds is None else sorted(kinds),
            "tenants": None if tenants is None else sorted(tenants),
        }
        async with self._pooled() as conn, self._lost_as_store_error():
            rows = await self._execute(conn, "next_due", params)
        at = rows[0]["at"] if rows else None
        return None if at is None else NextDue(at=utc(at), now=utc(rows[0]["now"]))

    # ---- the worker-bookkeeping connection ----------------------------------------------

    async def _aux_execute(self, name: str, params: Mapping[str, Any]) -> Rows:
        """Run a named query on the dedicated bookkeeping connection (heartbeats), so a busy
        pool never starves it; reconnect once if it broke."""
        # A worker registers first: refuse an old schema before anything runs.
        await self.open()
        driver = self._driver
        async with self._aux_lock:
            for attempt in range(2):
                if self._aux is None or driver.is_closed(self._aux):
                    await self._drop_aux(broken=True)
                    self._aux = await driver.connect()
                if self._aux is None:  # the driver has no connection outside the pool
                    break
                try:
                    return await self._execute(self._aux, name, params)
                except Exception as exc:
                    if not driver.is_disconnect(exc):
                        raise
                    await self._drop_aux(broken=True)
                    if attempt:
                        raise StoreError(f"lost the PostgreSQL connection: {exc}") from exc
        async with self._scoped(None) as (conn, _):
            return await self._execute(conn, name, params)

    async def _drop_aux(self, *, broken: bool) -> None:
        aux, self._aux = self._aux, None
        if aux is not None:
            await self._driver.disconnect(aux, broken=broken)
