"""The dashboard's "Workers" page (issue 45 item 5), framework- and flavour-neutral: per
registered worker what it runs now (the jobs, since when), its slots, kinds, tenants,
version and host, and what it was asked to do; its Drain and Stop buttons (``drain_worker``
and ``stop_worker`` of the caller's operator, docs/workers.md "Drain or stop a worker").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core.rules import format_duration

from ..rest._problems import BadRequest
from ._actions import Write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from skiplock.core import HealthReport, Job

#: The write pages of the workers page (``call``: the operator method each calls).
BY_PAGE: Mapping[str, Write] = {
    "drain": Write(
        "drain_worker",
        "worker-drain",
        "Asked the worker to drain: it stops claiming, finishes its running jobs, then exits.",
    ),
    "stopworker": Write(
        "stop_worker",
        "worker-stop",
        "Asked the worker to stop: running jobs get its shutdown timeout, then it exits.",
    ),
}
#: What the notice after a redirect says, by the ``done`` query parameter (fixed texts).
DONE: Mapping[str, str] = {write.done: write.notice for write in BY_PAGE.values()}


def arguments(form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The keyword arguments of ``drain_worker`` or ``stop_worker`` from a button's form
    (BadRequest without a worker id)."""
    values = form.get("worker_id")
    worker_id = values[-1].strip() if values else ""
    if not worker_id:
        raise BadRequest("the form names no worker")
    return {"worker_id": worker_id}


def _names(names: frozenset[str] | None) -> str:
    return "all" if names is None else ", ".join(sorted(names))


def page(report: HealthReport, jobs: Mapping[str, Sequence[Job]]) -> dict[str, Any]:
    """What the workers page shows: every registered worker, live ones first, with the
    jobs it runs now (oldest claim first)."""
    now = report.checked_at
    rows = []
    for w in sorted(report.workers, key=lambda w: (not w.live, w.id)):
        running = [
            {
                "id": job.id,
                "kind": job.kind,
                "for": ""
                if job.claimed_at is None or now is None
                else format_duration(now - job.claimed_at),
                "since": job.claimed_at,
            }
            for job in jobs.get(w.id, [])
        ]
        rows.append(
            {
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "version": w.version,
                "kinds": _names(w.kinds),
                "tenants": _names(w.tenants),
                "slots": w.slots,
                "running": w.running,
                "jobs": running,
                "heartbeat_age": format_duration(w.heartbeat_age),
                "live": w.live,
                "request": w.request,
            }
        )
    return {"page": "workers", "workers": rows}
