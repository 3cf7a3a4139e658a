"""The memory state's ``AdminRole`` (:mod:`skiplock.ports`): operator transitions and
deletes (``apply_job`` is the store's ``apply`` of one job).

Tested by the kit's ``AsyncAdminContract`` (which spans ``AdminRole`` and ``ReadsRole``:
its listing and count tests are ``_reads``') and the operator tests of
``AsyncAuditContract`` (the audit trail, J10, spans every role that changes jobs).
"""

from __future__ import annotations

import json

from skiplock.core import (
    AuditAction,
    Event,
    Job,
    JobFilter,
    JobState,
    check_operator_event,
    discard_details,
    operator_action,
    operator_details,
    sources,
)
from skiplock.core.store import after_operator

from ._base import AuditNote, public_job, selected
from ._transaction import Transactions


class AdminState(Transactions):
    """Operator transitions and deletion of jobs."""

    def apply(
        self,
        filter: JobFilter,
        event: Event,
        *,
        reset_attempts: bool = False,
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[Job]:
        """Operator transition of every matching job whose state allows ``event``
        (each audited with ``audit``, J10); returns the changed jobs as :meth:`get`
        then reads them, by id."""
        check_operator_event(event)
        allowed = sources(event)
        changed: list[Job] = []
        with self._writing():
            scope = self._scope(connection)
            now = scope.now
            targets = sorted(
                (j for j in scope.rows() if j.state in allowed and selected(filter, j)),
                key=lambda j: j.id,
            )
            for job in targets:
                row = after_operator(job, event, now, reset_attempts=reset_attempts)
                scope.put(row)
                details = operator_details(job.state, event, reset_attempts=reset_attempts)
                scope.audit(audit, operator_action(event), row, details)
                changed.append(row)
        return [public_job(row) for row in changed]

    def delete(
        self, filter: JobFilter, connection: object = None, audit: AuditNote | None = None
    ) -> list[Job]:
        """Delete matching jobs that are not running; returns them. With ``audit`` each
        is audited with its payload (J10)."""
        with self._writing():
            scope = self._scope(connection)
            doomed = sorted(
                (j for j in scope.rows() if j.state is not JobState.RUNNING),
                key=lambda j: j.id,
            )
            doomed = [j for j in doomed if selected(filter, j)]
            for job in doomed:
                scope.remove(job.id)
                details = discard_details(job.state, json.loads(job.payload))
                scope.audit(audit, AuditAction.DISCARD, job, details)
        return [public_job(j) for j in doomed]
