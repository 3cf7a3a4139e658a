"""The contract kit's model of a job store, built from the core's rules only.

:class:`StoreModel` holds what a store should hold after a sequence of port calls and
says what each call should return, using nothing but ``skiplock.core`` (the transition
table, :mod:`skiplock.core.store`'s rules, the claim charging rule): no store code.
The state machine (``_machine.py``) drives a store and this model side by side.

Times: a call applies the rules at one ``now``, the store's clock read just before the
call. A store whose clock moves on its own (a database's ``now()``) writes a time up to
the call's duration later, so :func:`differences` accepts a time that lies within
``span`` after the model's; the model then adopts the store's times (:meth:`adopt`).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import attrs

from skiplock import core
from skiplock.core import store as rules
from skiplock.core.store import ScopedKey, job_scoped_key, scoped_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


class ModelMismatch(AssertionError):
    """A store's answer or state differs from what the core's rules say."""


@attrs.define
class StoreModel:
    """The jobs (as rows: ``suspect`` holds the started mark, see
    :mod:`skiplock.core.store`), idempotency keys and worker heartbeats a store
    should hold."""

    rows: dict[int, core.Job] = attrs.Factory(dict)
    keys: dict[ScopedKey, int] = attrs.Factory(dict)
    heartbeats: dict[str, datetime] = attrs.Factory(dict)
    #: Every id a created job got: a store never gives one twice.
    ids: set[int] = attrs.Factory(set)

    # ---- reads ---------------------------------------------------------------------------

    def jobs(self) -> list[core.Job]:
        """Every job as a reader sees it, by id."""
        return [rules.read_view(self.rows[job_id]) for job_id in sorted(self.rows)]

    def get(self, job_id: int) -> core.Job | None:
        row = self.rows.get(job_id)
        return None if row is None else rules.read_view(row)

    def counts(self) -> dict[tuple[core.JobState, str, str | None], int]:
        """Jobs per (state, kind, tenant)."""
        return dict(Counter((row.state, row.kind, row.tenant) for row in self.rows.values()))

    def earliest_pending(self, kind: str, tenant: str | None) -> datetime | None:
        """The earliest due time of the pair's pending jobs (``oldest_due_age``'s base)."""
        due = [
            row.available_at
            for row in self.rows.values()
            if row.state is core.JobState.PENDING and (row.kind, row.tenant) == (kind, tenant)
        ]
        return min(due, default=None)

    def running(self, worker_id: str | None = None) -> list[core.Job]:
        """Running rows (of ``worker_id``), by id."""
        return [
            row
            for _, row in sorted(self.rows.items())
            if row.state is core.JobState.RUNNING and worker_id in (None, row.claimed_by)
        ]

    # ---- writes ----------------------------------------------------------------------------

    def enqueue(
        self,
        requests: Sequence[core.EnqueueRequest],
        results: Sequence[core.EnqueueResult],
        now: datetime,
    ) -> None:
        """Check ``results`` (the store's answer: its ids are its own) and record the jobs
        created. An idempotency key that exists in its scope, or repeats in the batch,
        creates none; with ``replace_pending`` a pending job holding it takes the
        request's payload, due time and priority."""
        _expect(len(results) == len(requests), f"{len(requests)} requests, results {results}")
        firsts = core.first_occurrences(requests)
        for i, (request, result) in enumerate(zip(requests, results, strict=True)):
            key = scoped_key(request)
            if firsts[i] != i:
                expected = core.EnqueueResult(id=results[firsts[i]].id, created=False)
                _expect(result == expected, f"request {i} repeats a key: {result} != {expected}")
                continue
            if key is not None and key in self.keys:
                held = self.rows[self.keys[key]]
                replace = (
                    request.idempotency_conflict == "replace_pending"
                    and held.state is core.JobState.PENDING
                )
                expected = core.EnqueueResult(id=held.id, created=False, replaced=replace)
                _expect(result == expected, f"request {i}'s key exists: {result} != {expected}")
                if replace:
                    self.rows[held.id] = rules.replaced_job(
                        held, request, payload=request.payload, now=now
                    )
                continue
            _expect(result.created, f"request {i} should create a job: {result}")
            _expect(result.id not in self.ids, f"id {result.id} was given before")
            self.ids.add(result.id)
            payload = request.payload
            self.rows[result.id] = rules.new_job(
                request, job_id=result.id, payload=payload, now=now
            )
            if key is not None:
                self.keys[key] = result.id

    def claim(self, request: core.ClaimRequest, now: datetime) -> rules.ClaimedJobs:
        """Claim as the core says; returns the jobs a claim returns (each with the
        ``suspect`` it had before, without result and errors) and those it charged."""
        running = Counter(row.kind for row in self.running())
        pending = [row for row in self.rows.values() if row.state is core.JobState.PENDING]
        keys = Counter(row.concurrency_key for row in self.running() if row.concurrency_key)
        chosen = rules.select_claim(request, pending, running, now, keys)
        charged = set(core.charged_positions([job.suspect for job in chosen], request.start_now))
        returned: list[core.Job] = []
        for position, job in enumerate(chosen):
            row = rules.after_claim(job, request, start=position in charged, now=now)
            self.rows[job.id] = row
            returned.append(attrs.evolve(row, suspect=job.suspect, errors=(), result=None))
        if chosen and request.worker_id in self.heartbeats:
            self.heartbeats[request.worker_id] = now
        return rules.ClaimedJobs(returned, charged=(chosen[i].id for i in charged))

    def start(self, leases: Sequence[core.Lease]) -> list[bool]:
        """Pay for held jobs' starts; per lease whether it still holds (once per job)."""
        started: list[bool] = []
        seen: set[int] = set()
        for lease in leases:
            row = self.rows.get(lease.job_id)
            if lease.job_id in seen or row is None or not rules.holds(row, lease):
                started.append(False)
                continue
            seen.add(lease.job_id)
            self.rows[row.id] = rules.after_start(row)
            started.append(True)
        return started

    def complete(self, completions: Sequence[core.Completion], now: datetime) -> list[bool]:
        """Apply each outcome whose lease holds; per completion whether it did."""
        applied: list[bool] = []
        for completion in completions:
            row = self.rows.get(completion.lease.job_id)
            if row is None or not rules.holds(row, completion.lease):
                applied.append(False)
                continue
            self.rows[row.id] = rules.after_outcome(row, completion.outcome, now)
            applied.append(True)
        return applied

    def apply(
        self, filter: core.JobFilter, event: core.Event, now: datetime, *, reset_attempts: bool
    ) -> list[int]:
        """An operator event on the matching jobs its state allows; their ids."""
        allowed = core.sources(event)
        changed: list[int] = []
        for job_id, row in sorted(self.rows.items()):
            if row.state in allowed and rules.matches(filter, row):
                self.rows[job_id] = rules.after_operator(
                    row, event, now, reset_attempts=reset_attempts
                )
                changed.append(job_id)
        return changed

    def delete(self, filter: core.JobFilter) -> list[core.Job]:
        """Delete the matching jobs that are not running; returns them."""
        doomed = [
            row
            for _, row in sorted(self.rows.items())
            if row.state is not core.JobState.RUNNING and rules.matches(filter, row)
        ]
        self._remove(row.id for row in doomed)
        return [rules.read_view(row) for row in doomed]

    def register_worker(self, worker_id: str, now: datetime) -> None:
        """Register (heartbeat now); jobs still running under the id go back to pending."""
        for row in self.running(worker_id):
            self.rows[row.id] = rules.after_release(row)
        self.heartbeats[worker_id] = now

    def heartbeat(
        self,
        worker_id: str,
        running: Iterable[int],
        now: datetime,
        *,
        release_unheld: bool = False,
    ) -> list[int] | None:
        """None for an unregistered worker, else the ids among ``running`` that no longer
        run under it; with ``release_unheld``, its jobs not in ``running`` claimed before
        its previous heartbeat go back to pending (as on register)."""
        if worker_id not in self.heartbeats:
            return None
        held, cutoff = set(running), self.heartbeats[worker_id]
        for lost in self.running(worker_id) if release_unheld else ():
            if lost.id not in held and lost.claimed_at is not None and lost.claimed_at < cutoff:
                self.rows[lost.id] = rules.after_release(lost)
        self.heartbeats[worker_id] = now
        gone = set()
        for job_id in held:
            row = self.rows.get(job_id)
            if row is None or row.state is not core.JobState.RUNNING or row.claimed_by != worker_id:
                gone.add(job_id)
        return sorted(gone)

    def unregister_worker(self, worker_id: str) -> list[int]:
        """Unregister; jobs still running under the id go back to pending (as on
        register). Returns their ids."""
        released = []
        for row in self.running(worker_id):
            self.rows[row.id] = rules.after_release(row)
            released.append(row.id)
        self.heartbeats.pop(worker_id, None)
        return sorted(released)

    def recover_stale(
        self, default_ttl: timedelta, ttls: Mapping[str, timedelta], now: datetime
    ) -> list[int]:
        """Take running jobs back from vanished workers; then drop workers silent for
        longer than every TTL. Returns the ids recovered."""
        recovered: list[int] = []
        for row in self.running():
            heartbeat = None if row.claimed_by is None else self.heartbeats.get(row.claimed_by)
            if rules.is_stale(heartbeat, ttls.get(row.kind, default_ttl), now):
                self.rows[row.id] = rules.after_recovery(row, now)
                recovered.append(row.id)
        longest = max([default_ttl, *ttls.values()])
        for worker_id, heartbeat in list(self.heartbeats.items()):
            if rules.is_stale(heartbeat, longest, now):
                del self.heartbeats[worker_id]
        return recovered

    def purge(self, older_than: timedelta, now: datetime) -> int:
        """Retention: delete the jobs that succeeded before ``now - older_than``."""
        doomed = [
            job_id for job_id, row in self.rows.items() if rules.purgeable(row, now - older_than)
        ]
        self._remove(doomed)
        return len(doomed)

    def adopt(self, jobs: Iterable[core.Job]) -> None:
        """Take the store's times: ``jobs`` (read back, already compared) become the rows,
        each keeping its started mark."""
        for job in jobs:
            self.rows[job.id] = attrs.evolve(job, suspect=self.rows[job.id].suspect)

    def _remove(self, ids: Iterable[int]) -> None:
        for job_id in list(ids):
            row = self.rows.pop(job_id)
            key = job_scoped_key(row)
            if key is not None:
                self.keys.pop(key, None)


# ---- comparing ---------------------------------------------------------------------------


def differences(actual: object, expected: object, span: timedelta, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected`` (jobs, errors, lists of them): a time
    may lie up to ``span`` after the expected one, everything else must be equal."""
    if isinstance(expected, datetime) and isinstance(actual, datetime):
        if expected <= actual <= expected + span:
            return []
        return [f"{path}: {actual.isoformat()} not within {span} after {expected.isoformat()}"]
    if attrs.has(type(expected)) and type(actual) is type(expected):
        found: list[str] = []
        for field in attrs.fields(cast("Any", type(expected))):
            found += differences(
                getattr(actual, field.name),
                getattr(expected, field.name),
                span,
                f"{path}.{field.name}",
            )
        return found
    if isinstance(expected, list | tuple) and isinstance(actual, list | tuple):
        if len(actual) != len(expected):
            return [f"{path}: {len(actual)} items, expected {len(expected)}: {_shown(actual)}"]
        found = []
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            found += differences(a, e, span, f"{path}[{i}]")
        return found
    if actual != expected:
        return [f"{path}: {_shown(actual)} != {_shown(expected)}"]
    return []


def expect_same(what: str, actual: object, expected: object, span: timedelta) -> None:
    """Raise :class:`ModelMismatch` naming every difference of ``actual``."""
    found = differences(actual, expected, span)
    if found:
        listed = "\n  ".join(found)
        raise ModelMismatch(f"{what}: the store differs from the core's model:\n  {listed}")


def row_problems(job: core.Job) -> list[str]:
    """What the core's rules never let a job be, whatever happened to it."""
    problems: list[str] = []
    if job.state is core.JobState.RUNNING and (job.claimed_by is None or job.completed_at):
        problems.append("running without a claim, or with completed_at")
    if job.state is core.JobState.PENDING and (job.claimed_by is not None or job.completed_at):
        problems.append("pending with a claim or completed_at")
    if job.state in core.FINISHED_STATES and job.completed_at is None:
        problems.append("finished without completed_at")
    if not 0 <= job.attempts <= job.claims:
        problems.append(f"attempts {job.attempts} not within 0..claims ({job.claims})")
    if len(job.errors) > core.MAX_RECORDED_ERRORS:
        problems.append(f"{len(job.errors)} recorded errors")
    if job.suspect and job.state is not core.JobState.PENDING:
        problems.append("a suspect that is not pending")
    return problems


def _shown(value: object, limit: int = 200) -> str:
    """``repr(value)``, shortened to about ``limit`` characters."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}…{text[-limit // 2 :]} ({len(text)} characters)"


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ModelMismatch(message)
