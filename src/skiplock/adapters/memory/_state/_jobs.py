"""The memory state's ``JobsRole`` (:mod:`skiplock.ports`): enqueue, claim, start,
complete, get (``now`` is the base's, transactions are ``_transaction``'s).

Tested by the kit's ``AsyncEnqueueContract``, ``AsyncIdempotencyContract`` (its remembered
keys span ``UpkeepRole``'s purge), ``AsyncClaimContract`` (its ``next_due`` tests are
``WorkersRole``'s), ``AsyncRateContract`` (its bucket test reads ``health_snapshot``,
``ReadsRole``), ``AsyncCompletionContract``, ``AsyncResultsContract`` and
``AsyncLifecycleContract`` (which spans ``JobsRole`` and ``WorkersRole``: a claim's
heartbeat, re-registration, stale recovery).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import attrs

from skiplock.core import (
    JSONB_MAX_BYTES,
    AuditAction,
    ClaimRequest,
    Completion,
    EnqueueRequest,
    EnqueueResult,
    Job,
    JobState,
    Lease,
    Succeeded,
    charged_positions,
    encode_payload,
    first_occurrences,
    kind_caps,
    result_json,
)
from skiplock.core.store import (
    ClaimedJobs,
    ThrottleLimits,
    after_claim,
    after_outcome,
    after_start,
    charges,
    holds,
    new_job,
    rated_kinds,
    replaced_details,
    replaced_job,
    scoped_key,
    select_claim,
    throttled_request,
)

from ._base import AuditNote, public_job
from ._transaction import Scope, Transactions, audit_end

if TYPE_CHECKING:
    from collections.abc import Sequence


def _encoded(completion: Completion) -> Completion:
    """``completion`` with a success's result as the JSON text a row keeps (the core's
    :func:`after_outcome` stores ``Succeeded.result``); encoding checks it."""
    outcome = completion.outcome
    if not isinstance(outcome, Succeeded) or (
        outcome.result is None and outcome.result_json is None
    ):
        return completion
    text = result_json(outcome.result, outcome.result_json)
    return attrs.evolve(completion, outcome=Succeeded(result=text, result_json=text))


class JobsState(Transactions):
    """The enqueue path and a worker's run of a job."""

    def enqueue(
        self,
        requests: Sequence[EnqueueRequest],
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[EnqueueResult]:
        """Create jobs, all or none; idempotency keys dedupe in their scope (also within
        the batch). A hit with ``replace_pending`` on a pending job replaces its payload,
        due time and priority; a key retention purged and remembered returns the purged
        job's id. With ``audit`` each job created or replaced is audited (J10)."""
        # Encode everything first: a bad payload raises before anything is written.
        payloads = [encode_payload(r.payload, max_bytes=JSONB_MAX_BYTES) for r in requests]
        firsts = first_occurrences(requests)
        results: list[EnqueueResult] = []
        with self._writing():
            scope = self._scope(connection)
            now = scope.now
            for i, (request, payload) in enumerate(zip(requests, payloads, strict=True)):
                if firsts[i] != i:
                    results.append(EnqueueResult(id=results[firsts[i]].id, created=False))
                    continue
                key = scoped_key(request)
                owner = None if key is None else scope.key_owner(key)
                if owner is not None:
                    results.append(self._hit(scope, owner, request, payload, audit))
                    continue
                remembered = None if key is None else self._remembered.get(key)
                if remembered is not None:
                    results.append(EnqueueResult(id=remembered[0], created=False, purged=True))
                    continue
                job_id = self._next_id
                self._next_id += 1
                job = new_job(request, job_id=job_id, payload=payload, now=now)
                scope.put(job)
                scope.audit(audit, AuditAction.ENQUEUED, job)
                results.append(EnqueueResult(id=job_id, created=True, created_at=job.created_at))
        return results

    def _hit(
        self,
        scope: Scope,
        owner: int,
        request: EnqueueRequest,
        payload: str,
        audit: AuditNote | None,
    ) -> EnqueueResult:
        """The result of an enqueue whose key ``owner``'s job holds; with
        ``replace_pending`` a pending job takes the request's values first."""
        job = scope.get(owner)
        if (
            request.idempotency_conflict != "replace_pending"
            or job is None
            or job.state is not JobState.PENDING
        ):
            return EnqueueResult(id=owner, created=False)
        scope.put(replaced_job(job, request, payload=payload, now=scope.now))
        details = replaced_details(json.loads(job.payload), job.priority)
        scope.audit(audit, AuditAction.REPLACED, job, details)
        return EnqueueResult(id=owner, created=False, replaced=True)

    def claim(self, request: ClaimRequest) -> ClaimedJobs:
        """Move due pending jobs to running, in claim order, within every limit.

        The first ``request.start_now`` start (attempts += 1), the rest are held; a claim
        that takes jobs refreshes its worker's heartbeat (if registered). Its jobs carry
        their ``errors`` only with ``request.with_errors``, as a PostgreSQL claim's.
        """
        if request.limit <= 0:
            return ClaimedJobs()
        claimed: list[Job] = []
        with self._writing():
            now = self.now()
            # The buckets of cluster-wide rates: this state is the whole cluster.
            clock = now.timestamp()
            throttle = ThrottleLimits()
            if rated_kinds(request):
                request, throttle = throttled_request(
                    request,
                    now=clock,
                    pair_buckets=self._pair_buckets.items(),
                    provider_buckets=self._provider_buckets,
                )
            running: Counter[str] = Counter()
            if request.cluster_limits:
                running.update(self._jobs[i].kind for i in self._by_state[JobState.RUNNING])
            # Every running job of a concurrency key holds one of its places (any kind).
            running_keys = Counter(
                key
                for i in self._by_state[JobState.RUNNING]
                if (key := self._jobs[i].concurrency_key) is not None
            )
            pending = (self._jobs[i] for i in self._by_state[JobState.PENDING])
            key_limits = {c.key: c.limit for c in self._concurrency.values() if c.key is not None}
            chosen = select_claim(request, pending, running, now, running_keys, key_limits)
            charged = set(charged_positions([job.suspect for job in chosen], request.start_now))
            for position, job in enumerate(chosen):
                row = after_claim(job, request, start=position in charged, now=now)
                self._commit_row(row, now)
                claimed.append(public_job(row, suspect=job.suspect, errors=request.with_errors))
            if request.rates and claimed:
                pair_rows, provider_rows = charges(
                    request,
                    claimed,
                    now=clock,
                    pair_buckets=self._pair_buckets,
                    provider_buckets=self._provider_buckets,
                )
                self._pair_buckets.update(pair_rows)
                self._provider_buckets.update(provider_rows)
            worker = self._workers.get(request.worker_id)
            if claimed and worker is not None:
                worker.heartbeat_at = now
        caps = kind_caps(request, running)
        full = {
            k: "cluster_limit" for k, n in caps.items() if n <= 0 and k in request.cluster_limits
        }
        return ClaimedJobs(
            claimed,
            charged=(chosen[i].id for i in charged),
            throttled=throttle.excluded,
            throttled_kinds={k: "provider" for k in throttle.excluded_kinds} | full,
            retry_in=throttle.retry_in,
        )

    def start(self, leases: Sequence[Lease]) -> list[bool]:
        """Begin held jobs: attempts += 1 where the lease still holds (running, same
        worker, same claim); a lease given twice starts its job once."""
        started: list[bool] = []
        with self._writing():
            now = self.now()
            seen: set[int] = set()
            for lease in leases:
                job = self._jobs.get(lease.job_id)
                if lease.job_id in seen or job is None or not holds(job, lease):
                    started.append(False)
                    continue
                seen.add(lease.job_id)
                self._commit_row(after_start(job), now)
                started.append(True)
        return started

    def complete(
        self,
        completions: Sequence[Completion],
        connection: object = None,
        audit: AuditNote | None = None,
    ) -> list[bool]:
        """Apply each outcome if its lease still holds (running, same worker, same claim).
        With ``audit`` successes and moves to dead are audited (J10)."""
        # Encode results first: a bad one raises before anything is written.
        completions = [_encoded(c) for c in completions]
        applied: list[bool] = []
        with self._writing():
            scope = self._scope(connection)
            for completion in completions:
                job = scope.get(completion.lease.job_id)
                if job is None or not holds(job, completion.lease):
                    applied.append(False)
                    continue
                row = after_outcome(job, completion.outcome, scope.now)
                scope.put(row, fenced=True)
                audit_end(scope, audit, row)
                applied.append(True)
        return applied

    def get(self, job_id: int, connection: object = None) -> Job | None:
        """One job (as the given transaction sees it), or None."""
        with self._lock:
            job = self._scope(connection).get(job_id)
        return None if job is None else public_job(job)
