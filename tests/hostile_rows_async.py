"""Hostile rows (issue 9): jobs written by plain SQL around enqueue's validation, each
breaking an assumption of decoding, among good ones (async source; twin generated).

Every scenario takes a store, so each PostgreSQL adapter runs the same ones (psycopg in
``tests/psycopg/test_hostile_rows*.py``, asyncpg in ``tests/asyncpg/``); plain SQL goes
through ``tests.pgfixtures`` (either driver). A row that cannot become a job must end
``dead`` in the claim that took it, naming its column, while the rest of the batch runs
(X4).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import AsyncEngine, Settings
from skiplock.core import (
    MAX_ERROR_LENGTH,
    MAX_RECORDED_ERRORS,
    AuditAction,
    AuditEvent,
    Bury,
    ClaimRequest,
    Completion,
    JobFilter,
    JobState,
    Page,
    Retry,
    Succeeded,
    UndecodableRowError,
)
from skiplock.core._failure import UNDECODABLE_MARK
from skiplock.ports import AsyncAudit
from tests.pgfixtures import execute, fetch

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from skiplock.core.store import ClaimedJobs
    from skiplock.ports import AsyncJobStore

KIND = "hostile.row"
#: Ids: bad rows from 1, odd-but-valid rows from 101, plain good rows from 1001.
BAD_BASE, ODD_BASE, GOOD_BASE = 1, 101, 1001
GOOD_COUNT = 200


def _nested(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


def _digits(n: int) -> str:
    return "1" + "0" * (n - 1)


def _json(text: str) -> str:
    return f"'{text}'::jsonb"


#: Rows that cannot become a job: (the column last_error must name, column -> SQL value).
BAD_ROWS: tuple[tuple[str, Mapping[str, str]], ...] = (
    ("trace_context", {"trace_context": _json("[1, 2]")}),
    ("trace_context", {"trace_context": _json('"traceparent"')}),
    ("trace_context", {"trace_context": _json("42")}),
    ("trace_context", {"trace_context": _json("true")}),
    ("trace_context", {"trace_context": _json(_nested(3, "[]"))}),
    ("trace_context", {"trace_context": _json('{"a": ' + _nested(3000) + "}")}),
    ("trace_context", {"trace_context": _json('{"n": ' + _digits(5000) + "}")}),
    ("payload", {"payload": _json(_digits(4301))}),
    ("payload", {"payload": _json('{"a": -1.5e5000}')}),
    ("payload", {"payload": _json(_nested(3000))}),
    ("payload", {"payload": _json('{"a":' * 3000 + "1" + "}" * 3000)}),
    ("created_at", {"created_at": "'-infinity'"}),
    ("created_at", {"created_at": "'infinity'"}),
    ("created_at", {"created_at": "'0044-03-15 BC'"}),
    ("created_at", {"created_at": "'20000-01-01'"}),
    ("created_at", {"created_at": "'0001-01-01 00:00:00+00'"}),
    ("completed_at", {"completed_at": "'-infinity'"}),
    ("completed_at", {"completed_at": "'12345-06-07 00:00:00+00'"}),
    ("started_at", {"started_at": "'-infinity'"}),
    ("attempts", {"attempts": "2147483647"}),
    ("claims", {"claims": "2147483647"}),
    ("attempts", {"attempts": "2147483647", "max_attempts": "2147483647", "claims": "2147483647"}),
    # A suspect starts alone; a recovered job is paid for before it runs.
    ("trace_context", {"trace_context": _json("[]"), "started": "true"}),
    ("payload", {"payload": _json(_nested(5000)), "started": "true", "recovered": "true"}),
    ("created_at", {"created_at": "'-infinity'", "recovered": "true"}),
    # Several problems: one is named (the unreadable timestamp, read first).
    (
        "created_at",
        {
            "created_at": "'infinity'",
            "payload": _json(_digits(5000)),
            "trace_context": _json("[1]"),
        },
    ),
)

#: Rows that are odd but valid: each must run and succeed like any job.
ODD_ROWS: tuple[Mapping[str, str], ...] = (
    {"trace_context": _json('{"traceparent": "00-a-b-01", "more": [1, [2, [3]]], "n": 5}')},
    {"trace_context": _json("null")},
    {"trace_context": _json("{}")},
    {"payload": _json("null")},
    {"payload": _json('"text"')},
    {"payload": _json("[]")},
    {"payload": _json("1e400")},
    {"payload": _json(_digits(4300))},
    {"payload": _json("0." + "1" * 5000)},
    {"payload": _json("-0")},
    {"payload": _json(_nested(99))},
    {"payload": _json('"é😀"')},
    {"payload": "to_jsonb(repeat('x', 200000))"},
    {"last_error": "repeat('e', 100000)"},
    {"tenant_id": "''"},
    {"tenant_id": "E'\\x01\\t\\n'"},
    {"tenant_id": "repeat('t', 10000)"},
    {"idempotency_key": "repeat('k', 10000)"},
    {"idempotency_key": "E'\\x01'"},
    {"priority": "32767"},
    {"priority": "-32768"},
    {"max_attempts": "2147483647"},
    {"attempts": "10", "max_attempts": "3"},
    {"claims": "2147483645"},
    {"claimed_at": "'-infinity'", "claimed_by": "'ghost'"},
    {"completed_at": "'2000-01-01 00:00:00+00'"},
    {"created_at": "'0001-01-03 00:00:00+00'"},
    {"created_at": "'9999-12-29 00:00:00+00'"},
    {"available_at": "'0001-01-03 00:00:00+00'"},
    {"started": "true"},
    {"started": "true", "recovered": "true"},
    {"recovered": "true"},
    {"explicit_max_attempts": "true", "max_attempts": "1"},
    # X5's columns: a claim reads none of them but started_at, a success sets result.
    {"started_at": "'2000-01-01 00:00:00+00'"},
    {"result": _json('{"left": "by plain SQL"}')},
    {"errors": _json('"not an array"')},
    {"errors": _json("[1, 2]")},
)


def _insert(job_id: int, values: Mapping[str, str], *, second: int, kind: str = KIND) -> str:
    # Due in the past, spread out so bad rows sit between good ones in claim order.
    fields = {"available_at": f"'2000-01-01 00:00:00+00'::timestamptz + {second} * interval '1s'"}
    fields |= values
    columns = ", ".join(["id", "kind", *fields])
    row = ", ".join([str(job_id), f"'{kind}'", *fields.values()])
    return f"INSERT INTO skiplock.jobs ({columns}) VALUES ({row})"


def insert_hostile_rows(dsn: str) -> None:
    """The bad and odd rows among :data:`GOOD_COUNT` good ones, interleaved in claim order."""
    good = (
        f"INSERT INTO skiplock.jobs (id, kind, payload, available_at) "
        f"SELECT g, '{KIND}', jsonb_build_object('n', g), "
        f"'2000-01-01 00:00:00+00'::timestamptz + (g - {GOOD_BASE}) * 10 * interval '1s' "
        f"FROM generate_series({GOOD_BASE}, {GOOD_BASE + GOOD_COUNT - 1}) AS g"
    )
    bad = [
        _insert(BAD_BASE + i, values, second=75 * i + 5) for i, (_, values) in enumerate(BAD_ROWS)
    ]
    odd = [_insert(ODD_BASE + i, values, second=55 * i + 7) for i, values in enumerate(ODD_ROWS)]
    # Jobs enqueued later draw ids above these.
    sequence = (
        "SELECT setval(pg_get_serial_sequence('skiplock.jobs', 'id'), "
        "(SELECT max(id) FROM skiplock.jobs))"
    )
    execute(dsn, [good, *bad, *odd, sequence])


def states(dsn: str) -> dict[int, tuple[str, str | None]]:
    """Job id -> (status, last_error), read with plain SQL."""
    rows = fetch(dsn, "SELECT id, status, last_error FROM skiplock.jobs")
    return {int(job_id): (status, error) for job_id, status, error in rows}


def check_buried(found: Mapping[int, tuple[str, str | None]], job_id: int, column: str) -> None:
    """The job is ``dead`` with a capped ``last_error`` naming ``column``."""
    status, error = found[job_id]
    assert status == "dead", (job_id, status)
    assert error is not None
    assert error.startswith(f"{UNDECODABLE_MARK} {column}: "), (job_id, error[:200])
    assert len(error) <= MAX_ERROR_LENGTH


async def worker_buries_hostile_rows_and_runs_the_rest(engine: AsyncEngine, dsn: str) -> None:
    """A real worker over the hostile rows: good and odd ones succeed, bad ones end dead
    naming their column, nothing stays running, no exception escapes, it serves on."""

    @engine.processor(KIND)
    async def process(payload: Any) -> None:
        pass

    insert_hostile_rows(dsn)
    worker = engine.worker(concurrency=4, install_signal_handlers=False)
    # Only the jobs the store could hand out are handled; the bad ones never reach it.
    assert await worker.run_until_idle() == GOOD_COUNT + len(ODD_ROWS)
    found = states(dsn)
    assert len(found) == GOOD_COUNT + len(ODD_ROWS) + len(BAD_ROWS)
    for i, (column, _) in enumerate(BAD_ROWS):
        check_buried(found, BAD_BASE + i, column)
    good = [*range(ODD_BASE, ODD_BASE + len(ODD_ROWS))]
    good += range(GOOD_BASE, GOOD_BASE + GOOD_COUNT)
    assert {job_id: found[job_id][0] for job_id in good} == dict.fromkeys(good, "succeeded")
    assert not [job_id for job_id, (status, _) in found.items() if status == "running"]
    # The admin API names the row that cannot be read; a readable dead one reads back.
    with pytest.raises(UndecodableRowError, match="trace_context: not a JSON object") as info:
        await engine.get_job(BAD_BASE)
    assert (info.value.job_id, info.value.column) == (BAD_BASE, "trace_context")
    with pytest.raises(UndecodableRowError):
        await engine.dead_jobs()
    counter = BAD_BASE + [column for column, _ in BAD_ROWS].index("attempts")
    job = await engine.get_job(counter)
    assert job.state is JobState.DEAD
    assert job.last_error is not None
    assert "attempts: 2147483647" in job.last_error
    # The worker serves on.
    result = await engine.enqueue(KIND, {"after": True})
    assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
    assert (await engine.get_job(result.id)).state is JobState.SUCCEEDED


def _claim(limit: int = 10, start_now: int | None = None) -> ClaimRequest:
    return ClaimRequest(worker_id="w1", limit=limit, kinds=frozenset({KIND}), start_now=start_now)


def _check_charges(dsn: str, jobs: ClaimedJobs, start_now: int | None) -> None:
    """Each returned job is charged in the table exactly where the claim says it charged
    (``jobs.charged``, what the worker runs at once), never more than ``start_now`` and
    never beside a suspect; its attempts match the table's."""
    charged = set(jobs.charged)
    assert charged <= {job.id for job in jobs}
    if start_now is not None:
        assert len(charged) <= start_now
    if any(job.suspect for job in jobs if job.id in charged):
        assert len(charged) == 1  # a suspect starts alone
    rows = fetch(dsn, "SELECT id, attempts, started FROM skiplock.jobs WHERE status = 'running'")
    table = {int(job_id): (int(attempts), bool(started)) for job_id, attempts, started in rows}
    assert table == {job.id: (job.attempts, job.id in charged) for job in jobs}


async def claim_returns_the_good_rows_of_a_batch(store: AsyncJobStore, dsn: str) -> None:
    """A claim with bad rows returns the good ones in claim order, charged as the claim
    reports (``charged``: what the statement charged), and buries the bad ones in the
    same call."""
    # A bad suspect starts alone in the statement; without it, the first two start.
    execute(
        dsn,
        [
            _insert(
                1, {"priority": "9", "trace_context": _json("[1]"), "started": "true"}, second=0
            ),
            _insert(2, {"priority": "8"}, second=0),
            _insert(3, {"priority": "7"}, second=0),
            _insert(4, {"priority": "6"}, second=0),
        ],
    )
    jobs = await store.claim(_claim(start_now=2))
    # The statement charged the bad suspect alone: the good jobs it returns are held
    # (the worker starts them in free slots), as the claim reports.
    assert [(job.id, job.attempts) for job in jobs] == [(2, 0), (3, 0), (4, 0)]
    assert list(jobs.charged) == []
    _check_charges(dsn, jobs, 2)
    check_buried(states(dsn), 1, "trace_context")
    execute(dsn, ["DELETE FROM skiplock.jobs"])

    # The statement charges a good job and a bad one: the good one keeps its charge (the
    # claim reports it) and the suspect behind them is held, never charged beside it.
    execute(
        dsn,
        [
            _insert(5, {"priority": "9"}, second=0),
            _insert(6, {"priority": "8", "payload": _json(_nested(3000))}, second=0),
            _insert(7, {"priority": "7", "started": "true"}, second=0),
            _insert(8, {"priority": "6", "claims": "2147483647"}, second=0),
        ],
    )
    jobs = await store.claim(_claim(start_now=2))
    assert [(job.id, job.attempts, job.suspect) for job in jobs] == [(5, 1, False), (7, 0, True)]
    assert list(jobs.charged) == [5]
    _check_charges(dsn, jobs, 2)
    found = states(dsn)
    check_buried(found, 6, "payload")
    check_buried(found, 8, "claims")

    # Only bad rows: nothing returned, nothing left running, the next claim finds nothing.
    execute(dsn, ["DELETE FROM skiplock.jobs"])
    execute(dsn, [_insert(9 + i, values, second=i) for i, (_, values) in enumerate(BAD_ROWS[:4])])
    assert await store.claim(_claim()) == []
    assert {status for status, _ in states(dsn).values()} == {"dead"}
    assert await store.claim(_claim()) == []


async def counters_saturate_in_start_and_complete(store: AsyncJobStore, dsn: str) -> None:
    """``attempts`` set to integer's maximum by plain SQL while its job runs fails neither
    ``start`` nor ``complete`` (which count an attempt): the counter stays at the maximum."""
    execute(dsn, [_insert(1, {}, second=0), _insert(2, {}, second=1)])
    first, second = await store.claim(_claim(start_now=0))
    execute(dsn, ["UPDATE skiplock.jobs SET attempts = 2147483647"])
    assert await store.start([first.lease]) == [True]
    done = [
        Completion(lease=first.lease, outcome=Bury(error="gave up")),
        Completion(lease=second.lease, outcome=Succeeded()),  # ran unpaid: counts one
    ]
    assert await store.complete(done) == [True, True]
    rows = fetch(dsn, "SELECT id, status, attempts FROM skiplock.jobs ORDER BY id")
    assert rows == [(1, "dead", 2**31 - 1), (2, "succeeded", 2**31 - 1)]


def _recorded(attempts: range) -> str:
    entries = ", ".join(
        f'{{"attempt": {n}, "worker_id": "old", "claimed_at": null, '
        f'"failed_at": "2000-01-01T00:00:00+00:00", "error": "old {n}"}}'
        for n in attempts
    )
    return _json(f"[{entries}]")


async def recorded_errors_survive_hostile_values(store: AsyncJobStore, dsn: str) -> None:
    """X5: an ``errors`` value written by plain SQL fails no completion: one that is not
    an array is replaced by the new failure, an over-long one keeps its latest entries."""
    execute(
        dsn,
        [
            _insert(1, {"errors": _json('"text"')}, second=0),
            _insert(2, {"errors": _json('{"attempt": 1}')}, second=1),
            _insert(3, {"errors": _recorded(range(1, 51))}, second=2),
            _insert(4, {}, second=3),
        ],
    )
    jobs = await store.claim(_claim())
    assert [job.id for job in jobs] == [1, 2, 3, 4]
    done = [Completion(job.lease, Retry(delay=timedelta(0), error=f"new {job.id}")) for job in jobs]
    assert await store.complete(done) == [True] * 4
    for job_id in (1, 2, 4):
        job = await store.get(job_id)
        assert job is not None
        assert [(e.attempt, e.worker_id, e.error) for e in job.errors] == [
            (1, "w1", f"new {job_id}")
        ]
    long = await store.get(3)
    assert long is not None
    assert [e.error for e in long.errors] == [
        *(f"old {n}" for n in range(51 - MAX_RECORDED_ERRORS + 1, 51)),
        "new 3",
    ]


async def admin_reads_name_the_bad_row(store: AsyncJobStore, dsn: str) -> None:
    """get and list_jobs raise UndecodableRowError naming job and column; delete removes
    the row all the same."""
    execute(dsn, [_insert(1, {"created_at": "'-infinity'"}, second=0), _insert(2, {}, second=1)])
    with pytest.raises(UndecodableRowError, match=r"job 1 cannot be read: created_at: -infinity"):
        await store.get(1)
    with pytest.raises(UndecodableRowError, match="created_at"):
        await store.list_jobs(JobFilter(), Page(limit=10))
    [job] = await store.list_jobs(JobFilter(), Page(limit=10, after_id=1))
    assert job.id == 2
    with pytest.raises(UndecodableRowError, match="created_at"):
        await store.delete(JobFilter(ids=frozenset({1})))
    assert await store.get(1) is None
    assert [c.count for c in await store.counts()] == [1]


async def due_time_out_of_range_is_buried(store: AsyncJobStore, dsn: str) -> None:
    """Without the due-time constraint (dropped by hand): a due time Python cannot read
    fails neither the claim nor the fetch; the row is buried naming ``available_at``."""
    execute(
        dsn,
        [
            "ALTER TABLE skiplock.jobs DROP CONSTRAINT jobs_available_at_check",
            _insert(1, {"available_at": "'-infinity'"}, second=0),
            _insert(2, {"available_at": "'0044-03-15 BC'"}, second=0),
            _insert(3, {}, second=0),
            _insert(4, {"available_at": "'infinity'"}, second=0),
        ],
    )
    assert [job.id for job in await store.claim(_claim())] == [3]
    found = states(dsn)
    check_buried(found, 1, "available_at")
    check_buried(found, 2, "available_at")
    assert found[4] == ("pending", None)  # never due
    with pytest.raises(UndecodableRowError, match="available_at: infinity is outside"):
        await store.get(4)


class _Sink:
    """An audit sink that keeps the events it was given; raises if ``fail``."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.events: list[AuditEvent] = []

    async def record(self, events: Sequence[AuditEvent], connection: Any) -> None:
        self.events.extend(events)
        if self.fail:
            raise RuntimeError("the audit log is down")


async def claim_audits_the_rows_it_buries(store: AsyncJobStore, dsn: str) -> None:
    """With an audit, a claim records ``job_dlq`` for each row it buries (J10), as the
    claiming worker, with the error it stored; a sink gets the same events, and one that
    raises changes nothing the claim did. Deleting such a row records its payload as
    JSON text when Python cannot decode it."""
    bad = {"trace_context": _json("[1]")}
    nested = {"payload": _json(_nested(3000))}
    execute(
        dsn, [_insert(1, bad, second=0), _insert(2, nested, second=1), _insert(3, {}, second=2)]
    )
    jobs = await store.claim(_claim(), audit=AsyncAudit(actor="w1"))
    assert [job.id for job in jobs] == [3]
    found = states(dsn)
    for job_id, column in ((1, "trace_context"), (2, "payload")):
        check_buried(found, job_id, column)
        [event] = await store.audit_trail(job_id)
        assert (event.action, event.job_id, event.kind, event.actor) == (
            AuditAction.DLQ,
            job_id,
            KIND,
            "w1",
        )
        assert event.details == {"error": found[job_id][1], "attempts": 1}
    assert await store.audit_trail(3) == []
    rows = fetch(dsn, "SELECT job_id, kind, tenant_id, action, actor FROM skiplock.audit")
    assert sorted(rows) == [(1, KIND, None, "job_dlq", "w1"), (2, KIND, None, "job_dlq", "w1")]

    for fail in (False, True):
        execute(dsn, [_insert(10 + fail, bad, second=3)])
        sink = _Sink(fail=fail)
        assert await store.claim(_claim(), audit=AsyncAudit(actor="w2", sink=sink)) == []
        check_buried(states(dsn), 10 + fail, "trace_context")
        assert [(e.action, e.job_id, e.actor) for e in sink.events] == [
            (AuditAction.DLQ, 10 + fail, "w2")
        ]
        assert await store.audit_trail(10 + fail) == []

    sink = _Sink()
    with pytest.raises(UndecodableRowError, match="payload"):
        await store.delete(JobFilter(ids=frozenset({2})), audit=AsyncAudit(actor="ops", sink=sink))
    assert await store.get(2) is None
    [event] = sink.events
    assert event.action is AuditAction.DISCARD
    assert event.details is not None
    assert event.details["json"].startswith('{"from": "dead", "payload": [[[')


def engine_for(store: AsyncJobStore) -> AsyncEngine:
    """An engine that polls often and retries soon (the worker scenario's settings)."""
    return AsyncEngine(store, Settings(poll_interval=0.05, backoff_base=0))
