"""``skiplock demo``: a real (few seconds) run on the memory store, and its display."""

from __future__ import annotations

import asyncio
import io
from importlib.util import find_spec
from typing import TYPE_CHECKING

import pytest

from skiplock import cli, demo
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.core import JobState, StateCount
from skiplock.demo import _showcase as showcase
from skiplock.demo._live import DemoEvents, Display

if TYPE_CHECKING:
    from skiplock.ports import Metrics

HAS_PSYCOPG = find_spec("psycopg") is not None


def test_demo_runs_every_job_to_a_final_state() -> None:
    out = io.StringIO()
    report = asyncio.run(demo.run_demo(AsyncInMemoryJobStore(), emails=3, live=False, out=out))

    assert report.complete
    assert report.elapsed < 10
    assert report.duplicates == 1
    assert {job.state for job in report.jobs} <= {JobState.SUCCEEDED, JobState.DEAD}

    [payment] = report.of_kind("payment.capture")
    assert payment.state is JobState.DEAD
    assert payment.attempts == payment.max_attempts == showcase.PAYMENT_ATTEMPTS
    assert "card declined" in (payment.last_error or "")
    assert report.dead == [payment]

    reports = report.of_kind("report.build")
    assert [job.state for job in reports] == [JobState.SUCCEEDED] * 2
    assert all(job.attempts == showcase.FLAKY_FAILURES + 1 for job in reports)

    [reminder] = report.of_kind("reminder.send")
    assert reminder.state is JobState.SUCCEEDED
    # Scheduled 2 s ahead: it could not have completed before that.
    assert reminder.completed_at is not None
    assert reminder.completed_at - reminder.created_at >= showcase.SCHEDULE_DELAY

    emails = report.of_kind("email.send")
    assert len(emails) == 3
    assert all(job.state is JobState.SUCCEEDED and job.attempts == 1 for job in emails)
    webhooks = report.of_kind("webhook.deliver")
    assert len(webhooks) == showcase.WEBHOOKS
    # Throttled waits use no attempt.
    assert all(job.state is JobState.SUCCEEDED and job.attempts == 1 for job in webhooks)
    assert {job.tenant for job in webhooks} == {"acme"}
    # After the burst, the limited tenant's webhooks complete at no more than rps.
    done = sorted(job.completed_at for job in webhooks if job.completed_at is not None)
    assert len(done) == showcase.WEBHOOKS
    limit = showcase.WEBHOOK_LIMIT
    min_span = (showcase.WEBHOOKS - limit.burst) / limit.rps
    assert (done[-1] - done[0]).total_seconds() >= min_span * 0.9

    text = out.getvalue()
    assert "\x1b" not in text  # --no-live and not a terminal: plain text
    assert "Summary" in text
    assert "Dead letter queue (1 job)" in text
    assert f"{payment.id}  payment.capture" in text
    assert "skiplock worker" in text


def test_cli_demo_exit_0_and_prints_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--no-live", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert "Summary" in out
    assert "payment.capture" in out


@pytest.mark.parametrize("jobs", ["0", "-3", "lots", "10001"])
def test_cli_demo_rejects_bad_job_count(capsys: pytest.CaptureFixture[str], jobs: str) -> None:
    assert cli.main(["demo", "--jobs", jobs]) == 2
    assert "--jobs" in capsys.readouterr().err


@pytest.mark.usefixtures("no_psycopg")
def test_cli_demo_postgres_without_extra_names_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo", "--dsn", "postgresql://nowhere/db", "--no-live"]) == 2
    assert "pip install 'skiplock[psycopg]'" in capsys.readouterr().err


@pytest.mark.postgres
def test_demo_on_postgres_twice_starts_fresh(
    request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    if not HAS_PSYCOPG:  # an environment without the extra: the clear error instead
        assert cli.main(["demo", "--dsn", "postgresql://nowhere/db", "--no-live"]) == 2
        assert "pip install 'skiplock[psycopg]'" in capsys.readouterr().err
        return
    dsn: str = request.getfixturevalue("pg_dsn")
    for _ in range(2):  # the second run must not see the first run's jobs
        assert cli.main(["demo", "--dsn", dsn, "--jobs", "2", "--no-live"]) == 0
        text = capsys.readouterr().out
        assert "PostgreSQL" in text
        assert "Dead letter queue (1 job)" in text


# ---- display, without waiting: synthetic counts -----------------------------------------


class FakeTerminal(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


def counts(pending: int, succeeded: int) -> list[StateCount]:
    return [
        StateCount(JobState.PENDING, "email.send", None, pending),
        StateCount(JobState.SUCCEEDED, "email.send", "acme", succeeded),
    ]


def test_display_redraws_in_place_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    term = FakeTerminal()
    display = Display(term, total=4, live=True)
    display.show(counts(4, 0), 0.0, final=False)
    first = term.getvalue()
    display.show(counts(1, 3), 0.1, final=False)
    display.close()
    second = term.getvalue()[len(first) :]
    frame_lines = first.count("\n")
    assert second.startswith(f"\x1b[{frame_lines}F\x1b[J")  # back over the last frame
    assert "3/4 done" in second
    assert "\x1b[32m3\x1b[0m" in second  # succeeded, in green
    assert term.getvalue().endswith("\x1b[?25h")  # cursor shown again


def test_display_prints_a_line_per_second_when_not_a_terminal() -> None:
    out = io.StringIO()
    display = Display(out, total=4, live=True)
    for tick in range(25):  # 2.4 s of 0.1 s ticks
        display.show(counts(4, 0), tick / 10, final=False)
    display.show(counts(0, 4), 2.5, final=True)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4  # at 0 s, 1 s, 2 s, and the final one
    assert "\x1b" not in out.getvalue()
    assert "4/4 done" in lines[-1]
    assert "succeeded 4" in lines[-1]


def test_display_is_silent_when_not_live() -> None:
    out = FakeTerminal()
    display = Display(out, total=4, live=False)
    display.show(counts(4, 0), 0.0, final=False)
    display.close()
    assert out.getvalue() == ""


# ---- events: the worker reports through the Metrics port --------------------------------


def test_demo_events_are_metrics() -> None:
    events: Metrics = DemoEvents()  # mypy checks the protocol; the engine takes it as such
    assert isinstance(events, DemoEvents)


def test_frame_shows_the_events_the_worker_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    events = DemoEvents(recent=2)
    events.job_claimed("report.build", None, 0.0)
    events.job_finished("report.build", None, "retry", 0.1)
    events.job_finished("report.build", None, "succeeded", 0.1)  # not a failure: not shown
    events.rate_limited("webhook.deliver", "acme")
    events.rate_limited("webhook.deliver", "acme")
    events.job_finished("payment.capture", "globex", "retry", 0.1)
    events.job_finished("payment.capture", "globex", "dead", 0.1)
    term = FakeTerminal()
    display = Display(term, total=4, live=True, events=events)
    display.show(counts(4, 0), 0.0, final=False)

    rows = _rows(term.getvalue())
    assert rows["kind"][-2:] == ["retries", "throttled"]
    assert rows["report.build"][-2:] == ["1", "0"]
    assert rows["webhook.deliver"][-2:] == ["0", "2"]
    assert rows["payment.capture"][-2:] == ["1", "0"]
    recent = term.getvalue().split("recent failures:\n")[1].splitlines()
    # Only the last two, newest last.
    assert recent == [
        "    payment.capture (globex): attempt failed, will retry after its backoff",
        "    payment.capture (globex): last attempt failed: dead",
    ]


def test_live_demo_on_a_terminal_shows_the_workers_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    term = FakeTerminal()
    report = asyncio.run(demo.run_demo(AsyncInMemoryJobStore(), emails=2, live=True, out=term))
    assert report.complete

    text = term.getvalue()
    last_frame = text.rsplit("\x1b[J", 1)[-1].split("\nSummary", 1)[0]
    rows = _rows(last_frame)
    # Every failed attempt that was retried reached the view through Metrics.job_finished.
    assert rows["report.build"][-2] == str(2 * showcase.FLAKY_FAILURES)
    assert rows["payment.capture"][-2] == str(showcase.PAYMENT_ATTEMPTS - 1)
    assert rows["email.send"][-2] == "0"
    assert "report.build: attempt failed, will retry after its backoff" in text


def _rows(frame: str) -> dict[str, list[str]]:
    """The live table of a frame (header to the first blank line), by first column."""
    lines = frame.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["kind"])
    rows = {}
    for line in lines[start:]:
        if not line.strip():
            break
        cells = line.split()
        rows[cells[0]] = cells
    return rows
