"""The fault suite's CI subset (issue 44): the quick kill -9 storm, freeze and PostgreSQL
restart (``python -m benchmarks.faults --quick``), each on a throw-away server of its own,
fail on any lost, stuck, unexplained re-run or effect done twice; and a deliberately
broken build — the transactional processor writing its effect outside the job's
transaction, so fencing cannot undo it — fails the freeze scenario: the suite can fail."""

from __future__ import annotations

import pytest
from benchmarks.faults.__main__ import run
from benchmarks.faults.scenarios import QUICK, SCENARIOS

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("name", QUICK)
def test_the_quick_scenario_keeps_every_promise(name: str) -> None:
    outcome = run(SCENARIOS[name], quick=True)
    verdict = outcome.verdict
    assert verdict.ok, verdict.problems()
    # The fault happened and hit running jobs: the scenario proves something.
    assert verdict.acked >= 300
    assert verdict.reruns, "no run was interrupted: the fault missed"


def test_a_build_with_fencing_defeated_fails_the_freeze_scenario() -> None:
    verdict = run(SCENARIOS["freeze"], quick=True, broken=True).verdict
    # The frozen worker's late runs committed their effects outside the fenced
    # transaction, after the jobs were re-run elsewhere.
    assert verdict.effects_twice
    assert not verdict.ok
