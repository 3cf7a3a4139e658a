"""The ``--competitors`` table (benchmarks/faults/peers.py) covers every scenario: each
one runs on the peers or says why it does not apply, and what a peer cannot express in
a scenario it runs is said next to its figures. No database, no peer needed."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from benchmarks.faults import __main__ as cli
from benchmarks.faults import peers
from benchmarks.faults.ledger import Ledger, check
from benchmarks.faults.report import Outcome, markdown
from benchmarks.faults.scenarios import SCENARIOS, Scenario

if TYPE_CHECKING:
    import pytest


def test_every_scenario_runs_on_the_peers_or_says_why_not() -> None:
    ran, skipped = set(peers.SCENARIOS), set(peers.NOT_APPLICABLE)
    assert ran | skipped == set(SCENARIOS)
    assert not ran & skipped
    # The ported ones: the poison job, PgBouncer, failover to either standby.
    assert {"poison", "pgbouncer-restart", "failover-sync", "failover-async"} <= ran


def test_what_a_peer_cannot_express_is_said_for_a_scenario_it_runs() -> None:
    assert set(peers.CAVEATS) <= set(peers.SCENARIOS)
    assert "LISTEN" in peers.CAVEATS["pgbouncer-restart"]


def test_the_report_says_each_caveat_once_next_to_the_peers_figures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The runs themselves stubbed: both peers "installed", each scenario an empty ledger.
    def run(scenario: Scenario, **kwargs: object) -> Outcome:
        return Outcome(scenario, check(Ledger()), 0.0, str(kwargs["peer"]))

    monkeypatch.setattr(peers, "installed", lambda: ["pgqueuer", "procrastinate"])
    monkeypatch.setattr(cli, "run", run)
    names = list(SCENARIOS)
    ns = argparse.Namespace(quick=True, dsn=None)
    compared, absent = cli._competitors(names, ns)
    assert {(o.scenario.name, o.system) for o in compared} == {
        (name, peer) for name in peers.SCENARIOS for peer in ("pgqueuer", "procrastinate")
    }
    report = markdown([], "preamble", compared, absent)
    for name, caveat in peers.CAVEATS.items():
        # Once per scenario: each caveat holds for both peers.
        assert report.count(caveat) == 1, name
        assert f"- {name} on pgqueuer and procrastinate: {caveat}." in report
    # The one the failover's ledger cannot show: no ``A`` lines, so a completion the
    # window undid is a "failover" re-run, not an "async window" one.
    assert "`A`" in peers.CAVEATS["failover-async"]
    assert '"async window"' in peers.CAVEATS["failover-async"]
