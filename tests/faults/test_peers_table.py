"""The ``--competitors`` table (benchmarks/faults/peers.py) covers every scenario: each
one runs on the peers or says why it does not apply, and what a peer cannot express in
a scenario it runs is said next to its figures. No database, no peer needed."""

from __future__ import annotations

from benchmarks.faults import peers
from benchmarks.faults.scenarios import SCENARIOS


def test_every_scenario_runs_on_the_peers_or_says_why_not() -> None:
    ran, skipped = set(peers.SCENARIOS), set(peers.NOT_APPLICABLE)
    assert ran | skipped == set(SCENARIOS)
    assert not ran & skipped
    # The ported ones: the poison job, PgBouncer, failover to either standby.
    assert {"poison", "pgbouncer-restart", "failover-sync", "failover-async"} <= ran


def test_what_a_peer_cannot_express_is_said_for_a_scenario_it_runs() -> None:
    assert set(peers.CAVEATS) <= set(peers.SCENARIOS)
    assert "LISTEN" in peers.CAVEATS["pgbouncer-restart"]
