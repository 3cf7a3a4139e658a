"""Fast recovery (issue 29, point 5): after a PostgreSQL restart an asyncpg worker
claims again within 2 s of the server accepting connections (tests/pgcluster.py; the
15 s and 30 s numbers are in docs/performance.md)."""

from __future__ import annotations

from tests.pgcluster import check_recovery


def test_a_worker_claims_within_two_seconds_of_a_restarted_server_accepting() -> None:
    check_recovery("asyncpg", [5.0])
