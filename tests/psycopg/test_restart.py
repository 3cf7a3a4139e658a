"""Fast recovery (issue 29, point 5): after a PostgreSQL restart a psycopg worker claims
again within 2 s of the server accepting connections. The test restarts a throw-away
server of its own (tests/pgcluster.py); docs/performance.md has the 15 s and 30 s
numbers of the same scenario."""

from __future__ import annotations

from skiplock.adapters.psycopg._connections import (
    RECONNECT_FIRST,
    RECONNECT_INTERVAL,
    CappedBackoff,
)
from tests.pgcluster import check_recovery


def test_a_worker_claims_within_two_seconds_of_a_restarted_server_accepting() -> None:
    check_recovery("psycopg", [5.0, 15.0])


def test_the_pools_reconnection_waits_start_short_and_never_exceed_a_second() -> None:
    # psycopg_pool's own schedule doubles from 1 s up to its reconnect_timeout (5 min).
    attempt = CappedBackoff(timeout=300.0)
    waits = []
    for second in range(40):  # one failed attempt a second, as in a long outage
        attempt.update_delay(1000.0 + second)
        waits.append(attempt.delay)
    assert waits[0] <= 2 * RECONNECT_FIRST
    assert max(waits) <= RECONNECT_INTERVAL
    assert min(waits[10:]) >= RECONNECT_INTERVAL / 2  # not hammering either
