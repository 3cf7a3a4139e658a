"""The exporter (issue 29, point 6): the queue's gauges without a worker, from
``PrometheusMetrics.watch`` / ``exporter()`` and ``skiplock metrics print|serve``, on the
memory store and on PostgreSQL, also with the database down."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from skiplock import AsyncEngine, Engine, cli
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.contrib.prometheus import PrometheusMetrics, exporter
from skiplock.core import ClaimRequest, HealthSnapshot, RateLimit, StateCount, WorkerInfo
from skiplock.core._health import ThrottledPair
from tests.cli.admin_helpers import add_worker, bury, closed_port, enqueue

if TYPE_CHECKING:
    from collections.abc import Iterator

#: A subprocess not done by then fails its test.
DEADLINE = 20.0


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: (name, sorted labels) -> value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_an_exporter_reads_the_queue_without_a_worker() -> None:
    store = InMemoryJobStore()
    engine = Engine(store)
    engine.enqueue("mail.send", {}, tenant="acme")
    engine.enqueue("mail.send", {}, tenant="acme", delay=timedelta(hours=1))
    engine.enqueue("report.build", {})
    store.register_worker(
        WorkerInfo(id="w1", host="h", pid=1, kinds=frozenset({"mail.send"}), tenants=None)
    )
    metrics = exporter(engine, cache_seconds=0)
    got = samples(metrics.exposition().decode())
    assert got[("skiplock_jobs_pending", (("kind", "mail.send"), ("tenant", "acme")))] == 2
    assert got[("skiplock_jobs_pending", (("kind", "report.build"), ("tenant", "")))] == 1
    assert got[("skiplock_jobs_dlq", (("kind", "mail.send"), ("tenant", "acme")))] == 0
    assert got[("skiplock_up", ())] == 1
    # report.build is due and no live worker claims it.
    assert got[("skiplock_healthy", ())] == 0
    assert got[("skiplock_workers", (("state", "live"),))] == 1
    assert got[("skiplock_workers", (("state", "silent"),))] == 0
    assert not [name for name, _ in got if name.startswith("skiplock_worker_")]
    assert not [name for name, _ in got if name == "skiplock_paused"]


def test_the_exporter_shows_the_pauses() -> None:
    engine = Engine(InMemoryJobStore())
    engine.pause(kind="mail.send", reason="outage")
    engine.pause(kind="report.build", tenant="acme")
    got = samples(exporter(engine, cache_seconds=0).exposition().decode())
    assert got[("skiplock_paused", (("kind", "mail.send"), ("tenant", "*")))] == 1
    assert got[("skiplock_paused", (("kind", "report.build"), ("tenant", "acme")))] == 1


def test_throttled_pairs_in_health_and_the_exporter() -> None:
    # A rate of one job per 1,000 s per tenant, a cluster limit of 1: after one worker
    # pass, acme's bucket is empty and "capped" runs as many as allowed.
    store = InMemoryJobStore()
    engine = Engine(store)

    @engine.processor("mail.send", rate_limit=RateLimit(rps=0.001, burst=1))
    def send(payload: object) -> None: ...

    @engine.processor("capped", cluster_limit=1)
    def capped(payload: object) -> None: ...

    for _ in range(3):
        engine.enqueue("mail.send", {}, tenant="acme")
    engine.enqueue("mail.send", {}, tenant="globex", delay=timedelta(hours=1))
    engine.worker(kinds=["mail.send"]).run_until_idle()
    for _ in range(2):
        engine.enqueue("capped", {})
    store.claim(ClaimRequest(worker_id="w", limit=1, kinds=frozenset({"capped"})))
    report = engine.health()
    assert report.throttled == [
        ThrottledPair("capped", None, 1, "cluster_limit"),
        ThrottledPair("mail.send", "acme", 2, "rate_limit"),
    ]
    assert report.to_dict()["throttled"][1] == {
        "kind": "mail.send",
        "tenant": "acme",
        "due": 2,
        "limit": "rate_limit",
        "bounded": False,
    }
    got = samples(exporter(engine, cache_seconds=0).exposition().decode())
    throttled = {k: v for k, v in got.items() if k[0] == "skiplock_jobs_throttled"}
    assert throttled == {
        ("skiplock_jobs_throttled", (("kind", "capped"), ("tenant", ""))): 1,
        ("skiplock_jobs_throttled", (("kind", "mail.send"), ("tenant", "acme"))): 2,
    }


def test_a_store_that_fails_is_reported_down(caplog: pytest.LogCaptureFixture) -> None:
    class Down(InMemoryJobStore):
        def counts(self) -> list[StateCount]:
            raise ConnectionError("no route to host")

        def health_snapshot(self) -> HealthSnapshot:
            raise ConnectionError("no route to host")

    metrics = exporter(Engine(Down()), cache_seconds=0)
    got = samples(metrics.exposition().decode())
    assert got == {("skiplock_up", ()): 0, ("skiplock_healthy", ()): 0}
    # engine.health() reports the failure; counts() is not tried again in that scrape.
    assert "reading the job counts failed" not in caplog.text


def test_depths_go_when_counts_fail(caplog: pytest.LogCaptureFixture) -> None:
    class NoCounts(InMemoryJobStore):
        def counts(self) -> list[StateCount]:
            raise ConnectionError("statement timeout")

    metrics = exporter(Engine(NoCounts()), cache_seconds=0)
    got = samples(metrics.exposition().decode())
    assert got[("skiplock_up", ())] == 1
    assert not [name for name, _ in got if name.startswith("skiplock_jobs_")]
    assert "reading the job counts failed (ConnectionError: statement timeout)" in caplog.text


def test_reads_are_cached_between_scrapes() -> None:
    calls = {"counts": 0, "health": 0}

    class Counting(InMemoryJobStore):
        def counts(self) -> list[StateCount]:
            calls["counts"] += 1
            return super().counts()

        def health_snapshot(self) -> HealthSnapshot:
            calls["health"] += 1
            return super().health_snapshot()

    metrics = exporter(Engine(Counting()), cache_seconds=3600)
    metrics.exposition()
    metrics.exposition()
    assert calls == {"counts": 1, "health": 1}


def test_watch_an_async_engine_from_its_loop() -> None:
    async def main() -> bytes:
        engine = AsyncEngine(AsyncInMemoryJobStore())
        await engine.enqueue("a.b", {})
        metrics = PrometheusMetrics(registry=CollectorRegistry(), cache_seconds=0)
        metrics.watch(engine)
        # A scrape blocks while the loop reads the store: it runs in another thread.
        return await asyncio.to_thread(metrics.exposition)

    got = samples(asyncio.run(main()).decode())
    assert got[("skiplock_jobs_pending", (("kind", "a.b"), ("tenant", "")))] == 1
    assert got[("skiplock_up", ())] == 1


def test_watch_needs_an_engine() -> None:
    with pytest.raises(TypeError, match="expected a skiplock Engine or AsyncEngine"):
        PrometheusMetrics(registry=CollectorRegistry()).watch(object())  # type: ignore[arg-type]


def test_metrics_print_mounted_on_an_engine(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    engine.enqueue("a.b", {}, tenant="t")
    argv = ["print", "--namespace", "jobs"]
    assert cli.run_mounted("metrics", argv, engine, prog="app metrics") == 0
    got = samples(capsys.readouterr().out)
    assert got[("jobs_jobs_pending", (("kind", "a.b"), ("tenant", "t")))] == 1
    assert cli.run_mounted("metrics", ["print", "--namespace", "9x"], engine, prog="p") == 2
    assert "namespace must be a Prometheus name" in capsys.readouterr().err


@pytest.mark.postgres
def test_metrics_print_on_postgres(admin_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = enqueue(admin_dsn, "mail.send", 3, tenant="acme")
    bury(admin_dsn, ids[0])
    add_worker(admin_dsn, "w-live", "mail.send")
    assert cli.main(["metrics", "print", "--dsn", admin_dsn]) == 0
    got = samples(capsys.readouterr().out)
    pair = (("kind", "mail.send"), ("tenant", "acme"))
    assert got[("skiplock_jobs_pending", pair)] == 2
    assert got[("skiplock_jobs_dlq", pair)] == 1
    assert got[("skiplock_jobs_oldest_pending_age_seconds", pair)] >= 0
    assert got[("skiplock_up", ())] == 1
    assert got[("skiplock_healthy", ())] == 1
    assert got[("skiplock_workers", (("state", "live"),))] == 1


@pytest.mark.postgres
def test_metrics_print_with_the_database_down(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"
    assert cli.main(["metrics", "print", "--dsn", dsn, "--timeout", "2s"]) == 0
    got = samples(capsys.readouterr().out)
    assert got[("skiplock_up", ())] == 0
    assert not [name for name, _ in got if name.startswith("skiplock_jobs_pending")]


@pytest.fixture
def served(admin_dsn: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    port = closed_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "skiplock", "metrics", "serve", "--addr", "127.0.0.1"),
            *("--port", str(port), "--dsn", admin_dsn),
        ],
        env=os.environ.copy(),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(DEADLINE)
        assert process.stderr is not None
        process.stderr.close()


@pytest.mark.postgres
def test_metrics_serve_answers_scrapes_until_sigterm(
    admin_dsn: str, served: tuple[subprocess.Popen[str], int]
) -> None:
    process, port = served
    enqueue(admin_dsn, "mail.send", 1)
    assert process.stderr is not None
    line = process.stderr.readline()  # blocks until it serves (or exits)
    assert line == f"serving Prometheus metrics on http://127.0.0.1:{port}/metrics\n"
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        got = samples(response.read().decode())
    assert got[("skiplock_jobs_pending", (("kind", "mail.send"), ("tenant", "")))] == 1
    assert got[("skiplock_up", ())] == 1
    process.send_signal(signal.SIGTERM)
    assert process.wait(DEADLINE) == 0


@pytest.mark.postgres
def test_a_taken_port_fails_the_exporter(
    admin_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["metrics", "serve", "--addr", "127.0.0.1", "--port", str(port)]
        started = time.monotonic()
        assert cli.main([*argv, "--dsn", admin_dsn]) == 1
    assert time.monotonic() - started < DEADLINE
    assert f"cannot serve metrics on 127.0.0.1:{port}:" in capsys.readouterr().err
