"""Pooled connections of the psycopg store on a real server: a connection lent to user code
goes back to the pool as it came out (R10), and connections the server ended while they
sat in the pool cost no failed operation and no poll interval."""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock import AsyncEngine, JobContext, JobState, Settings
from skiplock._compat_async import join, sleep, spawn
from skiplock.adapters._pg._driver_async import SESSION_RESET
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.adapters.psycopg import _driver_async as driver_module
from skiplock.core import ClaimRequest, Completion, EnqueueRequest, StoreError, Succeeded
from tests.pgfixtures import store_fixture
from tests.pghelpers import deferred_reference_table, sql

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

#: The session state a processor leaves behind in the tests below (read-only last: in
#: autocommit mode it applies to the statements after it).
_DIRTY = [
    "CREATE TEMP TABLE IF NOT EXISTS scratch (x int)",
    "SELECT pg_advisory_lock(4242)",
    "LISTEN elsewhere",
    "SET search_path TO other",
    "SET statement_timeout = '12345ms'",
    "SET default_transaction_read_only = on",
]

_SESSION = (
    "SELECT current_user, current_setting('search_path'), "
    "current_setting('default_transaction_read_only'), current_setting('statement_timeout'), "
    "(SELECT count(*) FROM pg_listening_channels()), "
    "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), "
    "(SELECT count(*) FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't')"
)


@pytest.fixture
def role(pg_dsn: str) -> Iterator[str]:
    """A role without any privilege, for a processor to ``SET ROLE`` to."""
    name = f"skiplock_nobody_{uuid.uuid4().hex[:8]}"
    sql(pg_dsn, f'CREATE ROLE "{name}"')
    yield name
    sql(pg_dsn, f'DROP ROLE "{name}"')


# One connection: whatever a block leaves on it, the next operation meets.
store = store_fixture(AsyncPsycopgJobStore, min_size=1, max_size=1)


async def _session(store: AsyncPsycopgJobStore) -> tuple[Any, ...]:
    async with store.autocommit() as conn:
        cur = await conn.execute(_SESSION)
        row = await cur.fetchone()
    assert row is not None
    return tuple(row)


async def _enqueue_claim_complete(store: AsyncPsycopgJobStore) -> None:
    # A keyed enqueue and a claim with a cluster limit run in transactions of their own.
    [result] = await store.enqueue([EnqueueRequest(kind="pg.after", idempotency_key="k")])
    request = ClaimRequest(worker_id="w", limit=1, cluster_limits={"pg.after": 1})
    [job] = await store.claim(request)
    assert job.id == result.id
    assert await store.complete([Completion(job.lease, Succeeded())]) == [True]


async def _terminate(dsn: str, pids: list[int]) -> None:
    """End those server processes and wait until they are gone, as after a restart."""
    sql(dsn, "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", pids)
    deadline = time.monotonic() + 10
    while sql(dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", pids):
        assert time.monotonic() < deadline, f"backends {pids} still there"
        await sleep(0.01)


def _other_backends(dsn: str) -> list[int]:
    rows = sql(
        dsn,
        "SELECT pid FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    return [int(pid) for (pid,) in rows]


async def _eventually(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await sleep(0.01)


# ---- what user code leaves on a lent connection ---------------------------------------------


async def test_session_state_left_in_a_transaction_is_reset(
    store: AsyncPsycopgJobStore, role: str
) -> None:
    clean = await _session(store)
    async with store.transaction() as tx:
        for statement in [*_DIRTY, f'SET ROLE "{role}"']:
            await tx.execute(statement)
    assert await _session(store) == clean
    await _enqueue_claim_complete(store)


async def test_session_state_left_in_an_autocommit_block_is_reset(
    store: AsyncPsycopgJobStore, role: str
) -> None:
    clean = await _session(store)
    async with store.autocommit() as conn:
        for statement in [*_DIRTY, f'SET SESSION AUTHORIZATION "{role}"']:
            await conn.execute(statement)
        await conn.execute("BEGIN")  # and a transaction left open
    assert await _session(store) == clean
    await _enqueue_claim_complete(store)


async def test_python_side_settings_left_on_a_lent_connection_are_restored(
    store: AsyncPsycopgJobStore,
) -> None:
    async with store.autocommit() as conn:
        # psycopg would begin the store's own transactions READ ONLY.
        await conn.set_read_only(True)
        await conn.set_isolation_level(psycopg.IsolationLevel.SERIALIZABLE)
        conn.prepare_threshold = None
    async with store.transaction() as tx:
        assert (tx.read_only, tx.isolation_level, tx.prepare_threshold) == (None, None, 5)
        cur = await tx.execute("SHOW transaction_read_only")
        assert await cur.fetchone() == ("off",)
    await _enqueue_claim_complete(store)


async def test_the_store_statement_timeout_survives_the_reset(pg_dsn: str) -> None:
    async with AsyncPsycopgJobStore(pg_dsn, max_size=1, statement_timeout=30) as store:
        async with store.transaction() as tx:
            await tx.execute("SET statement_timeout = '1ms'")
        async with store.autocommit() as conn:
            cur = await conn.execute("SHOW statement_timeout")
            assert await cur.fetchone() == ("30s",)


async def test_a_transactional_processor_that_changes_its_session_harms_no_later_job(
    pg_dsn: str,
) -> None:
    # The issue: jobs went dead and enqueues failed (ReadOnlySqlTransaction) once a
    # processor had changed its pooled connection's session.
    store = AsyncPsycopgJobStore(pg_dsn, min_size=1, max_size=2)
    engine = AsyncEngine(store, Settings(poll_interval=0.05))
    seen: list[tuple[Any, ...]] = []

    @engine.processor("pg.dirty", transactional=True)
    async def dirty(payload: int, ctx: JobContext) -> None:
        cur = await ctx.connection.execute(_SESSION)
        row = await cur.fetchone()
        assert row is not None
        seen.append(tuple(row))
        for statement in _DIRTY:  # the job's own completion follows in this transaction
            await ctx.connection.execute(statement)

    try:
        ids = [(await engine.enqueue("pg.dirty", i)).id for i in range(6)]
        worker = engine.worker(concurrency=1, install_signal_handlers=False)
        assert await worker.run_until_idle() == 6
        ids.append((await engine.enqueue("pg.dirty", 6)).id)
        assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
        states = [job.state for job in [await engine.get_job(i) for i in ids]]
        assert states == [JobState.SUCCEEDED] * 7
        assert len(set(seen)) == 1  # every job began in the same, clean session
        assert seen[0][1:3] == ('"$user", public', "off")
    finally:
        await store.close()


async def test_the_reset_after_a_transaction_travels_with_its_commit(
    store: AsyncPsycopgJobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    script = driver_module.AsyncPsycopgDriver.script

    async def recording(self: Any, conn: Any, text: str) -> None:
        sent.append(text)
        await script(self, conn, text)

    monkeypatch.setattr(driver_module.AsyncPsycopgDriver, "script", recording)
    async with store.transaction() as tx:
        await tx.execute("SET search_path TO other")
    # BEGIN, then COMMIT and the reset in one round trip: no reset of its own.
    assert sent == ["BEGIN", f"COMMIT; {SESSION_RESET}"]
    async with store.autocommit() as conn:
        cur = await conn.execute("SHOW search_path")
        assert await cur.fetchone() == ('"$user", public',)


async def test_a_transaction_whose_commit_fails_is_rolled_back_and_reset(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    table = deferred_reference_table(pg_dsn)
    try:
        clean = await _session(store)

        async def orphan() -> None:
            async with store.transaction() as tx:
                await tx.execute("SET search_path TO other, public")
                await tx.execute(f"INSERT INTO {table} VALUES (1, 2)")  # fails at COMMIT

        with pytest.raises(psycopg.errors.ForeignKeyViolation):
            await orphan()
        assert sql(pg_dsn, f"SELECT count(*) FROM {table}") == [(0,)]
        assert await _session(store) == clean
        await _enqueue_claim_complete(store)
    finally:
        sql(pg_dsn, f"DROP TABLE {table}")


async def test_a_block_that_commits_its_lent_transaction_is_reported(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    table = f"ended_{uuid.uuid4().hex[:8]}"
    sql(pg_dsn, f"CREATE TABLE {table} (id int)")

    async def commits_inside() -> None:
        async with store.transaction() as tx:
            await tx.execute("SET search_path TO other, public")
            await tx.execute(f"INSERT INTO public.{table} VALUES (1)")
            await tx.commit()

    try:
        clean = await _session(store)
        with pytest.raises(psycopg.ProgrammingError, match="ended inside its block"):
            await commits_inside()
        assert await _session(store) == clean  # still reset
        await _enqueue_claim_complete(store)
    finally:
        sql(pg_dsn, f"DROP TABLE {table}")


async def test_a_transactional_job_that_commits_its_transaction_fails(pg_dsn: str) -> None:
    store = AsyncPsycopgJobStore(pg_dsn, min_size=1, max_size=2)
    engine = AsyncEngine(store, Settings(poll_interval=0.05))

    @engine.processor("pg.commits", transactional=True, max_attempts=1)
    async def commits(payload: int, ctx: JobContext) -> None:
        await ctx.connection.execute("SELECT 1")
        await ctx.connection.commit()

    try:
        job_id = (await engine.enqueue("pg.commits", 1)).id
        assert await engine.worker(install_signal_handlers=False).run_until_idle() == 1
        job = await engine.get_job(job_id)
        assert job is not None
        # Its completion was refused: the job is not recorded as succeeded outside the
        # transaction its processor ended.
        assert job.state == JobState.DEAD
        assert job.last_error is not None
        assert "ended inside its block" in job.last_error
    finally:
        await store.close()


async def test_a_transaction_inside_a_lent_transaction_is_a_savepoint(
    store: AsyncPsycopgJobStore, pg_dsn: str
) -> None:
    table = f"nested_{uuid.uuid4().hex[:8]}"
    sql(pg_dsn, f"CREATE TABLE {table} (id int)")

    async def insert(conn: Any, value: int, *, then_fail: bool = False) -> None:
        await conn.execute(f"INSERT INTO {table} VALUES (%s)", [value])
        if then_fail:
            raise KeyError(value)

    async def nested(tx: Any, value: int, *, then_fail: bool = False) -> None:
        async with tx.transaction():
            await insert(tx, value, then_fail=then_fail)

    async def alone(value: int, *, then_fail: bool = False) -> None:
        async with store.transaction() as tx:
            await insert(tx, value, then_fail=then_fail)

    try:
        async with store.transaction() as tx:
            await insert(tx, 1)
            with pytest.raises(KeyError):
                await nested(tx, 2, then_fail=True)
            await nested(tx, 3)
        assert sql(pg_dsn, f"SELECT id FROM {table} ORDER BY id") == [(1,), (3,)]
        with pytest.raises(KeyError):
            await alone(4, then_fail=True)
        assert sql(pg_dsn, f"SELECT id FROM {table} ORDER BY id") == [(1,), (3,)]
    finally:
        sql(pg_dsn, f"DROP TABLE {table}")


# ---- connections the server ended ------------------------------------------------------------


async def test_enqueues_after_every_pooled_connection_was_ended_all_succeed(pg_dsn: str) -> None:
    async with AsyncPsycopgJobStore(pg_dsn, min_size=4, max_size=4) as store:
        await _eventually(
            lambda: store.pool.get_stats().get("pool_available", 0) >= 4, 10, "a full pool"
        )
        await _terminate(pg_dsn, _other_backends(pg_dsn))
        for i in range(8):  # the issue: 8 of 8 failed with AdminShutdown
            await store.enqueue([EnqueueRequest(kind="pg.after", payload=i)])
        assert [row[0] for row in sql(pg_dsn, "SELECT count(*) FROM skiplock.jobs")] == [8]


async def test_a_connection_that_dies_unseen_fails_one_operation_with_store_error(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As after a network partition: nothing on the socket tells before the statement.
    monkeypatch.setattr(driver_module, "has_input", lambda conn: False)
    async with AsyncPsycopgJobStore(pg_dsn, min_size=1, max_size=1) as store:
        await store.counts()
        ended = _other_backends(pg_dsn)  # the kept statement connection and the pool's
        await _terminate(pg_dsn, ended)
        with pytest.raises(StoreError, match="lost the PostgreSQL connection") as caught:
            await store.counts()
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        # Each connection that died unseen fails one operation; the pool replaces it.
        failures = 1
        while failures <= len(ended):
            try:
                assert await store.counts() == []
                break
            except StoreError:
                failures += 1
        assert failures <= len(ended)


async def test_an_idle_worker_picks_up_promptly_after_every_connection_was_ended(
    pg_dsn: str,
) -> None:
    # A poll interval far beyond the deadline below: the pickup must come from the
    # listener, which reconnects, not from polling after failed claims.
    store = AsyncPsycopgJobStore(pg_dsn, min_size=4, max_size=4)
    engine = AsyncEngine(store, Settings(poll_interval=30.0))
    done: list[int] = []

    @engine.processor("pg.after")
    async def after(payload: int, ctx: JobContext) -> None:
        done.append(payload)

    worker = engine.worker(concurrency=1, install_signal_handlers=False)
    task = spawn(worker.run)
    try:
        await engine.enqueue("pg.after", 0)
        await _eventually(lambda: done == [0], 10, "the first job")
        await _eventually(
            lambda: store.pool.get_stats().get("pool_available", 0) >= 4, 10, "a full pool"
        )
        # Every connection of the worker and the engine: pool, heartbeats, LISTEN.
        await _terminate(pg_dsn, _other_backends(pg_dsn))
        started = time.monotonic()
        for i in range(1, 9):
            await engine.enqueue("pg.after", i)
        await _eventually(lambda: sorted(done) == list(range(9)), 10, "the jobs enqueued after")
        assert time.monotonic() - started < 5.0
    finally:
        worker.stop()
        await join(task)
        await store.close()
