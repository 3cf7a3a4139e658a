"""A store that implements only the reads role (issue 42): a thin class delegating to a
real memory store's reads, nothing else, serves the dashboard's read pages and the
Prometheus exporter through a :class:`~skiplock.engine.Reader`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine, JobState
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.contrib.prometheus import exporter
from skiplock.engine import Reader
from skiplock.integrations.dashboard import Dashboard, Permission, Request
from skiplock.integrations.rest import RestApi
from tests.contrib.test_exporter import samples

if TYPE_CHECKING:
    from datetime import datetime, timedelta

    from skiplock.core import (
        AuditEvent,
        FinishedCount,
        HealthSnapshot,
        Job,
        JobFilter,
        JobPage,
        Page,
        StateCount,
    )
    from skiplock.core.store import Controls, QueueSample, Retention
    from skiplock.ports import ReadsRole


class ReadsOnly:
    """The reads role of ``store`` and nothing else (a read replica's store)."""

    def __init__(self, store: InMemoryJobStore) -> None:
        self._store = store

    def now(self) -> datetime:
        return self._store.now()

    def get(self, job_id: int, *, connection: Any = None) -> Job | None:
        return self._store.get(job_id, connection=connection)

    def list_jobs(self, filter: JobFilter, page: Page) -> JobPage:
        return self._store.list_jobs(filter, page)

    def counts(self) -> list[StateCount]:
        return self._store.counts()

    def finished_counts(self, since: datetime, bucket: timedelta) -> list[FinishedCount]:
        return self._store.finished_counts(since, bucket)

    def queue_samples(self, since: datetime, bucket: timedelta) -> list[QueueSample]:
        return self._store.queue_samples(since, bucket)

    def health_snapshot(self) -> HealthSnapshot:
        return self._store.health_snapshot()

    def controls(self) -> Controls:
        return self._store.controls()

    def audit_trail(self, job_id: int, *, connection: Any = None) -> list[AuditEvent]:
        return self._store.audit_trail(job_id, connection=connection)

    def retention(self, *, jobs: timedelta | None, audit: timedelta | None) -> Retention:
        return self._store.retention(jobs=jobs, audit=audit)


def _allow(request: Request, permission: Permission) -> str:
    return "viewer"


@pytest.fixture
def reader() -> Reader:
    store = InMemoryJobStore()
    engine = Engine(store)

    @engine.processor("report.build")
    def build(payload: Any) -> None:
        pass

    @engine.processor("webhook.send", max_attempts=1)
    def send(payload: Any) -> None:
        raise ConnectionError("refused")

    for n in range(3):
        engine.enqueue("report.build", {"n": n})
    engine.enqueue("webhook.send", {"n": 1})
    engine.worker().run_until_idle()
    engine.enqueue("report.build", {"n": 9}, delay=3600)
    only: ReadsRole = ReadsOnly(store)  # mypy: the reads role, no other method
    return Reader(only)


def _get(path: str, **query: str) -> Request:
    values = {name: [value] for name, value in query.items()}
    return Request("GET", path, query=values, headers={"host": "jobs.example"})


def test_the_dashboard_reads_through_a_reads_only_store(reader: Reader) -> None:
    assert not hasattr(reader.store, "enqueue")
    assert not hasattr(reader.store, "apply")
    dashboard = Dashboard(reader, authorize=_allow)
    overview = dashboard.handle("overview", _get("/"))
    assert overview.status == 200, overview.body
    body = overview.body.decode()
    assert "report.build" in body
    assert "webhook.send" in body
    jobs = dashboard.handle("jobs", _get("/jobs", state="dead"))
    assert jobs.status == 200, jobs.body
    assert "webhook.send" in jobs.body.decode()
    dead = reader.dead_jobs()
    assert [job.kind for job in dead] == ["webhook.send"]
    job = dashboard.handle(
        "job",
        Request(
            "GET",
            f"/jobs/{dead[0].id}",
            path_params={"job_id": str(dead[0].id)},
            headers={"host": "jobs.example"},
        ),
    )
    assert job.status == 200, job.body
    # A button needs the engine: the dashboard over a reader is read-only (403).
    retry = Request(
        "POST",
        f"/jobs/{dead[0].id}/retry",
        headers={"host": "jobs.example"},
        path_params={"job_id": str(dead[0].id)},
    )
    assert dashboard.handle("retry", retry).status == 403
    assert reader.get_job(dead[0].id).state is JobState.DEAD


def test_the_exporter_reads_through_a_reads_only_store(reader: Reader) -> None:
    got = samples(exporter(reader, cache_seconds=0).exposition().decode())
    assert got[("skiplock_jobs_pending", (("kind", "report.build"), ("tenant", "")))] == 1
    assert got[("skiplock_jobs_dlq", (("kind", "webhook.send"), ("tenant", "")))] == 1
    assert got[("skiplock_up", ())] == 1
    # report.build has a pending job, but none is due: healthy without a worker.
    assert got[("skiplock_healthy", ())] == 1


def test_the_rest_api_refuses_a_reader(reader: Reader) -> None:
    # The REST API changes jobs: it needs an engine (only the dashboard reads alone).
    with pytest.raises(TypeError, match="expected a skiplock Engine"):
        RestApi(reader, authorize=_allow)
