"""JobPage: a list of jobs, and where a bounded search stopped (docs/admin.md, "Lists at
any size")."""

from __future__ import annotations

from datetime import UTC, datetime

from skiplock.core import Job, JobPage, JobState

_AT = datetime(2030, 1, 1, tzinfo=UTC)


def _job(job_id: int) -> Job:
    return Job(
        id=job_id,
        kind="k",
        tenant=None,
        payload=None,
        state=JobState.PENDING,
        priority=0,
        available_at=_AT,
        created_at=_AT,
        attempts=0,
        max_attempts=5,
    )


def test_a_page_is_a_list() -> None:
    page = JobPage([_job(1), _job(2)])
    assert page == [_job(1), _job(2)]
    assert JobPage() == []
    assert page.resume_after is None
    assert "resume_after=None" in repr(page)


def test_next_after_a_complete_page() -> None:
    assert JobPage([_job(1), _job(2)]).next_after(2) == 2  # full: more may follow
    assert JobPage([_job(1)]).next_after(2) is None  # short: the last page
    assert JobPage().next_after(2) is None


def test_next_after_a_search_stopped_early() -> None:
    assert JobPage([_job(1)], resume_after=40).next_after(2) == 40
    assert JobPage(resume_after=40).next_after(2) == 40


def test_shown_of_a_page_read_with_one_more() -> None:
    three = JobPage([_job(1), _job(2), _job(3)])
    assert three.shown(2) == ([_job(1), _job(2)], 2)
    assert JobPage([_job(1), _job(2)]).shown(2) == ([_job(1), _job(2)], None)
    assert JobPage([_job(1)], resume_after=40).shown(2) == ([_job(1)], 40)
    assert JobPage(resume_after=40).shown(2) == ([], 40)
