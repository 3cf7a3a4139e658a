"""The health rules (R9): from a store's snapshot to a report with one line per problem."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from skiplock.core import (
    HealthSnapshot,
    QueueStats,
    SchemaInfo,
    WorkerStatus,
)
from skiplock.core._health import (
    HealthThresholds,
    OrphanedJobs,
    ReplicaStatus,
    assess_health,
    format_duration,
    unreachable_report,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
LIMITS = HealthThresholds(worker_timeout=timedelta(seconds=30))


def _worker(
    worker_id: str,
    *,
    silent: float = 0,
    kinds: set[str] | None = None,
    tenants: set[str] | None = None,
    running: int = 0,
    claimed: float | None = None,
) -> WorkerStatus:
    return WorkerStatus(
        id=worker_id,
        host="host",
        pid=1,
        kinds=None if kinds is None else frozenset(kinds),
        tenants=None if tenants is None else frozenset(tenants),
        started_at=NOW - timedelta(hours=1),
        heartbeat_at=NOW - timedelta(seconds=silent),
        running=running,
        oldest_claimed_at=None if claimed is None else NOW - timedelta(seconds=claimed),
    )


def _due(kind: str, n: int = 1, *, tenant: str | None = None, waited: float = 0) -> QueueStats:
    return QueueStats(kind, tenant, due=n, oldest_due_at=NOW - timedelta(seconds=waited))


def _snapshot(*rows: WorkerStatus | QueueStats, schema: SchemaInfo | None = None) -> HealthSnapshot:
    return HealthSnapshot(
        now=NOW,
        workers=tuple(r for r in rows if isinstance(r, WorkerStatus)),
        queues=tuple(r for r in rows if isinstance(r, QueueStats)),
        schema=schema,
    )


def test_an_idle_store_is_healthy() -> None:
    report = assess_health(_snapshot(), LIMITS)
    assert report.healthy
    assert report.problems == []
    assert report.reachable
    assert report.checked_at == NOW
    assert (report.workers, report.kinds, report.uncovered_kinds) == ([], [], [])


def test_due_jobs_claimed_by_a_live_worker_are_healthy() -> None:
    report = assess_health(_snapshot(_worker("w", silent=29, kinds={"a"}), _due("a", 3)), LIMITS)
    assert report.healthy, report.problems
    [kind] = report.kinds
    assert (kind.kind, kind.pending_due, kind.covered, kind.uncovered) == ("a", 3, True, 0)
    [worker] = report.workers
    assert worker.live
    assert worker.heartbeat_age == timedelta(seconds=29)


def test_a_silent_workers_kinds_are_uncovered() -> None:
    snapshot = _snapshot(_worker("gone", silent=600, kinds={"a", "b"}), _due("a", 2), _due("c"))
    report = assess_health(snapshot, LIMITS)
    assert not report.healthy
    assert report.uncovered_kinds == ["a", "c"]
    assert report.problems == [
        "kind 'a': 2 due job(s) and no live worker claims the kind; worker(s) that claim it "
        "stopped sending heartbeats: gone (silent for 10m)",
        "kind 'c': 1 due job(s) and no live worker claims the kind",
    ]
    assert not report.workers[0].live


def test_running_jobs_whose_worker_is_gone_are_a_problem_with_their_age() -> None:
    # Issue 41: a worker stopped by force left its job running; health said healthy.
    snapshot = attrs.evolve(
        _snapshot(
            _worker("live", silent=1, running=1, claimed=5),
            _worker("silent", silent=120, running=3, claimed=400),
            _worker("idle-silent", silent=600),
            QueueStats("a", None, running=6),
        ),
        orphaned=(OrphanedJobs("left", 2, NOW - timedelta(seconds=372)),),
    )
    report = assess_health(snapshot, LIMITS)
    assert not report.healthy
    assert report.problems == [
        "5 running job(s) whose worker is gone: left (unregistered: 2 job(s), the oldest "
        "running 6m12s), silent (silent for 2m: 3 job(s), the oldest running 6m40s); "
        "nothing finishes them, stale-claim recovery returns them to pending at a live "
        "worker's next maintenance pass"
    ]
    left, silent = report.abandoned
    assert (left.worker_id, left.registered, left.running) == ("left", False, 2)
    assert (left.age, left.heartbeat_age) == (timedelta(seconds=372), None)
    assert (silent.registered, silent.heartbeat_age) == (True, timedelta(seconds=120))
    assert json.loads(json.dumps(report.to_dict()))["abandoned"] == [
        {
            "worker_id": "left",
            "registered": False,
            "running": 2,
            "oldest_claimed_at": (NOW - timedelta(seconds=372)).isoformat(),
            "age_seconds": 372.0,
            "heartbeat_age_seconds": None,
        },
        {
            "worker_id": "silent",
            "registered": True,
            "running": 3,
            "oldest_claimed_at": (NOW - timedelta(seconds=400)).isoformat(),
            "age_seconds": 400.0,
            "heartbeat_age_seconds": 120.0,
        },
    ]
    # With no live worker, nothing runs stale-claim recovery: the line says so.
    alone = attrs.evolve(snapshot, workers=())
    [problem] = assess_health(alone, LIMITS).problems
    assert problem.startswith("2 running job(s) whose worker is gone: left (unregistered")
    assert problem.endswith("returns them to pending once a worker runs (none is live)")


def test_scheduled_running_and_dead_jobs_need_no_worker() -> None:
    stats = QueueStats("a", None, scheduled=4, running=1, dead=7)
    report = assess_health(_snapshot(stats), LIMITS)
    assert report.healthy
    [kind] = report.kinds
    assert (kind.pending_due, kind.scheduled, kind.running, kind.dead) == (0, 4, 1, 7)
    assert kind.oldest_due_age is None


def test_a_worker_of_every_kind_covers_them_all() -> None:
    report = assess_health(_snapshot(_worker("any"), _due("x"), _due("y", tenant="t")), LIMITS)
    assert report.healthy


def test_tenant_restricted_workers_leave_other_tenants_uncovered() -> None:
    snapshot = _snapshot(
        _worker("w", kinds={"a"}, tenants={"t1"}),
        _due("a", 2, tenant="t1"),
        _due("a", 3, tenant="t2"),
        _due("a", 1),
    )
    report = assess_health(snapshot, LIMITS)
    assert report.uncovered_kinds == ["a"]
    [kind] = report.kinds
    assert (kind.pending_due, kind.uncovered) == (6, 4)
    assert report.problems == [
        "kind 'a': 4 due job(s) of tenant(s) 't2', (no tenant) that no live worker claims"
    ]


def test_kinds_sum_their_tenants_and_keep_the_oldest_due_time() -> None:
    snapshot = _snapshot(
        _worker("w"),
        _due("a", 1, tenant="t1", waited=30),
        _due("a", 2, tenant="t2", waited=90),
        QueueStats("a", None, scheduled=5, running=2, dead=1),
    )
    [kind] = assess_health(snapshot, LIMITS).kinds
    assert (kind.pending_due, kind.scheduled, kind.running, kind.dead) == (3, 5, 2, 1)
    assert kind.oldest_due_age == timedelta(seconds=90)


def test_max_pending_age_and_max_dead_are_problems_only_beyond_them() -> None:
    limits = HealthThresholds(
        worker_timeout=timedelta(seconds=30), max_pending_age=timedelta(minutes=5), max_dead=2
    )
    within = _snapshot(_worker("w"), _due("a", waited=300), QueueStats("b", None, dead=2))
    assert assess_health(within, limits).healthy
    beyond = _snapshot(_worker("w"), _due("a", waited=301), QueueStats("b", None, dead=3))
    assert assess_health(beyond, limits).problems == [
        "kind 'a': the oldest due job has waited 5m1s (max 5m)",
        "kind 'b': 3 dead job(s) (max 2)",
    ]


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        (
            SchemaInfo("jobs", installed=False, version=0, expected=7, apply_command="apply it"),
            "schema 'jobs' is not installed; run `apply it`",
        ),
        (
            SchemaInfo(
                "jobs",
                installed=True,
                version=5,
                expected=7,
                pending=("0006_x", "0007_y"),
                apply_command="apply it",
            ),
            "schema 'jobs' is at version 5, this code expects 7 (pending: 0006_x, 0007_y); "
            "run `apply it`",
        ),
        (SchemaInfo("jobs", installed=True, version=7, expected=7), None),
        (SchemaInfo("jobs", installed=True, version=9, expected=7), None),  # newer: fine
    ],
)
def test_schema_missing_or_older_is_a_problem(schema: SchemaInfo, problem: str | None) -> None:
    report = assess_health(_snapshot(schema=schema), LIMITS)
    assert report.problems == ([] if problem is None else [problem])
    assert report.schema == schema


def test_unreachable_report_is_unhealthy_with_the_error_on_one_line() -> None:
    report = unreachable_report("connection refused\n\tIs the server running?", LIMITS)
    assert not report.healthy
    assert report.problems == ["database unreachable: connection refused Is the server running?"]
    assert not report.reachable
    assert report.error == "connection refused Is the server running?"
    assert report.checked_at is None


def test_to_dict_is_json_with_stable_keys() -> None:
    schema = SchemaInfo("skiplock", installed=True, version=7, expected=7)
    snapshot = _snapshot(
        _worker("w", silent=5, kinds={"b", "a"}, tenants={"t"}, running=2),
        _due("a", waited=12),
        schema=schema,
    )
    data = json.loads(json.dumps(assess_health(snapshot, LIMITS).to_dict()))
    assert set(data) == {
        "healthy",
        "problems",
        "checked_at",
        "database",
        "schema",
        "workers",
        "kinds",
        "uncovered_kinds",
        "throttled",
        "thresholds",
        "paused",
        "abandoned",
        "replica",
    }
    assert data["checked_at"] == NOW.isoformat()
    assert data["database"] == {"reachable": True, "error": None}
    assert data["schema"] == {
        "name": "skiplock",
        "installed": True,
        "version": 7,
        "expected": 7,
        "pending": [],
        "up_to_date": True,
    }
    assert data["workers"] == [
        {
            "id": "w",
            "host": "host",
            "pid": 1,
            "kinds": ["a", "b"],
            "tenants": ["t"],
            "started_at": (NOW - timedelta(hours=1)).isoformat(),
            "last_heartbeat": (NOW - timedelta(seconds=5)).isoformat(),
            "heartbeat_age_seconds": 5.0,
            "running": 2,
            "live": True,
            "slots": None,
            "version": None,
            "request": None,
        }
    ]
    assert data["kinds"] == [
        {
            "kind": "a",
            "pending_due": 1,
            "scheduled": 0,
            "oldest_due_age_seconds": 12.0,
            "running": 0,
            "dead": 0,
            "uncovered": 1,
            "covered": False,
            "bounded": False,
        }
    ]
    assert data["thresholds"] == {
        "worker_timeout_seconds": 30.0,
        "max_pending_age_seconds": None,
        "max_dead": None,
    }
    unreachable = json.loads(json.dumps(unreachable_report("down", LIMITS).to_dict()))
    assert unreachable["database"] == {"reachable": False, "error": "down"}
    assert unreachable["schema"] is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.25, "250ms"),
        (1, "1s"),
        (59.6, "1m"),
        (90, "1m30s"),
        (3600, "1h"),
        (3600 + 5 * 60 + 7, "1h5m"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (-90, "-1m30s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(timedelta(seconds=seconds)) == text


B = QueueStats.SPLIT_BOUND


@pytest.mark.parametrize(
    ("pending", "scheduled_upto", "due_upto", "split"),
    [
        (0, 0, None, (0, 0, False)),
        (7, 2, None, (5, 2, False)),  # few scheduled: counted, the rest is due
        (B + 5, B, None, (5, B, False)),  # exactly the bound: still counted
        (B + 30, B + 1, 29, (29, B + 1, False)),  # many scheduled, few due: due counted
        (3 * B, B + 1, B + 1, (B, B, True)),  # both sides above: lower bounds
    ],
)
def test_pending_split_is_exact_unless_both_sides_pass_the_bound(
    pending: int, scheduled_upto: int, due_upto: int | None, split: tuple[int, int, bool]
) -> None:
    assert QueueStats.split(pending, scheduled_upto, due_upto) == split


def test_a_bounded_tenant_makes_its_kind_bounded() -> None:
    report = assess_health(
        _snapshot(
            QueueStats("a", "t1", due=B, scheduled=B, oldest_due_at=NOW, bounded=True),
            QueueStats("a", "t2", due=1, oldest_due_at=NOW),
            QueueStats("b", None, due=1, oldest_due_at=NOW),
        ),
        LIMITS,
    )
    assert [(k.kind, k.pending_due, k.bounded) for k in report.kinds] == [
        ("a", B + 1, True),
        ("b", 1, False),
    ]
    assert report.to_dict()["kinds"][0]["bounded"] is True


def test_a_report_read_from_a_standby_carries_its_lag() -> None:
    replica = ReplicaStatus(lag=timedelta(seconds=2.5), replayed_at=NOW - timedelta(seconds=2.5))
    snapshot = attrs.evolve(_snapshot(), replica=replica)
    report = assess_health(snapshot, LIMITS)
    assert report.replica == replica
    assert report.healthy  # a lag is shown, not a problem
    assert report.to_dict()["replica"] == {
        "lag_seconds": 2.5,
        "replayed_at": (NOW - timedelta(seconds=2.5)).isoformat(),
    }
    assert assess_health(_snapshot(), LIMITS).to_dict()["replica"] is None
    unknown = ReplicaStatus(lag=None)
    assert unknown.to_dict() == {"lag_seconds": None, "replayed_at": None}
