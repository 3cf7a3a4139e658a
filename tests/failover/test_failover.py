"""Failover (issue 43, point 2): a primary and its streaming standby of their own
(tests/pgcluster.py), producers and worker processes on a multi-host DSN
(``target_session_attrs=read-write``), the standby promoted mid-run; the ledger of every
acknowledged enqueue, start and completion compared with the new primary's jobs by the
fault suite's ledger check (tests/pgfailover.py, benchmarks/faults/ledger.py).
docs/failover.md has the numbers of the same scenarios."""

from __future__ import annotations

import pytest

from tests.pgfailover import CLAIM_AGAIN, Result, measure

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

#: Seconds the primary's WAL sender is frozen before the crash: the window of an
#: asynchronous standby, wide enough to lose commits on loopback.
STALL = 0.5


def check_recovered(result: Result) -> None:
    """What every failover must give: workers back on the new primary in time, never
    a crash, a dead job or a job left open."""
    print(result.line())  # the numbers, in pytest's output with -s
    assert result.claimed_after <= CLAIM_AGAIN, result.line()
    assert result.exit_codes
    assert all(code == 0 for code in result.exit_codes), result.exit_codes
    assert set(result.statuses) == {"succeeded"}, result.statuses


def check_nothing_lost(result: Result) -> None:
    """A synchronous standby: every acknowledged enqueue and completion survived."""
    check_recovered(result)
    # No window: any loss or undone completion fails the check, and so does a re-run
    # the failover does not explain, a job left open or a worker that died.
    assert result.verdict.ok, result.verdict.problems()
    assert result.lost == [], result.line()
    assert result.undone == [], result.line()
    assert not result.verdict.lost_in_window
    # Every re-run is explained (by the failover: with no window, none was undone).
    assert result.explained_reruns == len(result.verdict.reruns)
    assert result.unknown_committed <= result.unknown


def test_crash_with_a_synchronous_standby_loses_nothing() -> None:
    # The WAL sender frozen as for the asynchronous case: the commits wait for the
    # standby, so none of them is acknowledged, and none is lost.
    result = measure("psycopg", synchronous=True, how="crash", stall=STALL)
    check_nothing_lost(result)


def test_an_old_primary_answering_read_only_is_left_for_the_new_one() -> None:
    # The sessions pooled on the demoted primary get SQLSTATE 25006: dropped, and the
    # pools connect through the DSN to the promoted standby.
    check_nothing_lost(measure("psycopg", synchronous=True, how="read-only"))


def test_asyncpg_leaves_an_old_primary_answering_read_only() -> None:
    check_nothing_lost(measure("asyncpg", synchronous=True, how="read-only"))


def test_asyncpg_crash_with_a_synchronous_standby_loses_nothing() -> None:
    check_nothing_lost(measure("asyncpg", synchronous=True, how="crash"))


def test_an_asynchronous_standby_loses_only_what_it_was_never_sent() -> None:
    # PostgreSQL's guarantee without synchronous_standby_names: what was acknowledged
    # while the standby lagged is gone after the promotion. The ledger must account for
    # every loss with that window: enqueues acknowledged in it are missing, completions
    # acknowledged in it are undone (the job runs again), nothing else.
    result = measure("psycopg", synchronous=False, how="crash", stall=STALL)
    check_recovered(result)
    # The check counts the window's losses apart and fails on any other.
    assert result.verdict.ok, result.verdict.problems()
    assert not result.verdict.lost, result.line()
    assert result.outside_stall == 0, result.line()
    assert len(result.lost) <= result.acknowledged_in_stall
    assert len(result.undone) <= result.completed_in_stall
    # Every undone completion ran again (each job succeeded) while its worker kept
    # running: its heartbeat released it (measure drains before it stops a worker).


def test_sqlalchemy_leaves_an_old_primary_answering_read_only() -> None:
    # The SQLAlchemy store on an async engine with a multi-host URL (psycopg's dialect,
    # target_session_attrs=read-write): SQLAlchemy does not count SQLSTATE 25006 as a
    # disconnect, so the store invalidates that connection itself.
    check_nothing_lost(measure("sqlalchemy", synchronous=True, how="read-only"))
