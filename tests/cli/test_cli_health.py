"""``skiplock health`` (R9) against PostgreSQL: exit 0 when healthy, 1 with one line per
problem (a silent worker's kinds uncovered, schema missing or older, database down)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from importlib.util import find_spec
from typing import TYPE_CHECKING

import pytest

from skiplock import cli
from tests.cli.admin_helpers import (
    DEADLINE,
    add_worker,
    closed_port,
    enqueue,
    parse,
    run_cli,
    strand,
)
from tests.pgfixtures import execute, fetch

if TYPE_CHECKING:
    from collections.abc import Callable

HAS_PSYCOPG = find_spec("psycopg") is not None
needs_psycopg = pytest.mark.skipif(not HAS_PSYCOPG, reason="needs the psycopg extra")
pytestmark = [needs_psycopg]


def health(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    """``skiplock health ARGV`` in this process: exit status, stdout lines, stderr."""
    status = cli.main(["health", *argv])
    out, err = capsys.readouterr()
    return status, out.splitlines(), err


def problems(lines: list[str]) -> list[str]:
    return [line.removeprefix("problem:").strip() for line in lines if line.startswith("problem:")]


@pytest.mark.postgres
def test_health_of_an_empty_queue_is_healthy(
    admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines, err = health(capsys, "--dsn", admin_dsn)
    assert (status, err) == (0, "")
    assert lines[0] == "status:   healthy"
    assert problems(lines) == []
    assert "schema:   'skiplock' version" in "\n".join(lines)


@pytest.mark.postgres
def test_health_with_a_live_worker_claiming_the_due_kinds(
    admin_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    add_worker(admin_dsn, "host-1/4242/live", "email", "sms")
    enqueue(admin_dsn, "email", 3)
    enqueue(admin_dsn, "sms", delay=3600)
    monkeypatch.setenv("SKIPLOCK_DSN", admin_dsn)  # the DSN from the environment
    status, lines, _ = health(capsys)
    assert status == 0, lines
    text = "\n".join(lines)
    assert "workers:  1 live, 0 silent" in text
    [email] = [line for line in lines if line.startswith("email ")]
    assert email.split()[:3] == ["email", "3", "0"]
    assert email.split()[-1] == "yes"


@pytest.mark.postgres
def test_health_names_the_kinds_of_a_silent_worker(
    admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    add_worker(admin_dsn, "host-1/4242/gone", "email", silent_for=600)
    add_worker(admin_dsn, "host-2/77/live", "sms")
    enqueue(admin_dsn, "email", 2)
    enqueue(admin_dsn, "sms")
    status, lines, _ = health(capsys, "--dsn", admin_dsn)
    assert status == 1
    assert lines[0] == "status:   unhealthy"
    [line] = problems(lines)
    assert line.startswith("kind 'email': 2 due job(s) and no live worker claims the kind")
    assert "host-1/4242/gone (silent for 10m" in line

    status, lines, _ = health(capsys, "--dsn", admin_dsn, "--worker-timeout", "1h")
    assert status == 0, lines  # a patient threshold counts it as live


@pytest.mark.postgres
def test_health_json_is_the_report(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    add_worker(admin_dsn, "w-gone", "email", silent_for=120)
    enqueue(admin_dsn, "email")
    status, lines, _ = health(capsys, "--dsn", admin_dsn, "--json", "--max-dead", "0")
    assert status == 1
    report = parse("\n".join(lines))
    assert report["healthy"] is False
    assert report["uncovered_kinds"] == ["email"]
    assert report["database"] == {"reachable": True, "error": None}
    assert report["schema"]["installed"] is True
    assert report["schema"]["up_to_date"] is True
    [worker] = report["workers"]
    assert (worker["id"], worker["kinds"], worker["live"]) == ("w-gone", ["email"], False)
    assert worker["heartbeat_age_seconds"] >= 120
    [kind] = report["kinds"]
    assert (kind["kind"], kind["pending_due"], kind["covered"]) == ("email", 1, False)
    assert report["thresholds"] == {
        "worker_timeout_seconds": 30.0,
        "max_pending_age_seconds": None,
        "max_dead": 0,
    }


@pytest.mark.postgres
def test_health_reports_running_jobs_whose_worker_is_gone_with_their_age(
    admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 41: a job left running by a worker stopped by force; health said healthy.
    [left, lost, quiet] = enqueue(admin_dsn, "email", 3)
    strand(admin_dsn, left, "w-left", 372)  # its worker unregistered (no row)
    strand(admin_dsn, lost, "w-left", 30)
    add_worker(admin_dsn, "w-silent", silent_for=600)
    strand(admin_dsn, quiet, "w-silent", 700)
    status, lines, _ = health(capsys, "--dsn", admin_dsn)
    assert status == 1
    [line] = problems(lines)
    assert line.startswith(
        "3 running job(s) whose worker is gone: w-left (unregistered: 2 job(s), the oldest "
        "running 6m1"  # 6m12s, give or take the test's own seconds
    )
    assert "w-silent (silent for 10m" in line
    assert "the oldest running 11m" in line
    assert line.endswith("once a worker runs (none is live)")

    status, lines, _ = health(capsys, "--dsn", admin_dsn, "--json")
    assert status == 1
    report = parse("\n".join(lines))
    assert report["healthy"] is False
    by_id = {group["worker_id"]: group for group in report["abandoned"]}
    assert sorted(by_id) == ["w-left", "w-silent"]
    assert (by_id["w-left"]["registered"], by_id["w-left"]["running"]) == (False, 2)
    assert by_id["w-left"]["heartbeat_age_seconds"] is None
    assert 372 <= by_id["w-left"]["age_seconds"] < 372 + DEADLINE
    assert (by_id["w-silent"]["registered"], by_id["w-silent"]["running"]) == (True, 1)
    assert by_id["w-silent"]["age_seconds"] >= 700
    assert by_id["w-silent"]["heartbeat_age_seconds"] >= 600


@pytest.mark.postgres
@pytest.mark.parametrize(("max_age", "healthy"), [("5m", False), ("1h", True), ("3600", True)])
def test_health_max_age_of_the_oldest_due_job(
    admin_dsn: str, capsys: pytest.CaptureFixture[str], max_age: str, healthy: bool
) -> None:
    from datetime import UTC, datetime, timedelta

    add_worker(admin_dsn, "w-live")
    enqueue(admin_dsn, "report", available_at=datetime.now(UTC) - timedelta(minutes=10))
    status, lines, _ = health(capsys, "--dsn", admin_dsn, "--max-age", max_age)
    assert status == (0 if healthy else 1), lines
    if not healthy:
        [line] = problems(lines)
        assert line.startswith("kind 'report': the oldest due job has waited 10m")
        assert line.endswith("(max 5m)")


@pytest.mark.parametrize("bad", ["soon", "-5s", "5 parsecs", "1w"])
def test_health_rejects_a_bad_duration(capsys: pytest.CaptureFixture[str], bad: str) -> None:
    status, _, err = health(capsys, "--dsn", "postgresql://nowhere/db", f"--max-age={bad}")
    assert status == 2
    assert "argument --max-age: expected a duration such as 30, 1.5, 250ms, 30s, 5m" in err


@pytest.mark.parametrize("command", ["health", "workers"])
def test_a_negative_worker_timeout_is_refused_as_a_bad_value(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # "-1s" is the option's value (refused by its type), not an unknown option.
    assert cli.main([command, "--dsn", "postgresql://nowhere/db", "--worker-timeout", "-1s"]) == 2
    err = capsys.readouterr().err
    assert "argument --worker-timeout: expected a duration such as" in err
    assert err.rstrip().endswith("got '-1s'")
    assert "expected one argument" not in err


@pytest.mark.postgres
def test_health_without_the_schema_says_to_apply_it(
    make_database: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = make_database()
    status, lines, _ = health(capsys, "--dsn", dsn)
    assert status == 1
    assert problems(lines) == [
        "schema 'skiplock' is not installed; run `skiplock schema apply --dsn ...`"
    ]
    status, lines, _ = health(capsys, "--dsn", dsn, "--schema", "other_jobs", "--json")
    report = parse("\n".join(lines))
    assert report["problems"] == [
        "schema 'other_jobs' is not installed; "
        "run `skiplock schema apply --dsn ... --schema other_jobs`"
    ]
    assert report["schema"]["installed"] is False


@pytest.mark.postgres
def test_health_on_an_older_schema_names_the_versions(
    make_database: Callable[[], str], capsys: pytest.CaptureFixture[str]
) -> None:
    from skiplock.adapters._pg import migrations
    from skiplock.adapters.psycopg import apply_schema

    dsn = make_database()
    apply_schema(dsn)
    latest = migrations()[-1]
    execute(dsn, [f"DELETE FROM skiplock.schema_migrations WHERE version = {latest.version}"])
    status, lines, _ = health(capsys, "--dsn", dsn)
    assert status == 1
    assert problems(lines) == [
        f"schema 'skiplock' is at version {latest.version - 1}, this code expects "
        f"{latest.version} (pending: {latest.name}); run `skiplock schema apply --dsn ...`"
    ]


def test_health_of_a_database_that_is_down(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    started = time.monotonic()
    status, lines, err = health(capsys, "--dsn", dsn)
    assert time.monotonic() - started < 2  # issue 29: reported within 2 s
    assert (status, err) == (1, "")
    [line] = problems(lines)
    assert line.startswith("database unreachable: connection failed: ")
    assert "Connection refused" in line

    status, lines, _ = health(capsys, "--dsn", dsn, "--json")
    report = parse("\n".join(lines))
    assert (report["healthy"], report["database"]["reachable"]) == (False, False)
    assert "Connection refused" in report["database"]["error"]


@pytest.mark.postgres
def test_health_of_a_database_that_does_not_answer_stops_at_the_timeout(
    capsys: pytest.CaptureFixture[str], admin_dsn: str
) -> None:
    import psycopg

    with psycopg.connect(admin_dsn) as locker:  # a transaction: the lock stays
        locker.execute(
            "LOCK TABLE skiplock.jobs, skiplock.job_counts, skiplock.job_count_deltas"
            " IN ACCESS EXCLUSIVE MODE"
        )
        started = time.monotonic()
        status, lines, _ = health(capsys, "--dsn", admin_dsn, "--timeout", "0.5")
        assert time.monotonic() - started < 2
    assert status == 1
    [line] = problems(lines)
    assert line.startswith("database unreachable: the database did not answer within the read")


@pytest.mark.postgres
def test_health_in_a_subprocess_sees_a_killed_worker(
    admin_dsn: str, make_app: Callable[[str], str]
) -> None:
    """A real worker process: live while it runs; killed, its kind is uncovered once its
    heartbeat is old (aged here instead of waiting out the worker timeout)."""
    app = make_app(
        """
        import os

        from skiplock import Engine
        from skiplock.adapters.psycopg import PsycopgJobStore

        engine = Engine(PsycopgJobStore(os.environ["SKIPLOCK_APP_DSN"]))


        @engine.processor("thumbnail")
        def thumbnail(payload):
            pass
        """
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "skiplock", "worker", f"{app}:engine"],
        env={**os.environ, "SKIPLOCK_APP_DSN": admin_dsn},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not fetch(admin_dsn, "SELECT id FROM skiplock.workers"):
            assert worker.poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "the worker never registered"
            time.sleep(0.05)
        result = run_cli("health", "--dsn", admin_dsn, "--json")
        assert result.returncode == 0, result.stdout
        [row] = parse(result.stdout)["workers"]
        assert (row["kinds"], row["live"], row["pid"]) == (["thumbnail"], True, worker.pid)
        here = run_cli("workers", "--dsn", admin_dsn, "--host", socket.gethostname())
        assert here.returncode == 0, here.stderr
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(DEADLINE)
    enqueue(admin_dsn, "thumbnail")
    execute(admin_dsn, ["UPDATE skiplock.workers SET heartbeat_at = now() - interval '5 min'"])
    result = run_cli("health", "--dsn", admin_dsn)
    assert result.returncode == 1
    assert result.stderr == ""
    [line] = [line for line in result.stdout.splitlines() if line.startswith("problem:")]
    assert "kind 'thumbnail': 1 due job(s) and no live worker claims the kind" in line
    assert f"/{worker.pid}/" in line
    here = run_cli("workers", "--dsn", admin_dsn, "--host", socket.gethostname())
    assert here.returncode == 1
    assert here.stderr == f"skiplock: no live worker on host {socket.gethostname()!r}\n"


def test_a_bounded_split_prints_as_at_least(capsys: pytest.CaptureFixture[str]) -> None:
    """A kind whose due/scheduled split passed the bound shows ">= N" and says why."""
    from datetime import UTC, datetime, timedelta

    from skiplock.cli._health import print_report
    from skiplock.core import HealthSnapshot, QueueStats
    from skiplock.core._health import HealthThresholds, assess_health

    now = datetime(2026, 12, 4, tzinfo=UTC)
    bound = QueueStats.SPLIT_BOUND
    snapshot = HealthSnapshot(
        now=now,
        queues=(
            QueueStats("huge", None, due=bound, scheduled=bound, oldest_due_at=now, bounded=True),
            QueueStats("small", None, due=2, scheduled=1, oldest_due_at=now),
        ),
    )
    print_report(
        assess_health(snapshot, HealthThresholds(worker_timeout=timedelta(seconds=30))),
        as_json=False,
    )
    out = capsys.readouterr().out
    [huge] = [line for line in out.splitlines() if line.startswith("huge")]
    [small] = [line for line in out.splitlines() if line.startswith("small")]
    assert huge.count(f">= {bound}") == 2
    assert ">=" not in small
    assert f"more than {bound:,} jobs both due and scheduled" in out


@pytest.mark.postgres
def test_health_shows_the_pairs_a_rate_holds_back(
    admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A claim under a cluster-wide rate of one job per 1,000 s empties acme's bucket: the
    # bare command (no processors: it knows no rates) still sees it in the store.
    from skiplock.adapters.psycopg import PsycopgJobStore
    from skiplock.core import ClaimRequest, RateLimit
    from skiplock.core._bucket import RateTable

    enqueue(admin_dsn, "mail.send", 3, tenant="acme")
    rates = RateTable(kinds={"mail.send": RateLimit(rps=0.001, burst=1)})
    with PsycopgJobStore(admin_dsn) as store:
        assert len(store.claim(ClaimRequest(worker_id="w", limit=5, rates=rates))) == 1
    status, lines, _ = health(capsys, "--dsn", admin_dsn)
    assert status == 1  # mail.send is due and no worker claims it (not the throttling)
    text = "\n".join(lines)
    assert "throttled: due jobs a limit holds back now" in text
    [row] = [line for line in lines if line.endswith("rate_limit")]
    assert row.split() == ["mail.send", "acme", "2", "rate_limit"]
    _, lines, _ = health(capsys, "--dsn", admin_dsn, "--json")
    assert parse("\n".join(lines))["throttled"] == [
        {"kind": "mail.send", "tenant": "acme", "due": 2, "limit": "rate_limit", "bounded": False}
    ]
