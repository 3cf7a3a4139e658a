"""A Hypothesis state machine that checks a store against the core's model.

:func:`check_store_against_model` drives a (sync) store with random sequences of port
calls — enqueue (priorities, tenants, idempotency keys in both scopes and with both
conflict policies, delays), claim (limits, start now or hold, policies), start, complete
with every outcome, fail (the core's failure decision), register/heartbeat/unregister
workers, recover stale claims, cancel, mark failed, replay, delete, purge, and moving a
controllable clock — and after every step
compares what the store answered and holds (``get``, ``list_jobs``, ``counts``) with
:class:`~._model.StoreModel`, which applies the core's rules only.

An async store runs it too: the kit's async test hands it a blocking view of the store
(each call runs on the store's event loop) from a worker thread. Needs Hypothesis
(``skiplock[testing]``), imported only when the check runs.
"""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from skiplock import core
from skiplock.core.rules import FailureKind, decide_failure

from ._model import ModelMismatch, StoreModel, expect_same, row_problems

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.ports import JobStore
    from skiplock.testing import FakeClock

_T = TypeVar("_T")

_ZERO = timedelta(0)
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)

#: Each machine run's kinds, keys and worker ids start with their own prefix, so runs
#: never see each other's jobs.
_runs = itertools.count(1)


def _sometimes(values: st.SearchStrategy[_T]) -> st.SearchStrategy[_T | None]:
    """None three times in four, else one of ``values``."""
    return st.one_of(st.none(), st.none(), st.none(), values)


_delays = st.sampled_from([_ZERO, _SECOND, 5 * _SECOND, _HOUR])
_errors = st.sampled_from(["boom", "x" * 5000, "nul \x00 byte", "ünïcødé ✓\nline two"])
_results = st.sampled_from([None, 0, "done", [1, "two"], {"ok": True, "n": None}])
_payloads = st.sampled_from([None, 1, "text", [1, 2], {"a": {"b": [True]}}])
_outcomes: st.SearchStrategy[core.Outcome] = st.one_of(
    st.builds(core.Succeeded, result=_results),
    st.builds(core.Retry, delay=_delays, error=_errors),
    st.builds(core.Bury, error=_errors),
    st.builds(
        core.Release, delay=_delays, error=st.one_of(st.none(), _errors), refund=st.booleans()
    ),
)


@attrs.frozen
class _Failure:
    """A failed attempt, turned into an outcome by the core's ``decide_failure``."""

    kind: FailureKind
    error: str


_failures = st.builds(
    _Failure, kind=st.sampled_from([FailureKind.ERROR, FailureKind.TIMEOUT]), error=_errors
)
#: How a run ends: an outcome as given, or a failure for the core to decide.
_ends: st.SearchStrategy[core.Outcome | _Failure] = st.one_of(_outcomes, _failures)
_request_specs = st.fixed_dictionaries(
    {
        "kind": st.integers(0, 1),
        "priority": st.sampled_from([0, 0, 5, -1]),
        "tenant": st.sampled_from([None, "t1", "t2"]),
        "delay": _sometimes(_delays),
        "max_attempts": st.integers(1, 3),
        "explicit": st.booleans(),
        "key": st.one_of(st.none(), st.integers(0, 2)),
        "scope": st.sampled_from(["global", "global", "tenant"]),
        "conflict": st.sampled_from(["ignore", "ignore", "replace_pending"]),
        "payload": _payloads,
    }
)


def check_store_against_model(
    store: JobStore, *, clock: FakeClock | None, max_examples: int, steps: int
) -> None:
    """Run the state machine on ``store``: ``max_examples`` random sequences of at most
    ``steps`` port calls each, derandomized (the same sequences every run).

    ``clock`` is the store's clock when the test controls it (a FakeClock): the machine
    then also moves it and uses short delays and TTLs. Without one (a database's clock)
    it uses only delays, TTLs and ages of zero or a day, which real time cannot cross
    during the run. Raises :class:`~._model.ModelMismatch` (an AssertionError) with the
    shortest failing sequence Hypothesis found.
    """
    budget = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    # Hypothesis takes any factory of machines; its annotation says a class.
    factory = cast("type[StoreMachine]", lambda: StoreMachine(store, clock))
    run_state_machine_as_test(factory, settings=budget)


class StoreMachine(RuleBasedStateMachine):
    """Random port calls on a store, each checked against :class:`StoreModel`."""

    def __init__(self, store: JobStore, clock: FakeClock | None) -> None:
        super().__init__()
        self.store = store
        self.clock = clock
        run = next(_runs)
        self.kinds = (f"model{run}.a", f"model{run}.b")
        self.workers = tuple(f"model{run}-worker{i}" for i in range(3))
        self.keys = tuple(f"model{run}:key{i}" for i in range(3))
        self.model = StoreModel()
        #: Leases of the claims so far (most recent last): current ones and stale ones.
        self.leases: list[core.Lease] = []
        #: How long the last port call took on the store's clock (0 on a controllable one):
        #: how much later than the model's its times may be.
        self.step = _ZERO
        #: The longest port call since the last check of the whole store.
        self.span = _ZERO
        self.touched: set[int] = set()

    # ---- helpers ---------------------------------------------------------------------------

    def _step(self, call: Callable[[], _T]) -> tuple[_T, datetime]:
        """Run one port call; its result and the store's now before it."""
        before = self.store.now()
        result = call()
        self.step = self.store.now() - before
        self.span = max(self.span, self.step)
        return result, before

    def _delay(self, delay: timedelta) -> timedelta:
        """``delay`` on a controllable clock, else zero or an hour (see module doc)."""
        if self.clock is not None:
            return delay
        return _ZERO if delay < _HOUR else _HOUR

    def _span(self, value: timedelta) -> timedelta:
        """A TTL or age: as drawn on a controllable clock, else zero or a day."""
        if self.clock is not None:
            return value
        return _ZERO if value == _ZERO else _DAY

    def _lease(self) -> st.SearchStrategy[core.Lease]:
        """A lease of a job running now, or one of the latest claims' (maybe stale)."""
        recent = st.sampled_from(self.leases[-8:])
        current = [row.lease for row in self.model.running()]
        return st.one_of(st.sampled_from(current), recent) if current else recent

    def _filter(self, data: st.DataObject) -> core.JobFilter:
        """Mostly one job (by id); sometimes every job of a state, a tenant, a priority
        range or the kinds."""
        kinds = frozenset(data.draw(st.sampled_from([self.kinds, self.kinds[:1]]), "kinds"))
        which = data.draw(st.sampled_from(["id", "id", "id", "state", "tenant", "priority", "all"]))
        if which == "id" and self.model.ids:
            job_id = data.draw(st.sampled_from(sorted(self.model.ids)), "id")
            return core.JobFilter(kinds=kinds, ids=frozenset({job_id}))
        if which == "state":
            state = data.draw(st.sampled_from(list(core.JobState)), "state")
            return core.JobFilter(kinds=kinds, states=frozenset({state}))
        if which == "tenant":
            return core.JobFilter(kinds=kinds, tenants=frozenset({"t1"}))
        if which == "priority":
            return core.JobFilter(kinds=kinds, priority_min=1, priority_max=9)
        return core.JobFilter(kinds=kinds)

    def _complete(self, completions: list[core.Completion]) -> None:
        completions = [
            core.Completion(lease=c.lease, outcome=self._outcome(c.outcome)) for c in completions
        ]
        applied, now = self._step(lambda: self.store.complete(completions))
        expect_same("complete", applied, self.model.complete(completions, now), self.step)
        self.touched |= {c.lease.job_id for c in completions}

    def _decided(self, lease: core.Lease, outcome: core.Outcome | _Failure) -> core.Outcome:
        """``outcome``, or for a failure what the core's failure decision makes of it (the
        worker's report of a failed attempt)."""
        if not isinstance(outcome, _Failure):
            return outcome
        row = self.model.rows.get(lease.job_id)
        return decide_failure(
            outcome.kind,
            outcome.error,
            attempt=max(lease.attempt, 1),
            max_attempts=1 if row is None else row.max_attempts,
            retry=core.RetryPolicy(base=_SECOND, cap=_MINUTE),
            jitter=0.5,
        )

    def _outcome(self, outcome: core.Outcome) -> core.Outcome:
        """``outcome`` with its delay as :meth:`_delay` allows."""
        if isinstance(outcome, core.Retry | core.Release):
            return attrs.evolve(outcome, delay=self._delay(outcome.delay))
        return outcome

    # ---- rules -------------------------------------------------------------------------------

    @initialize(specs=st.lists(_request_specs, min_size=1, max_size=4))
    def first_jobs(self, specs: list[dict[str, Any]]) -> None:
        self.enqueue(specs)

    @rule(specs=st.lists(_request_specs, min_size=1, max_size=3))
    def enqueue(self, specs: list[dict[str, Any]]) -> None:
        requests = [
            core.EnqueueRequest(
                kind=self.kinds[spec["kind"]],
                payload=spec["payload"],
                priority=spec["priority"],
                tenant=spec["tenant"],
                delay=None if spec["delay"] is None else self._delay(spec["delay"]),
                max_attempts=spec["max_attempts"],
                explicit_max_attempts=spec["explicit"],
                idempotency_key=None if spec["key"] is None else self.keys[spec["key"]],
                idempotency_scope=spec["scope"],
                idempotency_conflict=spec["conflict"],
            )
            for spec in specs
        ]
        results, now = self._step(lambda: self.store.enqueue(requests))
        self.model.enqueue(requests, results, now)
        self.touched |= {result.id for result in results}

    @rule(
        worker=st.integers(0, 2),
        limit=st.integers(1, 4),
        kinds=st.sampled_from(["both", "both", "both", "a", "b"]),
        tenants=st.sampled_from([None, None, None, ("t1",), ("t1", "t2")]),
        start_now=st.one_of(st.none(), st.integers(0, 4)),
        policy=st.one_of(st.none(), st.integers(1, 3)),
        kind_limit=_sometimes(st.integers(0, 2)),
        cluster_limit=_sometimes(st.integers(0, 3)),
        pair_limit=_sometimes(st.integers(0, 2)),
        then=st.sampled_from(["hold", "start", "finish", "finish"]),
        data=st.data(),
    )
    def claim(
        self,
        worker: int,
        limit: int,
        kinds: str,
        tenants: tuple[str, ...] | None,
        start_now: int | None,
        policy: int | None,
        kind_limit: int | None,
        cluster_limit: int | None,
        pair_limit: int | None,
        then: str,
        data: st.DataObject,
    ) -> None:
        """Claim; ``then`` leave the jobs as they are, start them, or finish them: one
        outcome each (or a failure, see :meth:`complete`) in one call."""
        a, b = self.kinds
        request = core.ClaimRequest(
            worker_id=self.workers[worker],
            limit=limit,
            kinds=frozenset({"both": (a, b), "a": (a,), "b": (b,)}[kinds]),
            tenants=None if tenants is None else frozenset(tenants),
            start_now=start_now,
            max_attempts={} if policy is None else {a: policy},
            kind_limits={} if kind_limit is None else {a: kind_limit},
            cluster_limits={} if cluster_limit is None else {b: cluster_limit},
            pair_limits={} if pair_limit is None else {(a, "t1"): pair_limit},
        )
        claimed, now = self._step(lambda: self.store.claim(request))
        expected = self.model.claim(request, now)
        expect_same("claim", claimed, expected, self.step)
        # What the claim says it charged is what it did: the worker runs those.
        expect_same("claim charged", sorted(claimed.charged), sorted(expected.charged), self.step)
        self.leases += [job.lease for job in claimed]
        self.touched |= {job.id for job in claimed}
        leases = [job.lease for job in claimed]
        if not leases or then == "hold":
            return
        if then == "start":
            started, _ = self._step(lambda: self.store.start(leases))
            expect_same("start", started, self.model.start(leases), self.step)
            return
        ends = data.draw(st.lists(_ends, min_size=len(leases), max_size=len(leases)), "outcomes")
        self._complete(
            [
                core.Completion(lease, self._decided(lease, end))
                for lease, end in zip(leases, ends, strict=True)
            ]
        )

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        leases = data.draw(st.lists(self._lease(), min_size=1, max_size=3))
        started, _ = self._step(lambda: self.store.start(leases))
        expect_same("start", started, self.model.start(leases), self.step)
        self.touched |= {lease.job_id for lease in leases}

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        """Outcomes of one or two jobs: each outcome as given, or a failed attempt as the
        worker reports it (the core's failure decision)."""
        picks = data.draw(
            st.lists(
                st.tuples(self._lease(), _ends),
                min_size=1,
                max_size=2,
                unique_by=lambda pick: pick[0].job_id,  # one outcome per job and call
            )
        )
        self._complete([core.Completion(lease, self._decided(lease, end)) for lease, end in picks])

    @rule(worker=st.integers(0, 2), action=st.sampled_from(["register", "beat", "leave"]))
    def worker(self, worker: int, action: str) -> None:
        """Register a worker (which releases what still runs under its id), heart-beat
        (asking about the jobs it holds and one more), or unregister it."""
        worker_id = self.workers[worker]
        if action == "register":
            info = core.WorkerInfo(id=worker_id, host="model", pid=1)
            _, now = self._step(lambda: self.store.register_worker(info))
            self.touched |= {row.id for row in self.model.running(worker_id)}
            self.model.register_worker(worker_id, now)
        elif action == "beat":
            held = [row.id for row in self.model.running(worker_id)]
            running = [*held, max(self.model.ids, default=0)]
            gone, now = self._step(lambda: self.store.heartbeat(worker_id, running))
            expected = self.model.heartbeat(worker_id, running, now)
            expect_same("heartbeat", gone, expected, self.step)
        else:
            released, _ = self._step(lambda: self.store.unregister_worker(worker_id))
            self.touched |= {row.id for row in self.model.running(worker_id)}
            expected = self.model.unregister_worker(worker_id)
            expect_same("unregister_worker", sorted(released), expected, self.step)

    @rule(ttl=st.sampled_from([_ZERO, _SECOND, _MINUTE, _DAY]), per_kind=st.booleans())
    def recover_stale(self, ttl: timedelta, per_kind: bool) -> None:
        default = self._span(ttl)
        ttls = {self.kinds[0]: self._span(_MINUTE)} if per_kind else {}
        ids, now = self._step(lambda: self.store.recover_stale(default_ttl=default, ttls=ttls))
        expected = self.model.recover_stale(default, ttls, now)
        expect_same("recover_stale", sorted(ids), expected, self.step)
        self.touched |= set(ids)

    @rule(
        event=st.sampled_from([core.Event.CANCEL, core.Event.MARK_FAILED, core.Event.REPLAY]),
        reset=st.booleans(),
        data=st.data(),
    )
    def operator(self, event: core.Event, reset: bool, data: st.DataObject) -> None:
        """Cancel, mark failed or replay (``reset_attempts`` as drawn) what a filter
        selects."""
        job_filter = self._filter(data)
        changed, now = self._step(lambda: self.store.apply(job_filter, event, reset_attempts=reset))
        expected = self.model.apply(job_filter, event, now, reset_attempts=reset)
        expect_same(f"apply({event.value})", sorted(changed), expected, self.step)
        self.touched |= set(changed)

    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        job_filter = self._filter(data)
        deleted, _ = self._step(lambda: self.store.delete(job_filter))
        expected = self.model.delete(job_filter)
        expect_same("delete", sorted(deleted, key=lambda j: j.id), expected, self.step)
        self.touched |= {job.id for job in expected}

    @rule(
        older_than=st.sampled_from([_ZERO, _SECOND, _MINUTE, _DAY]),
        batch_size=st.integers(1, 3),
        wait=st.booleans(),
    )
    def purge(self, older_than: timedelta, batch_size: int, wait: bool) -> None:
        """Retention (``wait``: a second later, on a controllable clock). The machine's
        jobs are the only ones in the store (each run removes its own at the end), so the
        count is theirs."""
        if wait and self.clock is not None:
            self.clock.advance(_SECOND)
        age = self._span(older_than)
        before = set(self.model.rows)
        purged, now = self._step(
            lambda: self.store.purge(older_than=age, archive=False, batch_size=batch_size)
        )
        expect_same("purge", purged, self.model.purge(age, now), self.step)
        self.touched |= before - set(self.model.rows)

    @precondition(lambda self: self.clock is not None)
    @rule(by=st.sampled_from([_SECOND, 5 * _SECOND, _MINUTE, _HOUR]))
    def advance_clock(self, by: timedelta) -> None:
        assert self.clock is not None
        self.clock.advance(by)

    # ---- invariants --------------------------------------------------------------------------

    @invariant()
    def store_matches_model(self) -> None:
        """``list_jobs``, ``get`` of every job the step touched and ``counts`` say what
        the model holds; no job breaks a rule of :func:`row_problems`."""
        jobs = self.store.list_jobs(
            core.JobFilter(kinds=frozenset(self.kinds)), core.Page(limit=10_000)
        )
        expect_same("list_jobs", jobs, self.model.jobs(), self.span)
        for job in jobs:
            problems = row_problems(job)
            if problems:
                raise ModelMismatch(f"job {job.id}: {', '.join(problems)}: {job!r}")
        for job_id in sorted(self.touched):
            expect_same(f"get({job_id})", self.store.get(job_id), self.model.get(job_id), self.span)
        self.touched.clear()
        self._check_counts(jobs)
        self.model.adopt(jobs)
        self.span = _ZERO

    def _check_counts(self, jobs: list[Any]) -> None:
        before = self.store.now()
        counts = [c for c in self.store.counts() if c.kind in self.kinds]
        after = self.store.now()
        actual = {(c.state, c.kind, c.tenant): c.count for c in counts}
        expect_same("counts", _sorted(actual), _sorted(self.model.counts()), _ZERO)
        for c in counts:
            if c.state is not core.JobState.PENDING:
                if c.oldest_due_age is not None:
                    raise ModelMismatch(f"counts: {c.state.value} with an oldest_due_age: {c}")
                continue
            earliest = min(
                j.available_at
                for j in jobs
                if (j.state, j.kind, j.tenant) == (c.state, c.kind, c.tenant)
            )
            low = max(0.0, (before - earliest).total_seconds())
            high = max(0.0, (after - earliest).total_seconds())
            age = c.oldest_due_age
            if age is None or not low - 1e-6 <= age <= high + 1e-6:
                raise ModelMismatch(f"counts: oldest_due_age {age} not within {low}..{high}: {c}")

    def teardown(self) -> None:
        """Remove the run's jobs and workers, so the next run starts from an empty store."""
        mine = core.JobFilter(kinds=frozenset(self.kinds))
        self.store.apply(mine, core.Event.CANCEL)
        self.store.delete(mine)
        for worker_id in self.workers:
            self.store.unregister_worker(worker_id)


def _sorted(counts: dict[tuple[core.JobState, str, str | None], int]) -> list[tuple[str, ...]]:
    """Counts as comparable rows (state, kind, tenant, count), sorted."""
    return sorted((s.value, kind, repr(tenant), str(n)) for (s, kind, tenant), n in counts.items())
