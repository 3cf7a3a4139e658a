"""The running totals behind counts, health and throughput (migration 0011) under
concurrency: writers never wait for each other or for a rollup because of them, a rollup
folds only what committed, and every read equals a recount in its own snapshot while
writers and rollups run.
"""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock.adapters._pg._sql import convert, lock_key, neutral_query
from tests.pgfixtures import create_database, drop_database

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

SCHEMA = "skiplock"
KEY = lock_key(SCHEMA, "counts")
COUNTS = convert(neutral_query("counts", SCHEMA), "numeric").text
RECOUNT = "SELECT status, kind, tenant_id, count(*) FROM skiplock.jobs GROUP BY 1, 2, 3"
FINISHED = "SELECT f.minute, f.kind, f.status, f.n FROM skiplock.job_finished_minutes AS f"
RECOUNT_FINISHED = """
    SELECT skiplock.finished_minute(status, completed_at), kind, status, count(*)
    FROM skiplock.jobs
    WHERE skiplock.finished_minute(status, completed_at) IS NOT NULL
    GROUP BY 1, 2, 3
"""


@pytest.fixture
def dsn() -> Iterator[str]:
    name, dsn = create_database(with_schema=True)
    try:
        yield dsn
    finally:
        drop_database(name)


def _counts(conn: psycopg.Connection[Any]) -> set[tuple[Any, ...]]:
    return {(r[0], r[1], r[2], r[3]) for r in conn.execute(COUNTS).fetchall() if r[1] is not None}


def _recount(conn: psycopg.Connection[Any]) -> set[tuple[Any, ...]]:
    return {tuple(r) for r in conn.execute(RECOUNT).fetchall()}


def _roll_up(conn: psycopg.Connection[Any]) -> int | None:
    [(folded,)] = conn.execute("SELECT skiplock.roll_up_job_counts(%s)", [KEY]).fetchall()
    return folded  # type: ignore[no-any-return]


def test_writers_and_rollups_never_wait_for_an_open_transaction(dsn: str) -> None:
    """A transaction that changed a group's counts and stays open blocks neither another
    writer of the same group nor a rollup (lock_timeout would fail them); the rollup
    leaves its uncommitted delta, which counts once it commits."""
    with (
        psycopg.connect(dsn, autocommit=True) as setup,
        psycopg.connect(dsn) as holder,
        psycopg.connect(dsn, autocommit=True) as other,
    ):
        setup.execute("INSERT INTO skiplock.jobs (kind) SELECT 'k' FROM generate_series(1, 2)")
        [(first,), (second,)] = setup.execute("SELECT id FROM skiplock.jobs ORDER BY id")
        holder.execute("UPDATE skiplock.jobs SET status = 'running' WHERE id = %s", [first])
        other.execute("SET lock_timeout = '1s'")
        other.execute("UPDATE skiplock.jobs SET status = 'dead' WHERE id = %s", [second])
        other.execute("INSERT INTO skiplock.jobs (kind) VALUES ('k')")
        # The committed changes: two inserts (a row each) and an update (-1 pending,
        # +1 dead); the open transaction's update stays for a later rollup.
        assert _roll_up(other) == 4
        assert (
            _counts(other) == _recount(other) == {("pending", "k", None, 2), ("dead", "k", None, 1)}
        )
        holder.commit()
        assert (
            _counts(other)
            == _recount(other)
            == {
                ("running", "k", None, 1),
                ("dead", "k", None, 1),
                ("pending", "k", None, 1),
            }
        )
        assert _roll_up(other) == 2
        assert other.execute("SELECT count(*) FROM skiplock.job_count_deltas").fetchall() == [(0,)]
        assert _counts(other) == _recount(other)


def test_a_rollup_in_progress_makes_another_skip(dsn: str) -> None:
    with psycopg.connect(dsn) as first, psycopg.connect(dsn, autocommit=True) as second:
        first.execute("INSERT INTO skiplock.jobs (kind) VALUES ('k')")
        assert _roll_up(first) == 1  # holds the advisory lock until it commits
        assert _roll_up(second) is None
        first.commit()
        assert _roll_up(second) == 0


def _writer(dsn: str, seed: int, rounds: int, errors: list[BaseException]) -> None:
    rng = random.Random(seed)
    try:
        with psycopg.connect(dsn) as conn:
            for _ in range(rounds):
                kind = f"k{rng.randrange(3)}"
                tenant = rng.choice([None, "a", "b"])
                conn.execute(
                    "INSERT INTO skiplock.jobs (kind, tenant_id) SELECT %s, %s"
                    " FROM generate_series(1, %s)",
                    [kind, tenant, rng.randrange(1, 6)],
                )
                # Claim some pending jobs, finish some running ones, delete some finished.
                conn.execute(
                    "UPDATE skiplock.jobs SET status = 'running' WHERE id IN (SELECT id FROM"
                    " skiplock.jobs WHERE status = 'pending' LIMIT 3 FOR UPDATE SKIP LOCKED)"
                )
                conn.execute(
                    "UPDATE skiplock.jobs SET status = %s, completed_at = now()"
                    " WHERE id IN (SELECT id FROM skiplock.jobs WHERE status = 'running'"
                    " LIMIT 2 FOR UPDATE SKIP LOCKED)",
                    [rng.choice(["succeeded", "dead", "failed", "cancelled"])],
                )
                conn.execute(
                    "DELETE FROM skiplock.jobs WHERE id IN (SELECT id FROM skiplock.jobs"
                    " WHERE status <> 'pending' AND status <> 'running'"
                    " LIMIT 1 FOR UPDATE SKIP LOCKED)"
                )
                if rng.random() < 0.25:
                    conn.rollback()  # its deltas must vanish with it
                else:
                    conn.commit()
    except BaseException as exc:
        errors.append(exc)


def test_reads_equal_a_recount_while_writers_and_rollups_run(dsn: str) -> None:
    errors: list[BaseException] = []
    writers = [threading.Thread(target=_writer, args=(dsn, seed, 60, errors)) for seed in range(4)]
    for thread in writers:
        thread.start()
    checks = 0
    with psycopg.connect(dsn, autocommit=True) as folder, psycopg.connect(dsn) as reader:
        while any(t.is_alive() for t in writers) or checks < 3:
            _roll_up(folder)
            with reader.transaction():
                reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                assert _counts(reader) == _recount(reader)
                finished = {tuple(r) for r in reader.execute(FINISHED).fetchall()}
                deltas = reader.execute("SELECT count(*) FROM skiplock.job_count_deltas").fetchall()
                if deltas == [(0,)]:
                    recount = {tuple(r) for r in reader.execute(RECOUNT_FINISHED).fetchall()}
                    assert finished == recount
            checks += 1
        for thread in writers:
            thread.join()
        assert not errors, errors
        _roll_up(folder)
        assert folder.execute("SELECT count(*) FROM skiplock.job_count_deltas").fetchall() == [(0,)]
        totals = {
            tuple(r)
            for r in folder.execute(
                "SELECT status, kind, tenant_id, n FROM skiplock.job_counts"
            ).fetchall()
        }
        assert totals == _recount(folder)
        finished = {tuple(r) for r in folder.execute(FINISHED).fetchall()}
        assert finished == {tuple(r) for r in folder.execute(RECOUNT_FINISHED).fetchall()}
        assert checks >= 3
