"""Multi-statement operations as step generators, driven by every PG driver.

Each generator yields :class:`~._migrate.Step` objects (neutral SQL plus parameters); the
driver runs them in order on one connection and sends back the rows as dicts. Running a
generator inside one transaction is the driver's job; the docstrings say when it is
required.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from skiplock.core import (
    Bury,
    ClaimRequest,
    Completion,
    EnqueueBatch,
    EnqueueRequest,
    EnqueueResult,
    Job,
    Lease,
    StoreError,
    UndecodableRowError,
    capped_kinds,
    claim_order,
    first_occurrences,
    kind_caps,
    pair_caps,
    undecodable_error,
)
from skiplock.core.store import (
    ClaimedJobs,
    ScopedKey,
    ThrottleLimits,
    charges,
    claim_is_serialized,
    counter_problem,
    rated_kinds,
    rated_providers,
    scoped_key,
    throttled_request,
)

from ._migrate import Rows, Step
from ._rows import AuditNote, duration_us, job_from_row, utc
from ._rows_jobs import (
    buckets_from_rows,
    charge_params,
    claim_params,
    complete_params,
    enqueue_one_params,
    enqueue_params,
    pair_params,
)
from ._rows_workers import recover_params, silent_workers_params
from ._sql import lock_key, neutral_query

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Mapping, Sequence
    from datetime import timedelta

    from skiplock.core.store import TokenBucket

logger = logging.getLogger("skiplock.store")

#: How often enqueue re-inserts a keyed job whose conflicting row vanished meanwhile.
_ENQUEUE_ROUNDS = 3


def enqueue_needs_transaction(requests: Sequence[EnqueueRequest]) -> bool:
    """Without idempotency keys enqueue is a single statement (atomic by itself)."""
    if isinstance(requests, EnqueueBatch):
        return requests.keyed  # its column, without a request object per job
    return any(r.idempotency_key is not None for r in requests)


def _audited(schema: str, name: str, params: Mapping[str, Any], audit: AuditNote | None) -> Step:
    """Query ``name``, or with ``audit`` its ``<name>_audited`` variant, which writes (or
    returns, for a sink) the audit events of its change in the same statement (J10)."""
    if audit is None:
        return Step(neutral_query(name, schema), params)
    return Step(neutral_query(f"{name}_audited", schema), {**params, **audit.params()})


def enqueue_steps(
    schema: str, requests: Sequence[EnqueueRequest], audit: AuditNote | None = None
) -> Generator[Step, Rows, list[EnqueueResult]]:
    """Insert the jobs in one statement; keys that exist in their scope resolve to the
    existing job (or to a purged job whose key retention remembers).

    Duplicates within the batch insert once (core rule). Conflicting keys with
    ``replace_pending`` replace their pending jobs in a second statement; the others are
    looked up in another (:func:`_held_keys`). Run in a transaction when
    :func:`enqueue_needs_transaction` says so. With ``audit`` each job created is
    audited by the statement that inserts it.
    """
    if not requests:
        return []
    if len(requests) == 1 and requests[0].idempotency_key is None:
        rows = yield _audited(schema, "enqueue_one", enqueue_one_params(requests[0]), audit)
        if audit is not None:
            created_at = rows[0]["audit_at"]  # the job's created_at (its audit event's time)
            audit.collect(rows)
        else:
            created_at = rows[0]["created_at"]
        return [EnqueueResult(id=int(rows[0]["id"]), created=True, created_at=utc(created_at))]
    batch = EnqueueBatch.of(requests)
    if not batch.keyed:  # the bulk case: every job is new, one statement, no lookups
        rows = yield _audited(schema, "enqueue_new", enqueue_params(batch), audit)
        if audit is None:
            new_ids = rows[0]["ids"] or []  # NULL: nothing inserted (checked below)
        else:
            audit.collect(rows)
            new_ids = [row["id"] for row in rows]
        if len(new_ids) != len(batch):
            raise StoreError(f"enqueue: {len(batch)} jobs sent, {len(new_ids)} created")
        return [EnqueueResult(id=int(i), created=True) for i in new_ids]
    first = first_occurrences(requests)
    todo = [i for i, f in enumerate(first) if f == i]
    ids: dict[int, int] = {}
    created: set[int] = set()
    replaced: set[int] = set()
    purged: set[int] = set()
    for _ in range(_ENQUEUE_ROUNDS):
        todo_batch = EnqueueBatch.of([requests[i] for i in todo])
        rows = yield _audited(schema, "enqueue", enqueue_params(todo_batch), audit)
        if audit is not None:
            audit.collect(rows)
        conflicts: list[int] = []
        for row in rows:
            index = todo[int(row["ord"]) - 1]
            if row["id"] is None:
                conflicts.append(index)
            else:
                ids[index] = int(row["id"])
                created.add(index)
        replacing = [i for i in conflicts if requests[i].idempotency_conflict == "replace_pending"]
        if replacing:
            replace = EnqueueBatch.of([requests[i] for i in replacing])
            rows = yield _audited(schema, "replace_pending", enqueue_params(replace), audit)
            if audit is not None:
                audit.collect(rows)
            for row in rows:
                index = replacing[int(row["ord"]) - 1]
                ids[index] = int(row["id"])
                replaced.add(index)
            conflicts = [i for i in conflicts if i not in replaced]
        todo = []
        if conflicts:
            todo = yield from _held_keys(schema, requests, conflicts, ids, purged)
        if not todo:
            break
    if todo:
        raise StoreError("enqueue: idempotency keys kept conflicting with vanishing jobs")
    return [
        EnqueueResult(
            id=ids[first[i]],
            created=i in created,
            replaced=i in replaced,
            purged=first[i] in purged,
        )
        for i in range(len(requests))
    ]


def _held_keys(
    schema: str,
    requests: Sequence[EnqueueRequest],
    conflicts: list[int],
    ids: dict[int, int],
    purged: set[int],
) -> Generator[Step, Rows, list[int]]:
    """Resolve the requests at ``conflicts`` (their key exists) to the job holding the
    key, or the purged job whose key retention remembers; returns those whose job
    vanished meanwhile (to insert again). A fresh statement: its snapshot sees a job a
    concurrent transaction committed while the insert waited for it."""
    keys = sorted({k for i in conflicts if (k := requests[i].idempotency_key) is not None})
    rows = yield Step(neutral_query("ids_by_idempotency_key", schema), {"keys": keys})
    # A live job wins over a remembered key (a key is remembered only once its job is gone).
    found: dict[ScopedKey, tuple[int, bool]] = {}
    for row in sorted(rows, key=lambda r: not r["purged"]):
        scoped = (row["idempotency_key"], row["idempotency_scope"])
        found[scoped] = (int(row["id"]), bool(row["purged"]))
    vanished: list[int] = []
    for index in conflicts:
        scoped_request = scoped_key(requests[index])
        hit = None if scoped_request is None else found.get(scoped_request)
        if hit is None:  # deleted between the insert and the lookup: insert it again
            vanished.append(index)
            continue
        ids[index] = hit[0]
        if hit[1]:
            purged.add(index)
    return vanished


def cluster_lock_key(schema: str, kind: str) -> int:
    """Advisory-lock key guarding count-and-claim of a cluster-limited kind."""
    return lock_key(schema, "cluster", kind)


def provider_lock_key(schema: str, provider: str) -> int:
    """Advisory-lock key guarding the bucket of a provider's cap (cluster-wide rates)."""
    return lock_key(schema, "provider", provider)


def claim_needs_transaction(request: ClaimRequest) -> bool:
    """A claim of cluster-limited or cluster-rate-limited kinds takes advisory locks that
    must span the claim (and the charge of its buckets)."""
    return claim_is_serialized(request)


def claim_steps(
    schema: str, request: ClaimRequest, audit: AuditNote | None = None
) -> Generator[Step, Rows, ClaimedJobs]:
    """Claim due jobs for ``request.worker_id``; one statement unless kinds are capped.

    Cluster-limited and rate-limited kinds (``request.rates``): lock each kind, and each
    provider of a capped kind (sorted keys: no deadlock between claimers). Then read the
    shared token buckets (a fresh snapshot after the locks, so it includes what the
    previous holder charged) and narrow the claim to what they hold
    (:func:`~skiplock.core.store.throttled_request`); count what runs now of the
    cluster-limited kinds and claim at most limit - running; charge the buckets for the
    jobs taken. The locks are released at commit, after this claim is visible. Capped
    kinds or binding pair limits take the ``claim_capped`` statement;
    ``request.with_errors`` the ``_errors`` variant of either. Run in a
    transaction when :func:`claim_needs_transaction` says so. With ``audit`` a row
    buried as undecodable is audited (``job_dlq``) by the statement that buries it.
    """
    if request.limit <= 0:
        return ClaimedJobs()
    rated = rated_kinds(request)
    providers = rated_providers(request, rated)
    cluster = [k for k in capped_kinds(request) if k in request.cluster_limits]
    if rated or cluster:
        keys = {cluster_lock_key(schema, k) for k in (*cluster, *rated)}
        keys |= {provider_lock_key(schema, p) for p in providers}
        yield Step(neutral_query("lock_kinds", schema), {"keys": sorted(keys)})
    throttle = ThrottleLimits()
    clock = 0.0
    pair_buckets: dict[tuple[str, str | None], TokenBucket] = {}
    provider_buckets: dict[str, TokenBucket] = {}
    if rated:
        rows = yield Step(
            neutral_query("rate_buckets", schema), {"kinds": rated, "providers": providers}
        )
        clock, pair_buckets, provider_buckets = buckets_from_rows(rows)
        request, throttle = throttled_request(
            request, now=clock, pair_buckets=pair_buckets.items(), provider_buckets=provider_buckets
        )
    limited = capped_kinds(request)
    running: dict[str, int] = {}
    cluster = [k for k in limited if k in request.cluster_limits]
    if cluster:
        rows = yield Step(neutral_query("running_counts", schema), {"kinds": cluster})
        running = {r["kind"]: int(r["running"]) for r in rows}
    caps = kind_caps(request, running)
    full = {k for k, cap in caps.items() if cap <= 0}
    throttled_kinds = {k: "provider" for k in throttle.excluded_kinds}
    throttled_kinds |= {k: "cluster_limit" for k in cluster if k in full}

    def claimed(jobs: Sequence[Job] = (), charged: Iterable[int] = ()) -> ClaimedJobs:
        return ClaimedJobs(
            jobs,
            charged=charged,
            throttled=throttle.excluded,
            throttled_kinds=throttled_kinds,
            retry_in=throttle.retry_in,
        )

    if request.kinds is not None and request.kinds <= full | request.excluded_kinds:
        return claimed()
    pairs = pair_caps(request, caps)
    params: dict[str, Any] = claim_params(request, pairs)
    capped_pairs = pair_params(pairs)
    # The *_errors variants also return each job's recorded errors, when asked: a claim
    # that does not ask runs the statement it always ran.
    errors = "_errors" if request.with_errors else ""
    if not limited and not capped_pairs["pair_kinds"]:
        rows = yield Step(neutral_query(f"claim{errors}", schema), params)
    else:
        open_kinds = [k for k in limited if k not in full]
        params["capped_kinds"] = open_kinds
        params["caps"] = [caps[k] for k in open_kinds]
        params["excluded_kinds"] = sorted(request.excluded_kinds | full)
        params |= capped_pairs
        rows = yield Step(neutral_query(f"claim_capped{errors}", schema), params)
    jobs, charged = yield from _claimed(schema, request, rows, audit)
    if rated and jobs:
        pair_rows, provider_rows = charges(
            request,
            jobs,
            now=clock,
            pair_buckets=pair_buckets,
            provider_buckets=provider_buckets,
        )
        if pair_rows or provider_rows:
            yield Step(
                neutral_query("charge_rate_buckets", schema),
                charge_params(pair_rows, provider_rows),
            )
    return claimed(jobs, charged)


def _claimed(
    schema: str, request: ClaimRequest, rows: Rows, audit: AuditNote | None
) -> Generator[Step, Rows, tuple[list[Job], set[int]]]:
    """The claimed rows as jobs in claim order, and the ids of those the statement
    charged; rows that cannot become a runnable job are moved to ``dead`` in the same
    claim, so none stays ``running`` unknown to its worker (X4).

    Such a row (written around enqueue's validation) is buried with a fenced ``complete``
    naming the column (core's :func:`~skiplock.core.undecodable_error`). The jobs kept
    keep the charge the statement gave them (its ``charged`` column): the claim reports
    what it charged, so nothing is re-charged when a buried row, or a row the claim
    locked but could not update (``claim_candidates`` reads with a snapshot of its own),
    shifts the positions. A charged suspect is still charged alone (the statement charges
    no other job beside it).
    """
    jobs: list[Job] = []
    charged: set[int] = set()
    buried: list[Completion] = []
    for row in rows:
        try:
            job = job_from_row(row)
            problem = counter_problem(job)
            if problem is not None:
                raise UndecodableRowError(job.id, *problem)
        except UndecodableRowError as exc:
            logger.warning("%s; moved to dead", exc)
            lease = Lease(
                job_id=exc.job_id,
                worker_id=request.worker_id,
                attempt=int(row["attempts"]),
                claim=int(row["claims"]),
            )
            error = undecodable_error(exc.column, exc.problem)
            buried.append(Completion(lease=lease, outcome=Bury(error=error)))
            continue
        jobs.append(job)
        if row["charged"]:
            charged.add(job.id)
    # RETURNING has no order.
    jobs.sort(key=claim_order)
    if buried:
        rows = yield _audited(schema, "complete", complete_params(buried), audit)
        if audit is not None:
            audit.collect(rows)
    return jobs, charged


def maintenance_lock_key(schema: str, task: str) -> int:
    """Advisory-lock key so one node at a time runs a maintenance task (J13)."""
    return lock_key(schema, "maintenance", task)


def recover_steps(
    schema: str,
    default_ttl: timedelta,
    ttls: Mapping[str, timedelta],
    audit: AuditNote | None = None,
) -> Generator[Step, Rows, list[int]]:
    """Recover stale claims unless another node is at it, then delete the rows of
    workers silent for longer than every TTL. Run in a transaction. With ``audit`` each
    job moved to dead is audited by the recovering statement."""
    rows = yield Step(
        neutral_query("try_lock", schema), {"key": maintenance_lock_key(schema, "recover")}
    )
    if not rows[0]["locked"]:
        return []
    rows = yield _audited(schema, "recover_stale", recover_params(default_ttl, ttls), audit)
    if audit is not None:
        audit.collect(rows)
    yield Step(
        neutral_query("delete_silent_workers", schema), silent_workers_params(default_ttl, ttls)
    )
    return sorted(int(r["id"]) for r in rows)


def purge_batch_steps(
    schema: str,
    *,
    older_than: timedelta,
    archive: bool,
    batch_size: int,
    key_window: timedelta | None = None,
) -> Generator[Step, Rows, int | None]:
    """One retention batch; None when another node holds the lock. Run in a transaction.

    With ``key_window`` the purged jobs' idempotency keys are remembered; up to
    ``batch_size`` keys remembered longer than it ago (without: any) are forgotten.
    """
    rows = yield Step(
        neutral_query("try_lock", schema), {"key": maintenance_lock_key(schema, "purge")}
    )
    if not rows[0]["locked"]:
        return None
    rows = yield Step(
        neutral_query("purge", schema),
        {
            "older_than_us": duration_us(older_than),
            "archive": archive,
            "batch_size": batch_size,
            "remember_keys": key_window is not None,
        },
    )
    window = None if key_window is None else duration_us(key_window)
    yield Step(
        neutral_query("forget_idempotency_keys", schema),
        {"window_us": window, "batch_size": batch_size},
    )
    return int(rows[0]["purged"])


def purge_audit_batch_steps(
    schema: str, *, older_than: timedelta, batch_size: int
) -> Generator[Step, Rows, int | None]:
    """One retention batch of the audit trail (J10): its oldest events; None when
    another node holds the lock. Run in a transaction."""
    rows = yield Step(
        neutral_query("try_lock", schema),
        {"key": maintenance_lock_key(schema, "purge_audit")},
    )
    if not rows[0]["locked"]:
        return None
    rows = yield Step(
        neutral_query("purge_audit", schema),
        {"older_than_us": duration_us(older_than), "batch_size": batch_size},
    )
    return int(rows[0]["purged"])
