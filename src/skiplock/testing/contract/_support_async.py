"""Helpers shared by the contract kit's topic mixins (async source; ``_support.py`` is its
generated twin)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from skiplock.core import (
    Bury,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    Event,
    Job,
    JobFilter,
    JobState,
    Outcome,
    Page,
    Succeeded,
)

from .capabilities import Capabilities

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.ports import AsyncJobStore

_KIND = "contract.job"
WORKER = "contract-worker-1"
TRACE = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
PAYLOAD = {
    "to": "someone@example.com",
    "n": 3,
    "tags": ["a", "b"],
    "nested": {"ok": True, "nothing": None},
    "text": "grüße ✓",
}
_unique = itertools.count(1)


class Rollback(Exception):
    """Raised inside a transaction to roll it back."""


def requires(*capabilities: str) -> pytest.MarkDecorator:
    """Mark a test as needing store capabilities (skipped when one is off)."""
    return pytest.mark.skiplock_requires(*capabilities)


def request(kind: str = _KIND, **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(kind=kind, **fields)


def claim_request(worker_id: str = WORKER, limit: int = 100, **fields: Any) -> ClaimRequest:
    return ClaimRequest(worker_id=worker_id, limit=limit, **fields)


def fresh_kind() -> str:
    """A kind no other job in the test has, to claim exactly one job."""
    return f"contract.k{next(_unique)}"


async def enqueue(store: AsyncJobStore, kind: str = _KIND, **fields: Any) -> int:
    [result] = await store.enqueue([request(kind, **fields)])
    assert result.created
    return result.id


async def get(store: AsyncJobStore, job_id: int) -> Job:
    job = await store.get(job_id)
    assert job is not None, f"job {job_id} is gone"
    return job


async def claim_one(store: AsyncJobStore, kind: str, worker_id: str = WORKER) -> Job:
    jobs = await store.claim(claim_request(worker_id, limit=1, kinds=frozenset({kind})))
    assert len(jobs) == 1, f"expected to claim one {kind!r} job, got {jobs}"
    return jobs[0]


async def running(store: AsyncJobStore, worker_id: str = WORKER, **fields: Any) -> Job:
    """A fresh job, claimed by ``worker_id``."""
    kind = fresh_kind()
    await enqueue(store, kind, **fields)
    return await claim_one(store, kind, worker_id)


async def finish(store: AsyncJobStore, job: Job, outcome: Outcome) -> None:
    assert await store.complete([Completion(lease=job.lease, outcome=outcome)]) == [True]


async def in_state(store: AsyncJobStore, state: JobState) -> int:
    """A fresh job brought to ``state`` through the port."""
    if state is JobState.PENDING:
        return await enqueue(store, fresh_kind())
    if state is JobState.CANCELLED or state is JobState.FAILED:
        job_id = await enqueue(store, fresh_kind())
        event = Event.CANCEL if state is JobState.CANCELLED else Event.MARK_FAILED
        assert await store.apply(JobFilter(ids=frozenset({job_id})), event) == [job_id]
        return job_id
    job = await running(store)
    if state is JobState.SUCCEEDED:
        await finish(store, job, Succeeded())
    elif state is JobState.DEAD:
        await finish(store, job, Bury(error="buried by the contract"))
    return job.id


def ids(jobs: Sequence[Job]) -> list[int]:
    return [job.id for job in jobs]


async def all_jobs(store: AsyncJobStore) -> list[Job]:
    return await store.list_jobs(JobFilter(), Page(limit=10_000))


class AsyncContractBase:
    """What every topic mixin may rely on: the capabilities of the store under test."""

    #: What the store under test supports; tests needing a missing capability are skipped.
    capabilities: ClassVar[Capabilities] = Capabilities()
