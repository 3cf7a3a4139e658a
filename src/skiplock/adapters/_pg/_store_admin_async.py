"""The admin role of the PostgreSQL job store (async source; twin generated).

:class:`AsyncPgAdminRole` implements ``skiplock.ports.AsyncAdminRole``: operator
transitions (``apply``, ``apply_job``) and deletes, each one statement, audited in it.
Contract kit (``skiplock.testing.contract``): ``AsyncAdminContract`` (whose listing and
counts tests are the reads role's) and the operator tests of ``AsyncAuditContract``
(which spans every role that audits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import JobFilter, check_operator_event

from ._driver_async import TX, C
from ._rows import filter_params, job_from_row
from ._rows_admin import apply_params, operator_audit_params
from ._store_base_async import AsyncPgStoreBase

if TYPE_CHECKING:
    from skiplock.core import (
        Event,
        Job,
    )
    from skiplock.ports import AsyncAudit

    from ._migrate import Rows


class AsyncPgAdminRole(AsyncPgStoreBase[C, TX]):
    """``AsyncAdminRole`` of the PostgreSQL store (see the module)."""

    async def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> list[int]:
        """Operator transition of every matching job whose state allows ``event``
        (each audited in the same statement with ``audit``)."""
        rows = await self._apply("apply", filter, event, reset_attempts, connection, audit)
        return sorted(int(r["id"]) for r in rows)

    async def apply_job(
        self,
        job_id: int,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: Any = None,
        audit: AsyncAudit | None = None,
    ) -> Job | None:
        """:meth:`apply` of one job in one statement that returns the job as
        :meth:`get` reads it (audited in it with ``audit``); None if nothing changed.
        A changed row that cannot become a job raises UndecodableRowError (the change
        stands)."""
        one = JobFilter(ids=frozenset({job_id}))
        rows = await self._apply("apply_job", one, event, reset_attempts, connection, audit)
        return job_from_row(rows[0]) if rows else None

    async def _apply(
        self,
        name: str,
        filter: JobFilter,
        event: Event,
        reset_attempts: bool,
        connection: Any,
        audit: AsyncAudit | None,
    ) -> Rows:
        """Run the operator transition ``name`` (its ``_audited`` twin with ``audit``)."""
        check_operator_event(event)
        params = filter_params(filter) | apply_params(event, reset_attempts=reset_attempts)
        if audit is None:
            async with self._use(connection) as conn:
                return await self._execute(conn, name, params)
        params |= operator_audit_params(event, reset_attempts=reset_attempts)
        async with self._audited(connection, audit, kept=False) as (conn, note):
            rows = await self._execute(conn, f"{name}_audited", params | note.params())
            note.collect(rows)
        return rows

    async def delete(
        self, filter: JobFilter, *, connection: Any = None, audit: AsyncAudit | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running (each audited, with its payload, in
        the same statement with ``audit``); returns them. A deleted row that cannot
        become a job raises UndecodableRowError (it is deleted all the same)."""
        if audit is None:
            async with self._use(connection) as conn:
                rows = await self._execute(conn, "delete", filter_params(filter))
        else:
            async with self._audited(connection, audit, kept=False) as (conn, note):
                rows = await self._execute(
                    conn, "delete_audited", filter_params(filter) | note.params()
                )
                note.collect(rows)
        return sorted((job_from_row(r) for r in rows), key=lambda j: j.id)
