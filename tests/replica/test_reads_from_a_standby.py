"""Reads from a replica (issue 43, item 3) on a real hot standby (tests/pgstandby.py):
the operator reads of an engine with ``reads=`` (the REST API's GETs, the dashboard's
pages, the exporter, the health report, the ``skiplock`` command's reads with
``--read-dsn``) come from the standby, every change goes to the primary, and the
standby's lag is reported where its numbers are.

Each test proves where a read came from by pausing the standby's replay
(``pg_wal_replay_pause()``): a job written on the primary then is missing from the
standby's reads (and its lag grows) until replay resumes.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

from skiplock import Engine, JobState, Settings
from skiplock.adapters.asyncpg import AsyncpgJobStore
from skiplock.adapters.psycopg import PsycopgJobStore, apply_schema
from skiplock.cli import main
from skiplock.contrib.prometheus import exporter
from skiplock.core import JobNotFoundError, WorkerInfo
from skiplock.integrations.dashboard import Dashboard, Permission, Request
from skiplock.integrations.rest import RestApi
from tests.contrib.test_exporter import samples
from tests.pgcluster import wait_until
from tests.pgstandby import Pair, primary_and_standby

if TYPE_CHECKING:
    from collections.abc import Iterator

    from skiplock.core import HealthReport


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with primary_and_standby() as servers:
        apply_schema(servers.primary.dsn)
        servers.wait_caught_up()
        yield servers


@pytest.fixture(scope="module")
def stores(pair: Pair) -> Iterator[tuple[PsycopgJobStore, PsycopgJobStore]]:
    primary = PsycopgJobStore(pair.primary.dsn, min_size=1, max_size=4)
    standby = PsycopgJobStore(pair.standby.dsn, min_size=1, max_size=4)
    try:
        yield primary, standby
    finally:
        primary.close()
        standby.close()


@pytest.fixture
def engine(pair: Pair, stores: tuple[PsycopgJobStore, PsycopgJobStore]) -> Iterator[Engine]:
    """An engine writing to the primary, its operator reads on the standby; the standby
    replays again (and has caught up) after each test."""
    primary, standby = stores
    engine = Engine(primary, Settings(audit=True), reads=standby)
    engine.declare_kind("replica.report")
    try:
        yield engine
    finally:
        pair.resume_replay()
        pair.wait_caught_up()


def _lagging(pair: Pair, engine: Engine) -> HealthReport:
    """Pause the standby's replay, write on the primary, and wait until the standby's
    health report shows a lag: its reads are behind from then on."""
    pair.pause_replay()
    engine.enqueue("replica.report", {"marker": "after the pause"})
    reports: list[HealthReport] = []

    def behind() -> bool:
        reports.append(engine.reader().health())
        replica = reports[-1].replica
        return replica is not None and replica.lag is not None and replica.lag > timedelta(0)

    wait_until(behind, 30, "the standby to report a lag")
    return reports[-1]


def _allow(request: Request, permission: Permission) -> str:
    return "operator"


def _request(method: str, path: str, *, job_id: int | None = None, body: Any = None) -> Request:
    return Request(
        method,
        path,
        headers={"host": "jobs.example", "content-type": "application/json"},
        path_params={} if job_id is None else {"job_id": str(job_id)},
        body=b"" if body is None else json.dumps(body).encode(),
    )


# ---- the store over a standby ----------------------------------------------------------------


def test_a_store_over_the_standby_reports_its_lag_the_primary_none(
    pair: Pair, stores: tuple[PsycopgJobStore, PsycopgJobStore]
) -> None:
    primary, standby = stores
    assert primary.health_snapshot().replica is None
    assert standby.health_snapshot().replica is not None
    _wait_no_lag(standby)  # replayed all it received
    pair.pause_replay()
    try:
        engine = Engine(primary)
        engine.declare_kind("replica.lag")
        engine.enqueue("replica.lag", 1)
        first: list[timedelta] = []

        def lag_seen() -> bool:
            replica = standby.health_snapshot().replica
            assert replica is not None
            if replica.lag:
                first.append(replica.lag)
            return bool(first)

        wait_until(lag_seen, 30, "a lag")

        def grows() -> bool:
            replica = standby.health_snapshot().replica
            assert replica is not None
            assert replica.lag is not None
            return replica.lag > first[0]

        wait_until(grows, 30, "the lag to grow while replay is paused")
    finally:
        pair.resume_replay()
    pair.wait_caught_up()
    _wait_no_lag(standby)


def _wait_no_lag(standby: PsycopgJobStore) -> None:
    wait_until(
        lambda: getattr(standby.health_snapshot().replica, "lag", None) == timedelta(0),
        30,
        "no lag: the standby replayed all it received",
    )


def test_the_asyncpg_store_reports_the_standby_too(pair: Pair) -> None:
    async def read() -> tuple[Any, Any]:
        async with (
            AsyncpgJobStore(pair.primary.dsn, min_size=1, max_size=1) as primary,
            AsyncpgJobStore(pair.standby.dsn, min_size=1, max_size=1) as standby,
        ):
            return (await primary.health_snapshot()).replica, (
                await standby.health_snapshot()
            ).replica

    on_primary, on_standby = asyncio.run(read())
    assert on_primary is None
    assert on_standby is not None
    assert on_standby.lag == timedelta(0)


def test_a_worker_stays_live_in_the_standbys_report_however_long_it_lags(
    pair: Pair, engine: Engine, stores: tuple[PsycopgJobStore, PsycopgJobStore]
) -> None:
    # The standby's rows are as of its lag ago: a heartbeat is aged from then, not from
    # the standby's clock, or every worker would look silent on a lagging standby.
    primary, _ = stores
    info = WorkerInfo(id="replica-worker", host="h", pid=1)
    primary.register_worker(info)
    try:
        pair.wait_caught_up()
        _lagging(pair, engine)
        timeout = timedelta(milliseconds=300)

        def lagged_past_the_timeout() -> bool:
            replica = engine.reader().health().replica
            return replica is not None and (replica.lag or timedelta(0)) > 2 * timeout

        wait_until(lagged_past_the_timeout, 30, "a lag longer than the worker timeout")
        report = engine.reader().health(worker_timeout=timeout)
        [worker] = [w for w in report.workers if w.id == "replica-worker"]
        assert worker.live
    finally:
        primary.unregister_worker("replica-worker")


# ---- the engine: reads from the standby, changes on the primary ------------------------------


def test_reads_come_from_the_standby_and_changes_go_to_the_primary(
    pair: Pair, engine: Engine
) -> None:
    before = engine.enqueue("replica.report", {"n": 1})
    pair.wait_caught_up()
    assert engine.reader().get_job(before.id).state is JobState.PENDING
    _lagging(pair, engine)
    during = engine.enqueue("replica.report", {"n": 2})
    # The engine's own reads are the primary's (an application reads its own writes)...
    assert engine.get_job(during.id).state is JobState.PENDING
    # ... the operator reads the standby's, as of before the pause.
    with pytest.raises(JobNotFoundError):
        engine.reader().get_job(during.id)
    ids = {job.id for job in engine.reader().list_jobs(kind="replica.report")}
    assert before.id in ids
    assert during.id not in ids
    # A change goes to the primary and succeeds while the standby lags.
    assert engine.operator("alice").cancel_job(before.id).state is JobState.CANCELLED
    assert engine.reader().get_job(before.id).state is JobState.PENDING  # not replayed yet
    pair.resume_replay()
    pair.wait_caught_up()
    assert engine.reader().get_job(before.id).state is JobState.CANCELLED
    assert engine.reader().get_job(during.id).state is JobState.PENDING


def test_without_reads_the_reader_reads_the_store(
    stores: tuple[PsycopgJobStore, PsycopgJobStore],
) -> None:
    primary, _ = stores
    engine = Engine(primary)
    assert engine.reads_store is None
    assert engine.reader().store is primary
    assert engine.reader().health().replica is None


# ---- the doors -------------------------------------------------------------------------------


def test_the_rest_apis_gets_read_the_standby_its_changes_the_primary(
    pair: Pair, engine: Engine
) -> None:
    api = RestApi(engine, authorize=_allow)
    report = _lagging(pair, engine)
    assert report.replica is not None
    created = api.handle(
        "createJob", _request("POST", "/jobs", body={"kind": "replica.report", "payload": 3})
    )
    # The created job is answered from the primary, where it was written.
    assert created.status == 201, created.body
    job_id = json.loads(created.body)["id"]
    got = api.handle("getJob", _request("GET", f"/jobs/{job_id}", job_id=job_id))
    assert got.status == 404  # the standby has not replayed it
    cancelled = api.handle("cancelJob", _request("POST", f"/jobs/{job_id}/cancel", job_id=job_id))
    assert cancelled.status == 200, cancelled.body
    assert json.loads(cancelled.body)["state"] == "cancelled"
    health = json.loads(api.handle("getHealth", _request("GET", "/health")).body)
    assert health["replica"]["lag_seconds"] > 0
    pair.resume_replay()
    pair.wait_caught_up()
    got = api.handle("getJob", _request("GET", f"/jobs/{job_id}", job_id=job_id))
    assert got.status == 200
    assert json.loads(got.body)["state"] == "cancelled"
    health = json.loads(api.handle("getHealth", _request("GET", "/health")).body)
    assert health["replica"] == {
        "lag_seconds": 0.0,
        "replayed_at": health["replica"]["replayed_at"],
    }


def test_the_rest_apis_health_says_null_on_the_primary(
    stores: tuple[PsycopgJobStore, PsycopgJobStore],
) -> None:
    api = RestApi(Engine(stores[0]), authorize=_allow)
    health = json.loads(api.handle("getHealth", _request("GET", "/health")).body)
    assert health["replica"] is None


def test_the_dashboard_reads_the_standby_and_shows_its_lag(pair: Pair, engine: Engine) -> None:
    # cache=0: the test reloads at once and asks for the lag as it is now.
    dashboard = Dashboard(engine, authorize=_allow, cache=0)
    overview = dashboard.handle("overview", _request("GET", "/"))
    assert overview.status == 200, overview.body
    assert 'data-testid="replica-lag">0ms<' in overview.body.decode()
    _lagging(pair, engine)
    job = engine.enqueue("replica.report", {"n": 4})
    page = dashboard.handle("job", _request("GET", f"/jobs/{job.id}", job_id=job.id))
    assert page.status == 404  # not on the standby yet
    body = dashboard.handle("overview", _request("GET", "/")).body.decode()
    assert 'data-testid="replica-lag">0ms<' not in body
    assert 'data-testid="replica-lag">' in body
    pair.resume_replay()
    pair.wait_caught_up()
    page = dashboard.handle("job", _request("GET", f"/jobs/{job.id}", job_id=job.id))
    assert page.status == 200


def test_the_dashboard_over_the_primary_shows_no_lag(
    stores: tuple[PsycopgJobStore, PsycopgJobStore],
) -> None:
    dashboard = Dashboard(Engine(stores[0]), authorize=_allow)
    body = dashboard.handle("overview", _request("GET", "/")).body.decode()
    assert "replica-lag" not in body


def test_the_exporter_reads_the_standby_and_exports_its_lag(
    pair: Pair, engine: Engine, stores: tuple[PsycopgJobStore, PsycopgJobStore]
) -> None:
    kind = (("kind", "replica.report"), ("tenant", ""))
    metrics = exporter(engine, cache_seconds=0)
    got = samples(metrics.exposition().decode())
    assert got[("skiplock_replica_lag_seconds", ())] == 0
    pending = got.get(("skiplock_jobs_pending", kind), 0)
    _lagging(pair, engine)
    engine.enqueue("replica.report", {"n": 5})
    got = samples(metrics.exposition().decode())
    assert got[("skiplock_replica_lag_seconds", ())] > 0
    # The job of _lagging and this one are on the primary only.
    assert got.get(("skiplock_jobs_pending", kind), 0) == pending
    on_primary = samples(exporter(Engine(stores[0]), cache_seconds=0).exposition().decode())
    assert on_primary[("skiplock_jobs_pending", kind)] == pending + 2
    assert ("skiplock_replica_lag_seconds", ()) not in on_primary


# ---- the skiplock command --------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], pair: Pair, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main([*argv, "--dsn", pair.primary.dsn, "--read-dsn", pair.standby.dsn])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_commands_read_the_standby_and_change_the_primary(
    pair: Pair, engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    _lagging(pair, engine)
    job = engine.enqueue("replica.report", {"n": 6})
    status, _, err = _cli(capsys, pair, "jobs", "show", str(job.id), "--json")
    assert status == 1
    assert f"no job with id {job.id}" in err
    status, out, _ = _cli(capsys, pair, "jobs", "list", "--kind", "replica.report", "--json")
    assert status == 0
    assert job.id not in {row["id"] for row in json.loads(out)["jobs"]}
    status, out, err = _cli(capsys, pair, "jobs", "cancel", str(job.id), "--actor", "bob")
    assert status == 0, err
    assert engine.get_job(job.id).state is JobState.CANCELLED  # on the primary
    status, out, _ = _cli(capsys, pair, "health", "--json")
    assert json.loads(out)["replica"]["lag_seconds"] > 0
    status, out, _ = _cli(capsys, pair, "health")
    assert "replica:  read from a hot standby, " in out
    assert " behind the primary" in out
    status, out, _ = _cli(capsys, pair, "counts", "--json")
    assert status == 0
    pair.resume_replay()
    pair.wait_caught_up()
    status, out, _ = _cli(capsys, pair, "jobs", "show", str(job.id), "--json")
    assert status == 0
    assert json.loads(out)["state"] == "cancelled"


def test_a_read_replica_that_is_down_fails_the_reads_only(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.pgcluster import free_port

    down = f"postgresql://postgres@127.0.0.1:{free_port()}/postgres"
    capsys.readouterr()
    status = main(["counts", "--dsn", pair.primary.dsn, "--read-dsn", down])
    assert status == 1
    assert "cannot connect to the read replica" in capsys.readouterr().err
    status = main(["health", "--json", "--dsn", pair.primary.dsn, "--read-dsn", down])
    report = json.loads(capsys.readouterr().out)
    assert status == 1
    assert report["database"]["reachable"] is False
    # A change needs the primary only.
    status = main(
        ["pause", "--kind", "replica.report", "--dsn", pair.primary.dsn, "--read-dsn", down]
    )
    assert status == 0, capsys.readouterr().err
    status = main(["resume", "--kind", "replica.report", "--dsn", pair.primary.dsn])
    assert status == 0, capsys.readouterr().err
