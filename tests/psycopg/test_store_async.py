"""The psycopg store on a real server: caller transactions (R0, R10), pools, maintenance
locks (J13), concurrency across connections (R15, R16), bulk enqueue (X1)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from psycopg import AsyncConnection
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from skiplock._compat_async import join, sleep, spawn
from skiplock.adapters._pg._ops import maintenance_lock_key
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.adapters.psycopg._store_async import COPY_THRESHOLD
from skiplock.core import (
    ClaimRequest,
    Completion,
    DatabaseUnavailableError,
    EnqueueRequest,
    Event,
    JobFilter,
    JobState,
    LeaseLostError,
    Page,
    Retry,
    StoreError,
    Succeeded,
    WorkerInfo,
)
from tests.pgfixtures import store_fixture
from tests.pghelpers import (
    sql,
    zone_with_daylight_saving_in_two_days,
    zone_with_daylight_saving_since_two_days,
)

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


store = store_fixture(AsyncPsycopgJobStore, max_size=8)


def _req(kind: str = "pg.job", **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(kind=kind, **fields)


def _claim(worker_id: str = "w1", limit: int = 10, **fields: Any) -> ClaimRequest:
    return ClaimRequest(worker_id=worker_id, limit=limit, **fields)


def _job_count(dsn: str) -> int:
    [(count,)] = sql(dsn, "SELECT count(*) FROM skiplock.jobs")
    return int(count)


async def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await sleep(0.01)


async def _in_transaction(
    store: AsyncPsycopgJobStore, body: Callable[[AsyncConnection[Any]], Any]
) -> None:
    async with store.transaction() as tx:
        await body(tx)


# ---- R0: enqueue in the caller's own transaction ----------------------------------------


async def test_enqueue_in_caller_connection_rollback_leaves_no_job(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as conn:
        results = await store.enqueue([_req(), _req()], connection=conn)
        assert len(results) == 2
        assert _job_count(pg_dsn) == 0  # not visible before the caller commits
        await conn.rollback()
    assert _job_count(pg_dsn) == 0
    assert await store.counts() == []


async def test_enqueue_in_caller_connection_commit_creates_one_job_that_runs(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute("SELECT 1")  # the caller's transaction is already open
        [result] = await store.enqueue([_req(payload={"x": 1})], connection=conn)
        assert await store.get(result.id) is None
        await conn.commit()
    assert _job_count(pg_dsn) == 1
    [job] = await store.claim(_claim())
    assert job.id == result.id
    assert await store.complete([Completion(lease=job.lease, outcome=Succeeded())]) == [True]
    done = await store.get(result.id)
    assert done is not None
    assert done.state is JobState.SUCCEEDED


async def test_enqueue_in_caller_transaction_block_rolls_back_on_error(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    class Boom(Exception):
        pass

    async def enqueue_then_fail(conn: AsyncConnection[Any]) -> None:
        async with conn.transaction():
            await store.enqueue([_req(idempotency_key="k")], connection=conn)
            raise Boom

    conn = await AsyncConnection.connect(pg_dsn, autocommit=True)
    try:
        with pytest.raises(Boom):
            await enqueue_then_fail(conn)
    finally:
        await conn.close()
    assert _job_count(pg_dsn) == 0


async def test_enqueue_on_autocommit_connection_outside_a_transaction_commits_at_once(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    # Documented: no open transaction means the enqueue is its own statement.
    async with await AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await store.enqueue([_req()], connection=conn)
        assert _job_count(pg_dsn) == 1


async def test_store_never_commits_the_caller_transaction(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as conn:
        [result] = await store.enqueue([_req()], connection=conn)
        await store.apply(JobFilter(ids=frozenset({result.id})), Event.CANCEL, connection=conn)
        await store.get(result.id, connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        await conn.rollback()
    assert _job_count(pg_dsn) == 0


async def test_connection_of_the_wrong_type_is_rejected(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    with pytest.raises(TypeError, match="connection= must be a psycopg"):
        await store.enqueue([_req()], connection=object())
    if True:  # ASYNC
        with (
            psycopg.Connection.connect(pg_dsn) as sync_conn,
            pytest.raises(TypeError, match="AsyncConnection"),
        ):
            await store.enqueue([_req()], connection=sync_conn)
    assert _job_count(pg_dsn) == 0


async def test_times_are_utc_whatever_the_session_time_zone(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute("SET TimeZone = 'Asia/Tokyo'")
        [result] = await store.enqueue([_req()], connection=conn)
        job = await store.get(result.id, connection=conn)
        assert job is not None
        assert job.created_at.utcoffset() == timedelta(0)
        assert job.available_at.utcoffset() == timedelta(0)
        await conn.rollback()


async def test_a_delay_is_an_exact_duration_in_any_session_time_zone(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    # Days added as calendar days would be an hour short across the change of clocks.
    delay = timedelta(days=5)
    async with await AsyncConnection.connect(pg_dsn) as conn:
        await conn.execute(f"SET TimeZone = '{zone_with_daylight_saving_in_two_days()}'")
        single = await store.enqueue([_req(delay=delay)], connection=conn)
        batch = await store.enqueue([_req(delay=delay), _req(delay=delay)], connection=conn)
        for result in [*single, *batch]:
            job = await store.get(result.id, connection=conn)
            assert job is not None
            assert job.available_at - job.created_at == delay
        await conn.rollback()


async def test_ttls_and_retention_are_exact_durations_in_any_session_time_zone(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    # 5 days subtracted as calendar days would reach back only 119 hours across the
    # change of clocks two days ago: a heartbeat and a completion 119.5 hours old would
    # count as older than 5 days.
    five_days, younger = timedelta(days=5), "interval '119 hours 30 minutes'"
    zone = zone_with_daylight_saving_since_two_days()
    zoned = AsyncPsycopgJobStore(make_conninfo(pg_dsn, options=f"-c TimeZone={zone}"))
    try:
        await zoned.register_worker(WorkerInfo(id="w1", host="h", pid=1))
        await zoned.enqueue([_req(), _req()])
        running, done = await zoned.claim(_claim("w1"))
        await zoned.complete([Completion(lease=done.lease, outcome=Succeeded())])
        sql(pg_dsn, f"UPDATE skiplock.workers SET heartbeat_at = now() - {younger}")
        sql(
            pg_dsn,
            f"UPDATE skiplock.jobs SET completed_at = now() - {younger} WHERE id = %s",
            done.id,
        )
        assert await zoned.recover_stale(default_ttl=five_days, ttls={}) == []
        assert (
            await zoned.recover_stale(default_ttl=timedelta(hours=1), ttls={"pg.job": five_days})
            == []
        )
        assert await zoned.purge(older_than=five_days, archive=False, batch_size=10) == 0
        assert sql(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(1,)]
        # The maintenance period is exact too: a run 119.5 hours ago is not 5 days old.
        sql(
            pg_dsn,
            "INSERT INTO skiplock.maintenance (name, last_run_at) "
            f"VALUES ('zoned', now() - {younger})",
        )
        assert not await zoned.try_maintenance("zoned", five_days)
        # And each is still measured: a shorter duration than the age does apply.
        assert await zoned.purge(older_than=timedelta(hours=119), archive=False, batch_size=10) == 1
        assert await zoned.recover_stale(default_ttl=timedelta(hours=119), ttls={}) == [running.id]
    finally:
        await zoned.close()


# ---- R10: the job's transaction ------------------------------------------------------------


async def test_processor_write_and_completion_commit_together(
    store: AsyncPsycopgJobStore, pg_dsn: str, effects: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim())
    async with store.transaction() as tx:
        await tx.execute("INSERT INTO public.effects VALUES (%s, 'done')", [job.id])
        assert await store.complete(
            [Completion(lease=job.lease, outcome=Succeeded())], connection=tx
        ) == [True]
    assert sql(pg_dsn, "SELECT job_id FROM public.effects") == [(job.id,)]
    assert sql(pg_dsn, "SELECT status FROM skiplock.jobs") == [("succeeded",)]


async def test_processor_failure_rolls_back_write_and_completion(
    store: AsyncPsycopgJobStore, pg_dsn: str, effects: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim())

    async def process(tx: AsyncConnection[Any]) -> None:
        await tx.execute("INSERT INTO public.effects VALUES (%s, 'x')", [job.id])
        await store.complete([Completion(lease=job.lease, outcome=Succeeded())], connection=tx)
        raise RuntimeError("processor failed after writing")

    with pytest.raises(RuntimeError):
        await _in_transaction(store, process)
    assert sql(pg_dsn, "SELECT * FROM public.effects") == []
    assert sql(pg_dsn, "SELECT status, claimed_by FROM skiplock.jobs") == [("running", "w1")]


async def test_lost_lease_inside_the_job_transaction_rolls_back_the_processor_writes(
    store: AsyncPsycopgJobStore, pg_dsn: str, effects: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim("gone-worker"))
    # The worker never registered: maintenance takes the job back meanwhile.
    assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]

    async def process(tx: AsyncConnection[Any]) -> None:
        await tx.execute("INSERT INTO public.effects VALUES (%s, 'stale')", [job.id])
        applied = await store.complete(
            [Completion(lease=job.lease, outcome=Succeeded())], connection=tx
        )
        assert applied == [False]
        # The transaction is still healthy: the caller decides (the engine raises).
        await tx.execute("SELECT 1")
        raise LeaseLostError(f"job {job.id} was recovered")

    with pytest.raises(LeaseLostError):
        await _in_transaction(store, process)
    assert sql(pg_dsn, "SELECT * FROM public.effects") == []
    assert sql(pg_dsn, "SELECT status FROM skiplock.jobs") == [("pending",)]


async def test_autocommit_runs_statements_that_refuse_transactions(
    store: AsyncPsycopgJobStore, pg_dsn: str, effects: str
) -> None:
    async with store.autocommit() as conn:
        assert conn.autocommit
        await conn.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS effects_job ON public.effects (job_id)"
        )
    assert sql(pg_dsn, "SELECT indexname FROM pg_indexes WHERE indexname = 'effects_job'")


# ---- pools and settings --------------------------------------------------------------------


async def test_store_on_a_caller_pool_leaves_it_open(pg_dsn: str) -> None:
    pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=2, open=False)
    await pool.open()
    try:
        store = AsyncPsycopgJobStore(pool)
        [result] = await store.enqueue([_req()])
        async with store.transaction() as tx:
            assert await store.get(result.id, connection=tx) is not None
        await store.close()
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
    finally:
        await pool.close()


async def test_store_rejects_something_that_is_not_a_pool() -> None:
    with pytest.raises(TypeError, match="connection string or"):
        AsyncPsycopgJobStore(42)  # type: ignore[arg-type]


async def test_statement_timeout_bounds_pooled_connections(pg_dsn: str) -> None:
    store = AsyncPsycopgJobStore(pg_dsn, statement_timeout=timedelta(milliseconds=200))
    try:
        async with store.transaction() as tx:
            cur = await tx.execute("SHOW statement_timeout")
            assert await cur.fetchone() == ("200ms",)

        async def sleep_long(tx: AsyncConnection[Any]) -> None:
            await tx.execute("SELECT pg_sleep(5)")

        with pytest.raises(psycopg.errors.QueryCanceled):
            await _in_transaction(store, sleep_long)
    finally:
        await store.close()


async def test_unreachable_server_raises_database_unavailable_before_the_pool_timeout() -> None:
    # The pool's timeout (30 s by default) is for a busy pool: a server that refuses
    # connections fails each call as soon as the pool's connection attempt fails.
    store = AsyncPsycopgJobStore("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(DatabaseUnavailableError, match="the database is unreachable"):
            await store.open()
        for _ in range(3):  # also while the pool keeps reconnecting
            began = time.monotonic()
            with pytest.raises(DatabaseUnavailableError, match="Connection refused"):
                await store.counts()
            assert time.monotonic() - began < 2.0  # issue 29: within 2 s, not after 30
    finally:
        await store.close()


async def test_a_server_that_refuses_the_login_fails_the_call_at_once(pg_dsn: str) -> None:
    # psycopg gives connection failures no SQLSTATE: a refused login fails as fast as a
    # server that is down, in the server's words, rather than after the pool's timeout.
    store = AsyncPsycopgJobStore(make_conninfo(pg_dsn, dbname="no_such_db"))
    try:
        began = time.monotonic()
        with pytest.raises(DatabaseUnavailableError, match='"no_such_db" does not exist'):
            await store.open()
        assert time.monotonic() - began < 2.0
    finally:
        await store.close()


async def test_a_read_past_read_timeout_raises_database_unavailable(pg_dsn: str) -> None:
    store = AsyncPsycopgJobStore(pg_dsn, read_timeout=0.2)
    locker = await AsyncConnection.connect(pg_dsn)
    try:
        await store.open()
        await locker.execute(
            "LOCK TABLE skiplock.jobs, skiplock.job_counts, skiplock.job_count_deltas"
            " IN ACCESS EXCLUSIVE MODE"
        )
        with pytest.raises(DatabaseUnavailableError, match="read timeout"):
            await store.counts()
        await locker.rollback()
        assert await store.counts() == []  # the connection went back usable
    finally:
        await locker.close()
        await store.close()


# ---- workers and maintenance --------------------------------------------------------------


async def test_heartbeat_uses_the_database_clock(store: AsyncPsycopgJobStore, pg_dsn: str) -> None:
    await store.register_worker(WorkerInfo(id="hb", host="h", pid=7, kinds=frozenset({"a"})))
    before = await store.now()
    await store.heartbeat("hb")
    after = await store.now()
    [(beat, kinds)] = sql(pg_dsn, "SELECT heartbeat_at, kinds FROM skiplock.workers")
    assert before <= beat <= after
    assert kinds == ["a"]


async def test_heartbeat_survives_a_lost_connection(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await store.register_worker(WorkerInfo(id="hb", host="h", pid=7))
    sql(
        pg_dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    await store.heartbeat("hb")  # the dedicated connection reconnects once
    await store.heartbeat("hb")
    assert sql(pg_dsn, "SELECT id FROM skiplock.workers") == [("hb",)]


async def test_recover_stale_runs_on_one_node_at_a_time(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim("crashed"))
    key = maintenance_lock_key("skiplock", "recover")
    with psycopg.connect(pg_dsn, autocommit=True) as other_node:
        other_node.execute("SELECT pg_advisory_lock(%s)", [key])
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []
        other_node.execute("SELECT pg_advisory_unlock(%s)", [key])
    assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]


async def test_purge_runs_on_one_node_at_a_time_and_archives(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await store.enqueue([_req(payload={"n": i}) for i in range(5)])
    jobs = await store.claim(_claim())
    await store.complete([Completion(lease=j.lease, outcome=Succeeded()) for j in jobs])
    key = maintenance_lock_key("skiplock", "purge")
    with psycopg.connect(pg_dsn, autocommit=True) as other_node:
        other_node.execute("SELECT pg_advisory_lock(%s)", [key])
        assert await store.purge(older_than=timedelta(0), archive=True, batch_size=2) == 0
        other_node.execute("SELECT pg_advisory_unlock(%s)", [key])
    assert await store.purge(older_than=timedelta(0), archive=True, batch_size=2) == 5
    assert _job_count(pg_dsn) == 0
    archived = sql(
        pg_dsn, "SELECT id, status, payload, attempts FROM skiplock.jobs_archive ORDER BY id"
    )
    assert archived == [(j.id, "succeeded", j.payload, 1) for j in sorted(jobs, key=lambda j: j.id)]


async def test_purge_archives_results_and_recorded_errors(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim())
    await store.complete([Completion(job.lease, Retry(delay=timedelta(0), error="first"))])
    [job] = await store.claim(_claim())
    await store.complete([Completion(job.lease, Succeeded(result={"n": [1, 2]}))])
    assert await store.purge(older_than=timedelta(0), archive=True, batch_size=10) == 1
    [(started_at, result, errors)] = sql(
        pg_dsn, "SELECT started_at, result, errors FROM skiplock.jobs_archive"
    )
    assert started_at is not None
    assert result == {"n": [1, 2]}
    assert [(e["attempt"], e["worker_id"], e["error"]) for e in errors] == [(1, "w1", "first")]


# ---- concurrency across connections ---------------------------------------------------------


async def test_duplicate_enqueue_from_two_connections_creates_one_job(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as first:
        [created] = await store.enqueue([_req(idempotency_key="same")], connection=first)
        # A second enqueue of the key (own pooled connection) waits for the first...
        task = spawn(store.enqueue, [_req(idempotency_key="same")])

        def second_is_waiting() -> bool:
            rows = sql(
                pg_dsn,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            return bool(rows[0][0])

        await _eventually(second_is_waiting)
        await first.commit()  # ...and then resolves to the committed job.
        [second] = await join(task)
    assert created.created
    assert (second.id, second.created) == (created.id, False)
    assert _job_count(pg_dsn) == 1


async def test_duplicate_enqueue_after_the_other_rolled_back_creates_its_own(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as first:
        [abandoned] = await store.enqueue([_req(idempotency_key="same")], connection=first)
        task = spawn(store.enqueue, [_req(idempotency_key="same")])

        def second_is_waiting() -> bool:
            rows = sql(
                pg_dsn,
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            return bool(rows[0][0])

        await _eventually(second_is_waiting)
        await first.rollback()
        [second] = await join(task)
    assert second.created
    assert second.id != abandoned.id
    assert sql(pg_dsn, "SELECT id FROM skiplock.jobs") == [(second.id,)]


async def test_cluster_limit_is_strict_for_claimers_on_separate_pools(pg_dsn: str) -> None:
    limit = 3
    total = 60
    seeder = AsyncPsycopgJobStore(pg_dsn)
    await seeder.enqueue([_req("pg.limited", payload=i) for i in range(total)])
    await seeder.enqueue([_req("pg.free") for _ in range(20)])
    stores = [AsyncPsycopgJobStore(pg_dsn, max_size=2) for _ in range(5)]
    done = {"flag": False}
    observed: list[int] = []

    async def claimer(index: int) -> list[int]:
        store = stores[index]
        got: list[int] = []
        idle = 0
        while idle < 3:
            jobs = await store.claim(
                _claim(f"w{index}", limit=4, cluster_limits={"pg.limited": limit})
            )
            limited = [j for j in jobs if j.kind == "pg.limited"]
            assert len(limited) <= limit
            idle = 0 if jobs else idle + 1
            got += [j.id for j in limited]
            if jobs:
                await sleep(0.002)  # hold the claims a moment so claimers overlap
                outcome = [Completion(lease=j.lease, outcome=Succeeded()) for j in jobs]
                assert await store.complete(outcome) == [True] * len(jobs)
            else:
                await sleep(0.005)
        return got

    async def sampler() -> None:
        async with await AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
            while not done["flag"]:
                cur = await conn.execute(
                    "SELECT count(*) FROM skiplock.jobs "
                    "WHERE kind = 'pg.limited' AND status = 'running'"
                )
                row = await cur.fetchone()
                assert row is not None
                observed.append(int(row[0]))
                await sleep(0.001)

    watch = spawn(sampler)
    try:
        tasks = [spawn(claimer, i) for i in range(len(stores))]
        claimed = [job_id for task in tasks for job_id in await join(task)]
    finally:
        done["flag"] = True
        await join(watch)
        for store in [*stores, seeder]:
            await store.close()
    assert len(claimed) == len(set(claimed)) == total
    assert observed
    assert max(observed) <= limit
    assert sql(pg_dsn, "SELECT DISTINCT status, attempts FROM skiplock.jobs") == [("succeeded", 1)]


# ---- bulk --------------------------------------------------------------------------------


async def test_enqueue_100k_jobs_in_one_call(store: AsyncPsycopgJobStore, pg_dsn: str) -> None:
    requests = [_req("pg.bulk", payload={"i": i}) for i in range(100_000)]
    results = await store.enqueue(requests)
    assert len(results) == 100_000
    ids = [r.id for r in results]
    assert ids == sorted(ids)  # ids follow the request order
    assert len(set(ids)) == 100_000
    assert _job_count(pg_dsn) == 100_000
    job = await store.get(ids[12_345])
    assert job is not None
    assert job.payload == {"i": 12_345}


async def test_bulk_enqueue_by_copy_joins_the_caller_transaction(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    async with await AsyncConnection.connect(pg_dsn) as conn:
        await store.enqueue([_req() for _ in range(COPY_THRESHOLD)], connection=conn)
        assert _job_count(pg_dsn) == 0
        await conn.rollback()
        await store.enqueue([_req() for _ in range(COPY_THRESHOLD)], connection=conn)
        await conn.commit()
    assert _job_count(pg_dsn) == COPY_THRESHOLD


async def test_bulk_enqueue_is_all_or_nothing(store: AsyncPsycopgJobStore, pg_dsn: str) -> None:
    bad = _req("pg.bulk", priority=70_000)  # out of smallint range: the database refuses
    with pytest.raises((psycopg.Error, StoreError)):
        await store.enqueue([_req("pg.bulk") for _ in range(1000)] + [bad])
    assert _job_count(pg_dsn) == 0
    assert await store.list_jobs(JobFilter(), Page()) == []
