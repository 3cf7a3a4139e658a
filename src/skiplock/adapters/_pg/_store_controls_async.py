"""The controls role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgControlsRole` implements ``skiplock.ports.AsyncControlsRole``: the pauses
and limits set at run time (issue 30), each change one statement, audited in it. Contract
kit (``skiplock.testing.contract``): ``AsyncControlsContract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import AuditAction
from skiplock.core.store import control_event, worker_request_event

from ._driver_async import TX, C
from ._rows import utc
from ._rows_controls import (
    concurrency_from_row,
    concurrency_params,
    controls_from_rows,
    limit_from_row,
    limit_params,
    pause_from_row,
    pause_params,
    request_from_row,
)
from ._store_base_async import AsyncPgStoreBase

if TYPE_CHECKING:
    from skiplock.core.store import ConcurrencyLimit, Controls, Limit, Pause, WorkerRequest
    from skiplock.ports import AsyncAudit

    from ._migrate import Rows


class AsyncPgControlsRole(AsyncPgStoreBase[C, TX]):
    """``AsyncControlsRole`` of the PostgreSQL store (see the module)."""

    async def controls(self) -> Controls:
        """Every pause and limit, in one statement over the two small tables (0014)."""
        async with self._reading() as conn:
            rows = await self._execute(conn, "controls", {})
        return controls_from_rows(rows)

    async def pause(self, pause: Pause, *, audit: AsyncAudit | None = None) -> Pause:
        """Upsert the pause (audited in the same statement with ``audit``)."""
        params = pause_params(pause.kind, pause.tenant, pause.reason, pause.actor)
        [row] = await self._control("pause", params, AuditAction.PAUSED, audit)
        return pause_from_row(row)

    async def resume(
        self, kind: str | None, tenant: str | None, *, audit: AsyncAudit | None = None
    ) -> Pause | None:
        """Delete the pause of exactly ``(kind, tenant)`` (audited with ``audit``)."""
        actor = None if audit is None else audit.actor
        params = pause_params(kind, tenant, None, actor)
        rows = await self._control("resume", params, AuditAction.RESUMED, audit)
        return pause_from_row(rows[0]) if rows else None

    async def set_limit(self, limit: Limit, *, audit: AsyncAudit | None = None) -> Limit:
        """Upsert the limit (audited in the same statement with ``audit``)."""
        params = limit_params(limit.kind, limit.tenant, limit.provider, limit.limit, limit.actor)
        [row] = await self._control("set_limit", params, AuditAction.LIMIT_SET, audit)
        return limit_from_row(row)

    async def clear_limit(
        self,
        kind: str | None,
        tenant: str | None,
        provider: str | None,
        *,
        audit: AsyncAudit | None = None,
    ) -> Limit | None:
        """Delete the limit of exactly ``(kind, tenant)`` or ``provider`` (audited with
        ``audit``)."""
        actor = None if audit is None else audit.actor
        params = limit_params(kind, tenant, provider, None, actor)
        rows = await self._control("clear_limit", params, AuditAction.LIMIT_CLEARED, audit)
        return limit_from_row(rows[0]) if rows else None

    async def set_concurrency(
        self, limit: ConcurrencyLimit, *, audit: AsyncAudit | None = None
    ) -> ConcurrencyLimit:
        """Upsert the concurrency limit (audited in the same statement with ``audit``)."""
        target = (limit.kind, limit.key, limit.scope)
        stored = await self._concurrency(
            "set_concurrency", *target, limit.limit, limit.actor, audit
        )
        assert stored is not None  # an upsert returns its row
        return stored

    async def clear_concurrency(
        self,
        kind: str | None,
        key: str | None,
        scope: str,
        *,
        audit: AsyncAudit | None = None,
    ) -> ConcurrencyLimit | None:
        """Delete the concurrency limit of exactly ``(kind, key, scope)`` (audited with
        ``audit``)."""
        actor = None if audit is None else audit.actor
        return await self._concurrency("clear_concurrency", kind, key, scope, None, actor, audit)

    async def _concurrency(
        self,
        name: str,
        kind: str | None,
        key: str | None,
        scope: str,
        limit: int | None,
        actor: str | None,
        audit: AsyncAudit | None,
    ) -> ConcurrencyLimit | None:
        """Run ``set_concurrency`` or ``clear_concurrency``: the limit changed, or None."""
        action = AuditAction.CONCURRENCY_SET if limit else AuditAction.CONCURRENCY_CLEARED
        params = concurrency_params(kind, key, scope, limit, actor)
        rows = await self._control(name, params, action, audit)
        return concurrency_from_row(rows[0]) if rows else None

    async def request_worker(
        self,
        worker_id: str,
        action: str,
        *,
        actor: str | None = None,
        audit: AsyncAudit | None = None,
    ) -> WorkerRequest | None:
        """Set the request on the worker's row (audited in the same statement with
        ``audit``); None without such a row."""
        params = {"id": worker_id, "mode": action, "actor": actor}
        kind = AuditAction.WORKER_DRAIN if action == "drain" else AuditAction.WORKER_STOP
        rows = await self._control("request_worker", params, kind, audit)
        return request_from_row(rows[0]) if rows else None

    async def _control(
        self, name: str, params: dict[str, Any], action: AuditAction, audit: AsyncAudit | None
    ) -> Rows:
        """Run the control change ``name``; with ``audit`` its event is written by the
        statement (the store's table) or given to the sink in its transaction."""
        params |= {"action": action.value, "audit_table": audit is not None and audit.sink is None}
        if audit is None or audit.sink is None:
            async with self._use(None) as conn:
                return await self._execute(conn, name, params)
        async with self._audited(None, audit, kept=False) as (conn, note):
            rows = await self._execute(conn, name, params)
            for row in rows:
                if "request" in row:  # a worker's request
                    at = utc(row["at"])
                    note.events.append(worker_request_event(request_from_row(row), at))
                    continue
                control: Pause | Limit | ConcurrencyLimit
                if "max_running" in row:
                    control = concurrency_from_row(row)
                elif "reason" in row:
                    control = pause_from_row(row)
                else:
                    control = limit_from_row(row)
                note.events.append(control_event(action, control, params["actor"], utc(row["at"])))
        return rows
