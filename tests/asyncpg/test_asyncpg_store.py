"""The asyncpg store on a real server: caller transactions (R0), pools and settings, the
schema check, heartbeats, maintenance locks (J13), concurrent enqueues (R16), bulk (X1)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import pytest

from skiplock import AsyncEngine, JobContext, SchemaVersionError, Settings
from skiplock._compat_async import join, sleep, spawn
from skiplock.adapters._pg import migrations
from skiplock.adapters._pg._ops import maintenance_lock_key
from skiplock.adapters._pg._store_async import COPY_THRESHOLD
from skiplock.adapters.asyncpg import AsyncpgJobStore, apply_schema, schema_status
from skiplock.adapters.asyncpg._driver import AsyncpgDriver
from skiplock.core import (
    ClaimRequest,
    Completion,
    DatabaseUnavailableError,
    EnqueueRequest,
    Event,
    JobFilter,
    JobState,
    StoreError,
    Succeeded,
    WorkerInfo,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from tests.pgfixtures import LaterDatabase

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


class Boom(Exception):
    pass


def _req(kind: str = "apg.job", **fields: Any) -> EnqueueRequest:
    return EnqueueRequest(kind=kind, **fields)


async def _job_count(db: Any) -> int:
    count: int = await db.fetchval("SELECT count(*) FROM skiplock.jobs")
    return count


async def _script(dsn: str, statements: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(statements)
    finally:
        await conn.close()


async def _then_roll_back(conn: Any, body: Callable[[], Awaitable[None]]) -> None:
    """Run ``body`` inside the caller's ``conn.transaction()``, then fail (a rollback)."""
    async with conn.transaction():
        await body()
        raise Boom


def _claim(worker_id: str = "w1", limit: int = 10, **fields: Any) -> ClaimRequest:
    return ClaimRequest(worker_id=worker_id, limit=limit, **fields)


# ---- R0: enqueue in the caller's own transaction ----------------------------------------


async def test_enqueue_in_caller_transaction_rollback_leaves_no_job(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    conn = await asyncpg.connect(apg_dsn)
    try:

        async def enqueue() -> None:
            # A keyed request takes the multi-statement path: it must join, not nest.
            results = await store.enqueue([_req(), _req(idempotency_key="k")], connection=conn)
            assert [r.created for r in results] == [True, True]
            assert await _job_count(db) == 0  # invisible before the commit

        with pytest.raises(Boom):
            await _then_roll_back(conn, enqueue)
        assert not conn.is_in_transaction()
    finally:
        await conn.close()
    assert await _job_count(db) == 0
    assert await store.counts() == []


async def test_bulk_enqueue_by_copy_joins_the_caller_transaction(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    conn = await asyncpg.connect(apg_dsn)
    try:

        async def enqueue() -> None:
            requests = [_req(payload=i) for i in range(COPY_THRESHOLD)]
            results = await store.enqueue(requests, connection=conn)
            assert len(results) == COPY_THRESHOLD
            assert conn.is_in_transaction()

        with pytest.raises(Boom):
            await _then_roll_back(conn, enqueue)
        async with conn.transaction():
            await store.enqueue([_req(payload=i) for i in range(COPY_THRESHOLD)], connection=conn)
            assert await _job_count(db) == 0
    finally:
        await conn.close()
    assert await _job_count(db) == COPY_THRESHOLD


async def test_enqueue_in_caller_transaction_commit_is_processed_by_a_worker(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    engine = AsyncEngine(store)
    seen: list[Any] = []

    @engine.processor("apg.welcome", transactional=True)
    async def welcome(payload: dict[str, Any], ctx: JobContext) -> None:
        seen.append(payload)

    conn = await asyncpg.connect(apg_dsn)
    try:
        async with conn.transaction():
            await conn.execute("INSERT INTO public.effects VALUES (0, 'user created')")
            result = await engine.enqueue("apg.welcome", {"user": 7}, connection=conn)
            assert await store.get(result.id) is None  # another connection: not yet
            assert (await store.get(result.id, connection=conn)) is not None
    finally:
        await conn.close()
    assert await _job_count(db) == 1
    worker = engine.worker(concurrency=2, install_signal_handlers=False)
    assert await worker.run_until_idle() == 1
    assert seen == [{"user": 7}]
    job = await store.get(result.id)
    assert job is not None
    assert job.state is JobState.SUCCEEDED


async def test_store_never_commits_the_caller_transaction(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    conn = await asyncpg.connect(apg_dsn)
    try:

        async def write() -> None:
            [kept] = await store.enqueue([_req(idempotency_key="a")], connection=conn)
            [gone] = await store.enqueue([_req()], connection=conn)
            cancelled = await store.apply(
                JobFilter(ids=frozenset({kept.id})), Event.CANCEL, connection=conn
            )
            assert cancelled == [kept.id]
            deleted = await store.delete(JobFilter(ids=frozenset({gone.id})), connection=conn)
            assert [j.id for j in deleted] == [gone.id]
            assert conn.is_in_transaction()
            assert await _job_count(db) == 0

        with pytest.raises(Boom):
            await _then_roll_back(conn, write)
    finally:
        await conn.close()
    assert await _job_count(db) == 0


async def test_enqueue_on_a_connection_outside_a_transaction_commits_at_once(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    conn = await asyncpg.connect(apg_dsn)
    try:
        await store.enqueue([_req()], connection=conn)
        # Keyed: a short transaction of the store's own (none of the caller's is open).
        [first] = await store.enqueue([_req(idempotency_key="k")], connection=conn)
        [again] = await store.enqueue([_req(idempotency_key="k")], connection=conn)
        assert not conn.is_in_transaction()
    finally:
        await conn.close()
    assert (again.id, again.created) == (first.id, False)
    assert await _job_count(db) == 2


async def test_pool_connection_of_the_caller_is_accepted(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    pool = await asyncpg.create_pool(apg_dsn, min_size=1, max_size=1)
    try:
        async with pool.acquire() as conn, conn.transaction():
            await store.enqueue([_req()], connection=conn)
    finally:
        await pool.close()
    assert await _job_count(db) == 1


async def test_connection_of_the_wrong_type_is_rejected(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    with pytest.raises(TypeError, match="connection= must be an asyncpg Connection"):
        await store.enqueue([_req()], connection=object())
    assert await _job_count(db) == 0


async def test_transaction_and_autocommit_yield_asyncpg_connections(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    async with store.transaction() as tx:
        assert tx.is_in_transaction()
        await store.enqueue([_req()], connection=tx)
    async with store.autocommit() as conn:
        assert not conn.is_in_transaction()
        await conn.execute(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS effects_job ON public.effects (job_id)"
        )
    assert await _job_count(db) == 1
    assert await db.fetch("SELECT indexname FROM pg_indexes WHERE indexname = 'effects_job'")


# ---- pools and settings --------------------------------------------------------------------

_SESSION = (
    "SELECT current_user, current_setting('search_path'), "
    "current_setting('default_transaction_read_only'), "
    "(SELECT count(*) FROM pg_listening_channels()), "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
    "(SELECT count(*) FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't')"
)


class _CallersConnection(asyncpg.Connection):  # type: ignore[misc]  # asyncpg is untyped
    """A connection class of the caller's, with asyncpg's own reset query."""


@pytest.mark.parametrize("block", ["transaction", "autocommit"])
@pytest.mark.parametrize("connection_class", [None, _CallersConnection])
async def test_session_state_left_on_a_lent_connection_is_reset(
    apg_dsn: str, db: Any, block: str, connection_class: type[asyncpg.Connection] | None
) -> None:
    role = f"skiplock_nobody_{block}"
    await db.execute(f'DROP ROLE IF EXISTS "{role}"; CREATE ROLE "{role}"')
    # One connection: whatever a block leaves on it, the next operation meets.
    kwargs = {} if connection_class is None else {"connection_class": connection_class}
    store = AsyncpgJobStore(apg_dsn, max_size=1, connect_kwargs=kwargs)
    resets: list[str] = []

    def log(record: Any) -> None:
        if "RESET ALL" in record.query:
            resets.append(record.query)

    try:
        async with store.autocommit() as conn:
            clean = tuple(await conn.fetchrow(_SESSION))
            conn.add_query_logger(log)
        async with store.transaction() if block == "transaction" else store.autocommit() as conn:
            resets.clear()  # the first block's own reset
            for statement in [
                "CREATE TEMP TABLE scratch (x int)",
                "SELECT pg_advisory_lock(4242)",
                "LISTEN elsewhere",
                "SET search_path TO other",
                "SET default_transaction_read_only = on",
                f'SET ROLE "{role}"',  # not undone by asyncpg's own reset (RESET ALL)
            ]:
                await conn.execute(statement)
        # The store's own connection class resets in one round trip, the COMMIT's after
        # a transaction; a caller's class gets asyncpg's reset query and then the store's.
        assert len(resets) == (1 if connection_class is None else 2)
        with_commit = connection_class is None and block == "transaction"
        assert resets[0].startswith("COMMIT;") == with_commit
        async with store.autocommit() as conn:
            conn.remove_query_logger(log)
            assert tuple(await conn.fetchrow(_SESSION)) == clean
        [result] = await store.enqueue([_req(idempotency_key="k")])
        [job] = await store.claim(_claim(cluster_limits={"apg.job": 1}))
        assert job.id == result.id
        assert await store.complete([Completion(job.lease, Succeeded())]) == [True]
    finally:
        await store.close()
        await db.execute(f'DROP ROLE "{role}"')


async def test_a_lent_transaction_whose_commit_fails_is_rolled_back_and_reset(
    apg_dsn: str, db: Any
) -> None:
    await db.execute(
        "DROP TABLE IF EXISTS deferred; CREATE TABLE deferred (id int PRIMARY KEY, "
        "parent int REFERENCES deferred DEFERRABLE INITIALLY DEFERRED)"
    )
    store = AsyncpgJobStore(apg_dsn, max_size=1)

    async def orphan() -> None:
        async with store.transaction() as tx:
            await tx.execute("SET search_path TO other, public")
            async with tx.transaction():  # a savepoint, as on any asyncpg connection
                await tx.execute("INSERT INTO deferred VALUES (1, 2)")  # fails at COMMIT

    try:
        with pytest.raises(asyncpg.ForeignKeyViolationError):
            await orphan()
        assert await db.fetchval("SELECT count(*) FROM deferred") == 0
        async with store.autocommit() as conn:
            assert await conn.fetchval("SHOW search_path") == '"$user", public'
        [result] = await store.enqueue([_req()])
        [job] = await store.claim(_claim())
        assert job.id == result.id
    finally:
        await store.close()
        await db.execute("DROP TABLE deferred")


# ---- the connection kept for single statements -------------------------------------------


def _driver(store: AsyncpgJobStore) -> AsyncpgDriver:
    driver = store._driver
    assert isinstance(driver, AsyncpgDriver)
    return driver


def _released(proxy: Any) -> bool:
    try:
        return bool(proxy.is_closed())
    except asyncpg.InterfaceError:  # the pool took the closed connection back
        return True


async def _backend_pid(conn: Any) -> int:
    pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid


async def test_single_statements_keep_one_connection_beside_max_size(apg_dsn: str) -> None:
    store = AsyncpgJobStore(apg_dsn, max_size=1)
    driver = _driver(store)
    try:
        [first] = await store.enqueue([_req()])
        async with driver.acquire_statement() as kept:
            pid = await _backend_pid(kept)
            # While it is busy, a statement takes a pooled connection instead.
            async with driver.acquire_statement() as other:
                assert await _backend_pid(other) != pid
        async with driver.acquire_statement() as again:
            assert await _backend_pid(again) == pid  # kept, not returned to the pool
        # max_size connections stay for everything else: a lent transaction held open
        # does not block the store's own statements (nor they it).
        async with store.transaction() as tx:
            assert await _backend_pid(tx) != pid
            [second] = await store.enqueue([_req()])
            assert await store.get(first.id) is not None
        assert second.id > first.id
        assert store.pool is not None
        assert store.pool.get_size() == 2
    finally:
        await store.close()
    assert kept_now(driver) is None


def kept_now(driver: Any) -> Any:
    """The connection ``driver`` keeps for the store's own statements now, if any."""
    return None if driver._kept is None else driver._kept.connection


async def test_a_kept_connection_that_fails_or_is_cancelled_goes_back_to_the_pool(
    apg_dsn: str,
) -> None:
    store = AsyncpgJobStore(apg_dsn, max_size=2)
    driver = _driver(store)
    try:
        await store.enqueue([_req()])
        assert kept_now(driver) is not None
        with pytest.raises(asyncpg.UndefinedTableError):
            async with driver.acquire_statement() as conn:
                await conn.execute("SELECT * FROM no_such_table")
        assert kept_now(driver) is None  # back in the pool, which resets it
        await store.enqueue([_req()])
        assert kept_now(driver) is not None  # the next statement keeps one again
        started = asyncio.Event()

        async def sleep_on_it() -> None:
            async with driver.acquire_statement() as conn:
                started.set()
                await conn.execute("SELECT pg_sleep(30)")

        task = asyncio.ensure_future(sleep_on_it())
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert kept_now(driver) is None  # released: the pool waits for the cancellation
        async with driver.acquire_statement() as conn:
            assert await conn.fetchval("SELECT 1") == 1
        [job] = await store.enqueue([_req()])
        assert await store.get(job.id) is not None
    finally:
        await asyncio.wait_for(store.close(), 10)


async def test_a_kept_connection_the_server_ended_is_replaced(apg_dsn: str, db: Any) -> None:
    store = AsyncpgJobStore(apg_dsn, max_size=1)
    driver = _driver(store)
    try:
        await store.enqueue([_req()])
        async with driver.acquire_statement() as kept:
            pid = await _backend_pid(kept)
        await db.execute("SELECT pg_terminate_backend($1)", pid)
        deadline = time.monotonic() + 10
        while not _released(kept):  # the server's goodbye reaches the client
            assert time.monotonic() < deadline, "the kept connection never saw its end"
            await asyncio.sleep(0.01)
        [job] = await store.enqueue([_req()])  # not a StoreError: a new one is kept
        assert await store.get(job.id) is not None
        async with driver.acquire_statement() as conn:
            assert await _backend_pid(conn) != pid
    finally:
        await store.close()


async def test_store_on_a_caller_pool_leaves_it_open(apg_dsn: str) -> None:
    pool = await asyncpg.create_pool(apg_dsn, min_size=1, max_size=3)
    try:
        store = AsyncpgJobStore(pool)
        assert store.pool is not None
        [result] = await store.enqueue([_req()])
        async with store.transaction() as tx:
            assert await store.get(result.id, connection=tx) is not None
        await store.register_worker(WorkerInfo(id="w", host="h", pid=1))
        await store.close()
        assert not pool.is_closing()
        assert await pool.fetchval("SELECT count(*) FROM skiplock.workers") == 1
        assert pool.get_idle_size() == pool.get_size()  # the heartbeat connection came back
    finally:
        await pool.close()


async def test_store_rejects_something_that_is_not_a_pool() -> None:
    not_a_pool: Any = 42
    with pytest.raises(TypeError, match=r"DSN string or an asyncpg\.Pool"):
        AsyncpgJobStore(not_a_pool)


async def test_statement_timeout_bounds_pooled_connections(apg_dsn: str) -> None:
    store = AsyncpgJobStore(apg_dsn, statement_timeout=timedelta(milliseconds=200))
    try:
        async with store.transaction() as tx:
            assert await tx.fetchval("SHOW statement_timeout") == "200ms"
            with pytest.raises(asyncpg.QueryCanceledError):
                await tx.execute("SELECT pg_sleep(5)")
    finally:
        await store.close()


async def test_unreachable_server_raises_database_unavailable() -> None:
    store = AsyncpgJobStore("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(DatabaseUnavailableError, match="cannot get a PostgreSQL connection"):
            await store.open()
        with pytest.raises(DatabaseUnavailableError, match="the database is unreachable"):
            await store.counts()
    finally:
        await store.close()


async def test_a_read_past_read_timeout_raises_database_unavailable(apg_dsn: str) -> None:
    store = AsyncpgJobStore(apg_dsn, read_timeout=0.2)
    locker = await asyncpg.connect(apg_dsn)
    try:
        await store.open()
        lock = locker.transaction()
        await lock.start()
        await locker.execute(
            "LOCK TABLE skiplock.jobs, skiplock.job_counts, skiplock.job_count_deltas"
            " IN ACCESS EXCLUSIVE MODE"
        )
        with pytest.raises(DatabaseUnavailableError, match="read timeout"):
            await store.counts()
        await lock.rollback()
        assert await store.counts() == []
    finally:
        await locker.close()
        await store.close()


async def test_store_connects_once_its_database_appears(later_database: LaterDatabase) -> None:
    store = AsyncpgJobStore(later_database.dsn, timeout=2.0)
    try:
        with pytest.raises(StoreError, match="does not exist"):
            await store.now()
        later_database.create()
        await apply_schema(later_database.dsn)
        assert await store.counts() == []
    finally:
        await store.close()


async def test_close_is_final(store: AsyncpgJobStore) -> None:
    await store.counts()
    await store.close()
    with pytest.raises(RuntimeError, match="closed"):
        await store.counts()


# ---- schema check --------------------------------------------------------------------------


async def test_store_refuses_a_database_without_the_schema(
    make_database: Callable[[], str],
) -> None:
    store = AsyncpgJobStore(make_database())
    try:
        with pytest.raises(SchemaVersionError, match="not installed"):
            await store.open()
        assert await store.apply_schema() == [m.name for m in migrations()]
        assert await store.apply_schema() == []
        await store.open()
        assert (await store.check_schema()).up_to_date
    finally:
        await store.close()


async def test_worker_refuses_an_older_schema(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    await apply_schema(dsn)
    # As if the latest migration were new.
    latest = migrations()[-1]
    await _script(dsn, f"DELETE FROM skiplock.schema_migrations WHERE version = {latest.version}")
    status = await schema_status(dsn)
    assert status.pending == (latest.name,)
    store = AsyncpgJobStore(dsn)
    engine = AsyncEngine(store, Settings(poll_interval=0.05))

    @engine.processor("apg.job")
    async def job(payload: Any) -> None:
        raise AssertionError("never runs")

    try:
        with pytest.raises(SchemaVersionError, match="older than this code"):
            await engine.worker(install_signal_handlers=False).run_until_idle()
        conn = await asyncpg.connect(dsn)
        try:
            with pytest.raises(SchemaVersionError):
                await store.enqueue([_req()], connection=conn)
        finally:
            await conn.close()
    finally:
        await store.close()


# ---- workers and maintenance --------------------------------------------------------------


async def test_heartbeat_uses_the_database_clock(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    await store.register_worker(WorkerInfo(id="hb", host="h", pid=7, kinds=frozenset({"a"})))
    before = await store.now()
    await store.heartbeat("hb")
    after = await store.now()
    [(beat, kinds)] = await db.fetch("SELECT heartbeat_at, kinds FROM skiplock.workers")
    assert before <= beat <= after
    assert kinds == ["a"]
    await store.unregister_worker("hb")
    assert await db.fetch("SELECT id FROM skiplock.workers") == []


async def test_heartbeat_survives_a_lost_connection(store: AsyncpgJobStore, apg_dsn: str) -> None:
    await store.register_worker(WorkerInfo(id="hb", host="h", pid=7))
    await _script(
        apg_dsn,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    await store.heartbeat("hb")  # the dedicated connection reconnects once
    await store.heartbeat("hb")
    [job] = await store.enqueue([_req()])  # and the pool replaced its connections
    assert await store.get(job.id) is not None
    conn = await asyncpg.connect(apg_dsn)
    try:
        assert await conn.fetch("SELECT id FROM skiplock.workers") == [("hb",)]
    finally:
        await conn.close()


async def test_recover_stale_runs_on_one_node_at_a_time(
    store: AsyncpgJobStore, apg_dsn: str
) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim("crashed"))
    key = maintenance_lock_key("skiplock", "recover")
    other_node = await asyncpg.connect(apg_dsn)
    try:
        await other_node.execute("SELECT pg_advisory_lock($1)", key)
        assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == []
        await other_node.execute("SELECT pg_advisory_unlock($1)", key)
    finally:
        await other_node.close()
    assert await store.recover_stale(default_ttl=timedelta(hours=1), ttls={}) == [job.id]


async def test_purge_archives_in_batches(store: AsyncpgJobStore, apg_dsn: str, db: Any) -> None:
    await store.enqueue([_req(payload={"n": i}) for i in range(5)])
    jobs = await store.claim(_claim())
    await store.complete([Completion(lease=j.lease, outcome=Succeeded()) for j in jobs])
    assert await store.purge(older_than=timedelta(0), archive=True, batch_size=2) == 5
    assert await _job_count(db) == 0
    archived = await db.fetch("SELECT id FROM skiplock.jobs_archive ORDER BY id")
    assert archived == [(j.id,) for j in sorted(jobs, key=lambda j: j.id)]


# ---- concurrency and bulk ------------------------------------------------------------------


async def test_duplicate_enqueue_from_two_connections_creates_one_job(
    store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    first = await asyncpg.connect(apg_dsn)
    try:
        tx = first.transaction()
        await tx.start()
        [created] = await store.enqueue([_req(idempotency_key="same")], connection=first)
        # A second enqueue of the key (own pooled connection) waits for the first...
        task = spawn(store.enqueue, [_req(idempotency_key="same")])

        async def second_is_waiting() -> bool:
            rows = await db.fetch(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            return bool(rows[0][0])

        deadline = time.monotonic() + 10
        while not await second_is_waiting():
            assert time.monotonic() < deadline, "the second enqueue never waited"
            await sleep(0.01)
        await tx.commit()  # ...and then resolves to the committed job.
        [second] = await join(task)
    finally:
        await first.close()
    assert created.created
    assert (second.id, second.created) == (created.id, False)
    assert await _job_count(db) == 1


async def test_enqueue_100k_jobs_in_one_call(store: AsyncpgJobStore, apg_dsn: str, db: Any) -> None:
    requests = [_req("apg.bulk", payload={"i": i}) for i in range(100_000)]
    results = await store.enqueue(requests)
    ids = [r.id for r in results]
    assert len(set(ids)) == 100_000
    assert ids == sorted(ids)  # ids follow the request order
    assert await _job_count(db) == 100_000
    job = await store.get(ids[12_345])
    assert job is not None
    assert job.payload == {"i": 12_345}


@pytest.mark.parametrize("size", [10, COPY_THRESHOLD], ids=["insert", "copy"])
async def test_bulk_enqueue_is_all_or_nothing(
    size: int, store: AsyncpgJobStore, apg_dsn: str, db: Any
) -> None:
    bad = _req("apg.bulk", priority=70_000)  # out of smallint range: refused (by COPY's encoder)
    with pytest.raises((asyncpg.PostgresError, OverflowError)):
        await store.enqueue([_req("apg.bulk") for _ in range(size)] + [bad])
    assert await _job_count(db) == 0


@pytest.mark.parametrize("size", [1, 10, COPY_THRESHOLD], ids=["one", "insert", "copy"])
async def test_enqueue_keeps_explicit_max_attempts_on_every_path(
    size: int, store: AsyncpgJobStore, db: Any
) -> None:
    requests = [_req(max_attempts=2, explicit_max_attempts=i % 2 == 0) for i in range(size)]
    results = await store.enqueue(requests)
    rows = await db.fetch("SELECT id, explicit_max_attempts FROM skiplock.jobs ORDER BY id")
    assert [tuple(row) for row in rows] == [
        (r.id, q.explicit_max_attempts) for r, q in zip(results, requests, strict=True)
    ]


# ---- starts and completion times -----------------------------------------------------------


async def test_completion_in_a_transaction_is_stamped_when_written(store: AsyncpgJobStore) -> None:
    await store.enqueue([_req()])
    [job] = await store.claim(_claim(start_now=0))
    assert await store.start([job.lease]) == [True]
    pause = timedelta(milliseconds=200)
    async with store.transaction() as tx:
        began = await tx.fetchval("SELECT now()")
        await tx.execute("SELECT pg_sleep($1)", pause.total_seconds())
        assert await store.complete([Completion(job.lease, Succeeded())], connection=tx) == [True]
    done = await store.get(job.id)
    assert done is not None
    assert done.completed_at is not None
    assert done.completed_at - began >= pause
    assert done.attempts == 1
