"""The dispatcher's buffer of claimed, not yet started jobs (engine.worker._held.HeldJobs)."""

from __future__ import annotations

from skiplock.core import Job, JobState
from skiplock.engine.worker._held import HeldJobs
from tests.jobs import make_job


def _job(job_id: int, *, recovered: bool = False, suspect: bool = False) -> Job:
    # Claimed by worker "w" (held jobs are running rows in the store).
    return make_job(
        id=job_id,
        state=JobState.RUNNING,
        attempts=1,
        claimed_by="w",
        claims=1,
        recovered=recovered,
        suspect=suspect,
    )


def _always() -> bool:
    return True


def _never() -> bool:
    return False


def test_unpaid_jobs_start_in_claim_order_up_to_the_free_slots_and_pay_an_attempt() -> None:
    held = HeldJobs()
    held.hold([_job(1), _job(2), _job(3)])
    taken = held.take_unpaid(2)
    assert [job.id for job in taken] == [1, 2]
    assert [job.attempts for job in taken] == [2, 2]  # charged: the run pays its attempt
    assert held.queued == 1
    assert len(held) == 1


def test_a_recovered_job_stops_the_unpaid_run_and_is_confirmed_first() -> None:
    held = HeldJobs()
    held.hold([_job(1), _job(2, recovered=True), _job(3, recovered=True), _job(4)])
    assert [job.id for job in held.take_unpaid(4)] == [1]
    # Recovered jobs are paid for (store.start) before they run: they count as starting.
    jobs = held.take_to_confirm(4, _always)
    assert [job.id for job in jobs] == [2, 3]
    assert held.starting
    assert held.promised() == 2
    started, gone = held.confirmed(jobs, [True, False])
    assert [(job.id, job.attempts) for job in started] == [(2, 2)]
    assert [job.id for job in gone] == [3]
    assert not held.starting
    assert [job.id for job in held.take_unpaid(1)] == [4]


def test_a_suspect_waits_for_quiet_then_runs_alone() -> None:
    held = HeldJobs()
    held.hold([_job(1, recovered=True, suspect=True), _job(2)])
    assert held.suspect_waits()
    assert held.take_unpaid(4) == []  # nothing overtakes the suspect
    assert held.take_to_confirm(4, _never) == []
    [suspect] = held.take_to_confirm(4, _always)
    assert suspect.id == 1
    assert held.isolated == 1
    held.confirmed([suspect], [True])
    # While it runs, nothing else starts; once it finished, the rest may.
    assert held.take_unpaid(4) == []
    assert held.take_to_confirm(4, _always) == []
    assert not held.finished(99)
    assert held.finished(1)
    assert [job.id for job in held.take_unpaid(4)] == [2]


def test_a_suspect_the_claim_charged_blocks_unpaid_starts_until_it_started() -> None:
    held = HeldJobs()
    held.hold_charged_suspect(_job(7, recovered=True, suspect=True))
    held.hold([_job(8)])
    assert held.promised() == 1
    assert held.waiting()
    assert held.take_unpaid(4) == []
    assert held.ids() == {7, 8}


def test_a_failed_start_puts_the_jobs_back_at_the_head_in_order() -> None:
    held = HeldJobs()
    held.hold([_job(1, recovered=True), _job(2, recovered=True), _job(3, recovered=True)])
    jobs = held.take_to_confirm(2, _always)
    held.unstart(jobs)
    assert not held.starting
    assert [job.id for job in held.take_to_confirm(3, _always)] == [1, 2, 3]


def test_drop_forgets_held_starting_and_charged_jobs_and_frees_the_isolation() -> None:
    held = HeldJobs()
    held.hold([_job(1, recovered=True, suspect=True), _job(2), _job(3)])
    [suspect] = held.take_to_confirm(1, _always)
    assert held.isolated == 1
    dropped = held.drop({1, 3})
    assert sorted(job.id for job in dropped) == [1, 3]
    assert held.isolated is None
    assert held.confirmed([suspect], [True]) == ([], [])  # dropped meanwhile: not started
    assert held.ids() == {2}
    assert [job.id for job in held.drop(None)] == [2]
    assert len(held) == 0


def test_release_all_leaves_jobs_being_started_to_their_confirmation() -> None:
    held = HeldJobs()
    held.hold([_job(1, recovered=True), _job(2)])
    starting = held.take_to_confirm(1, _always)
    held.hold_charged_suspect(_job(3, recovered=True, suspect=True))
    jobs, ready = held.release_all()
    assert [job.id for job in jobs] == [2]
    assert ready is not None
    assert ready.id == 3
    assert held.starting
    assert [job.id for job in held.confirmed(starting, [True])[0]] == [1]
    assert len(held) == 0
