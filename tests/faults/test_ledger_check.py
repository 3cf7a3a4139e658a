"""The fault suite's ledger check on ledgers written by hand (benchmarks/faults/ledger.py):
it passes a ledger whose every re-run has its fault, and flags each way a broken build
could break the promise — a lost job, a stuck one, an effect done twice, a re-run that no
fault explains, a worker that died unplanned, a scenario's own failed check. No database:
the check is arithmetic."""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchmarks.faults.ledger import Death, Effect, Fault, Ledger, Row, Run, check

if TYPE_CHECKING:
    from pathlib import Path

TX, PLAIN = "faults.tx", "faults.plain"


def _ledger() -> Ledger:
    """Three transactional jobs and a plain one; job 2 ran in process 10, which the
    harness killed at t=5, and again in process 11."""
    ledger = Ledger(transactional=frozenset({TX}), poison=frozenset({"faults.poison"}))
    ledger.acked = {1: TX, 2: TX, 3: TX, 4: PLAIN}
    ledger.runs = [
        Run(1, 1, 10, 1.0, 1.1),
        Run(2, 1, 10, 4.0, None),
        Run(2, 2, 11, 9.0, 9.1),
        Run(3, 1, 11, 9.5, 9.6),
        Run(4, 1, 11, 9.7, 9.8),
    ]
    ledger.effects = [Effect(1, 1, 10, True), Effect(2, 2, 11, True), Effect(3, 1, 11, True)]
    ledger.effects.append(Effect(4, 1, 11, False))
    ledger.rows = [Row(job, kind, "succeeded", 1) for job, kind in ledger.acked.items()]
    ledger.faults = [Fault("kill", 5.0, 5.0, 5.0, (10,))]
    ledger.deaths = [Death(10, 5.0, "kill")]
    ledger.load = (0.0, 12.0)
    return ledger


def test_a_ledger_whose_every_rerun_has_its_fault_passes() -> None:
    verdict = check(_ledger())
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"kill": 1}
    assert verdict.recovery == [4.0]  # killed at 5, re-run at 9


def test_a_job_without_its_row_or_its_effect_is_lost() -> None:
    ledger = _ledger()
    ledger.rows = [r for r in ledger.rows if r.job != 1]
    ledger.effects = [e for e in ledger.effects if e.job != 3]  # succeeded, effect gone
    verdict = check(ledger)
    assert sorted(verdict.lost) == [1, 3]
    assert not verdict.ok


def test_a_job_not_ended_at_the_deadline_is_stuck() -> None:
    ledger = _ledger()
    ledger.rows[0] = Row(1, TX, "running", 1)
    assert check(ledger).stuck == [1]


def test_a_transactional_effect_committed_twice_is_flagged() -> None:
    # What a worker that ignored its lost lease (or wrote outside the job's transaction)
    # leaves: the killed run's effect committed, and the re-run's too.
    ledger = _ledger()
    ledger.effects.append(Effect(2, 1, 10, True))
    verdict = check(ledger)
    assert verdict.effects_twice == [2]
    assert not verdict.ok


def test_a_plain_effect_repeated_by_an_explained_rerun_is_reported_not_failed() -> None:
    ledger = _ledger()
    ledger.runs += [Run(4, 1, 10, 4.5, None)]  # plain job 4 ran in the killed process too
    ledger.effects.append(Effect(4, 1, 10, False))
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.repeated_plain == 1


def test_a_rerun_no_fault_explains_is_flagged() -> None:
    ledger = _ledger()
    ledger.faults, ledger.deaths = [], []
    verdict = check(ledger)
    assert [r.run.job for r in verdict.unexplained] == [2]
    assert not verdict.ok


def test_a_fault_explains_only_the_runs_it_overlaps() -> None:
    ledger = _ledger()
    ledger.deaths = []
    ledger.faults = [Fault("restart", 20.0, 23.0, 23.0)]  # after job 2's re-run
    assert len(check(ledger).unexplained) == 1
    ledger.faults = [Fault("restart", 6.0, 8.0, 8.0)]  # between its two runs
    assert check(ledger).explained == {"restart": 1}


def test_a_worker_that_died_unplanned_is_flagged() -> None:
    ledger = _ledger()
    ledger.deaths.append(Death(11, 10.0, None))
    verdict = check(ledger)
    assert verdict.unplanned_deaths == [11]
    assert not verdict.ok


def test_a_frozen_run_entered_after_sigcont_is_ordered_by_its_attempt() -> None:
    # Process 10 had dispatched job 1's first attempt when it was frozen (t=2..10); its
    # processor wrote its start line only after SIGCONT, while attempt 2 ran at t=7.
    ledger = Ledger(transactional=frozenset({TX}))
    ledger.acked = {1: TX}
    ledger.runs = [Run(1, 1, 10, 10.2, 10.3), Run(1, 2, 11, 7.0, 7.1)]
    ledger.effects = [Effect(1, 2, 11, True)]
    ledger.rows = [Row(1, TX, "succeeded", 2)]
    ledger.faults = [Fault("freeze", 2.0, 10.0, 2.0, (10,))]
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"freeze": 1}
    assert verdict.refused_late == 1  # its return committed nothing


def test_a_frozen_run_entered_long_after_sigcont_is_still_its_freezes() -> None:
    # On a loaded machine the resumed process may take seconds to write its line.
    ledger = Ledger(transactional=frozenset({TX}))
    ledger.acked = {1: TX}
    ledger.runs = [Run(1, 1, 10, 14.0, 14.1), Run(1, 2, 11, 7.0, 7.1)]
    ledger.effects = [Effect(1, 2, 11, True)]
    ledger.rows = [Row(1, TX, "succeeded", 2)]
    ledger.faults = [Fault("freeze", 2.0, 10.0, 2.0, (10,))]
    assert check(ledger).explained == {"freeze": 1}
    ledger.faults = [Fault("freeze", 2.0, 10.0, 2.0, (12,))]  # another process froze
    assert len(check(ledger).unexplained) == 1


def test_a_scenarios_own_failed_check_fails_the_verdict() -> None:
    # E.g. listener-kill: a job after a kill waited for the fallback poll.
    ledger = _ledger()
    ledger.notes.append("pickup p50 5 ms")
    ledger.failed.append("1 jobs after a listener kill waited 4.9 s")
    verdict = check(ledger)
    assert not verdict.ok
    assert verdict.notes == ("pickup p50 5 ms",)
    assert "1 jobs after a listener kill waited 4.9 s" in verdict.problems()


def test_a_flaky_jobs_first_attempt_explains_its_retry_and_nothing_else() -> None:
    ledger = _ledger()
    ledger.flaky = frozenset({"faults.flaky"})
    ledger.acked[5] = "faults.flaky"
    ledger.rows.append(Row(5, "faults.flaky", "succeeded", 2))
    ledger.runs += [Run(5, 1, 11, 9.0, None), Run(5, 2, 11, 11.0, 11.1)]
    ledger.effects.append(Effect(5, 2, 11, True))
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"kill": 1, "retry": 1}
    # Its second attempt failing again is no longer the planned retry.
    ledger.runs.append(Run(5, 3, 11, 14.0, 14.1))
    assert [r.run.attempt for r in check(ledger).unexplained] == [2]


def test_a_poison_death_gives_the_recovery_of_the_jobs_it_took_down() -> None:
    # No fault recorded: process 10 died of the poison job at t=5 (a planned death);
    # the innocent job 2 it was running ran again at t=9.
    ledger = _ledger()
    ledger.faults = []
    ledger.deaths = [Death(10, 5.0, "poison")]
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"poison": 1}
    assert verdict.recovery == [4.0]
    # A death of no plan explains nothing and measures no recovery.
    ledger.deaths = [Death(10, 5.0, None)]
    assert check(ledger).recovery == []


def test_a_frozen_processs_late_entry_of_a_held_job_run_elsewhere_is_its_freezes() -> None:
    # Process 10 started held job 1 (attempt 1, not charged) just before SIGSTOP (t=2..10);
    # recovered, it ran and succeeded in process 11 at t=7; process 10's processor wrote
    # its start line right after SIGCONT, same attempt (the fault suite's freeze, 2026-12-07).
    ledger = Ledger(transactional=frozenset({TX}))
    ledger.acked = {1: TX}
    ledger.runs = [Run(1, 1, 11, 7.0, 7.1), Run(1, 1, 10, 10.01, None)]
    ledger.completed[(1, 1, 11)] = 7.1
    ledger.effects = [Effect(1, 1, 11, True)]
    ledger.rows = [Row(1, TX, "succeeded", 1)]
    ledger.faults = [Fault("freeze", 2.0, 10.0, 2.0, (10,))]
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"freeze": 1}
    # Entered long after SIGCONT, or in a process that was not frozen: a run after an
    # acknowledged success, unexplained.
    ledger.runs[1] = Run(1, 1, 10, 12.0, None)
    assert [r.run.pid for r in check(ledger).unexplained] == [11]
    ledger.runs[1] = Run(1, 1, 12, 10.01, None)
    assert [r.run.pid for r in check(ledger).unexplained] == [11]


def test_a_completion_acknowledged_then_run_again_is_undone_and_unexplained() -> None:
    # Job 3's success was acknowledged at t=9.7; a later run of it (a failover that lost
    # the commit) is a completion undone, even though a database fault overlaps it.
    ledger = _ledger()
    ledger.completed[(3, 1, 11)] = 9.7
    ledger.runs.append(Run(3, 1, 12, 20.0, 20.1))
    ledger.faults.append(Fault("failover", 15.0, 18.0, 18.0))
    verdict = check(ledger)
    assert [r.run.job for r in verdict.unexplained] == [3]
    assert not verdict.ok
    # Acknowledged in an asynchronous failover's window: the window's, counted apart.
    ledger.window = (9.5, 10.0)
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"async window": 1, "kill": 1}


def test_an_enqueue_lost_in_the_async_window_is_counted_apart_and_only_there() -> None:
    ledger = _ledger()
    ledger.enqueued = {1: 0.5, 2: 3.0, 3: 8.0, 4: 8.5}
    ledger.rows = [r for r in ledger.rows if r.job not in (3, 4)]
    ledger.window = (7.9, 8.2)  # job 3 acknowledged in it, job 4 after it
    verdict = check(ledger)
    assert verdict.lost_in_window == (3,)
    assert verdict.lost == [4]
    assert not verdict.ok
    # An id the new primary handed out again: the first job with it is lost too.
    ledger = _ledger()
    ledger.enqueued = {1: 0.5, 2: 3.0, 3: 8.0, 4: 8.5}
    ledger.superseded = [(4, PLAIN, 8.1)]
    verdict = check(ledger)
    assert verdict.lost == [4]
    assert verdict.acked == 5
    ledger.window = (7.9, 8.2)
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.lost_in_window == (4,)


def test_an_id_acknowledged_again_supersedes_the_first_job() -> None:
    ledger = Ledger()
    ledger.acknowledge(7, TX, 1.0)
    ledger.acknowledge(7, PLAIN, 2.0)  # a new primary handed the id out again
    assert ledger.superseded == [(7, TX, 1.0)]
    assert ledger.acked == {7: PLAIN}
    assert ledger.enqueued == {7: 2.0}


def test_the_failover_tests_files_read_into_the_same_ledger(tmp_path: Path) -> None:
    # tests/pgfailover.py: a producer process's E/X lines, the workers' S/F/A lines, jobs
    # named by tokens, no side effect. Token 5 ran twice in process 20 with the same
    # attempt after its success was acknowledged (a completion undone by a failover:
    # the release charges no attempt).
    (tmp_path / "ledger-producer.txt").write_text(
        "E 5 1.0 failover.mark\nE 6 1.1 failover.mark\nX 7 1.2 OperationalError\n",
        encoding="utf-8",
    )
    (tmp_path / "ledger-20.txt").write_text(
        "S 5 1 20 2.0\nF 5 1 20 2.1\nA 5 1 20 2.2\nS 6 1 20 2.3\nF 6 1 20 2.4\n"
        "A 6 1 20 2.5\nS 5 1 20 4.0\nF 5 1 20 4.1\nA 5 1 20 4.2\n",
        encoding="utf-8",
    )
    ledger = Ledger(effectless=frozenset({"failover.mark"}))
    for path in sorted(tmp_path.glob("ledger-*.txt")):
        ledger.read_lines(path)
    assert ledger.acked == {5: "failover.mark", 6: "failover.mark"}
    assert ledger.unknown == {7: 1.2}
    assert sorted((r.job, r.at, r.returned) for r in ledger.runs) == [
        (5, 2.0, 2.1), (5, 4.0, 4.1), (6, 2.3, 2.4),
    ]  # fmt: skip
    assert ledger.completed[(5, 1, 20)] == 2.2  # the first acknowledgement
    ledger.rows = [Row(5, "failover.mark", "succeeded", 1), Row(6, "failover.mark", "succeeded", 1)]
    ledger.faults = [Fault("failover", 3.0, 3.5, 3.5)]
    verdict = check(ledger)
    # Effectless: a succeeded row is the work done. The undone completion is
    # unexplained although the failover overlaps it; in the window, it is the window's.
    assert verdict.lost == []
    assert verdict.undone == [5]
    assert [r.run.job for r in verdict.unexplained] == [5]
    ledger.window = (2.0, 3.0)
    verdict = check(ledger)
    assert verdict.ok, verdict.problems()
    assert verdict.explained == {"async window": 1}
    # Without the effectless kind, a succeeded row without its effect is lost.
    ledger.effectless = frozenset()
    assert sorted(check(ledger).lost) == [5, 6]
