"""Prometheus metrics (skiplock.contrib.prometheus, R5): a scrape after a run on
PostgreSQL, the depth collector's one query per scrape, its cache, cardinality cap and
failures, serving (``skiplock worker --metrics-port``) and multiprocess mode."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from skiplock import AsyncEngine, JobContext, JobState, RateLimit, Settings, StateCount, cli
from skiplock._compat_async import join, spawn
from skiplock.adapters.memory import AsyncInMemoryJobStore
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.contrib.prometheus import OTHER, PrometheusMetrics
from skiplock.core import ValidationError
from tests.engine.helpers_async import eventually
from tests.pgfixtures import store_fixture

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from pathlib import Path

pytestmark = pytest.mark.anyio


class CountingPgStore(AsyncPsycopgJobStore):
    """The psycopg store, counting ``counts()`` queries."""

    counts_calls = 0

    async def counts(self) -> list[StateCount]:
        self.counts_calls += 1
        return await super().counts()


store = store_fixture(CountingPgStore)


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.postgres
async def test_a_scrape_after_a_run_on_postgres(store: CountingPgStore) -> None:
    registry = CollectorRegistry()
    # No cache: every read of the registry below is a scrape of its own.
    metrics = PrometheusMetrics(registry=registry, cache_seconds=0)
    settings = Settings(
        poll_interval=0.05,
        backoff_base=0.0,
        backoff_jitter=0.0,
        # One token for both mail kinds and (practically) never another, in per-process
        # buckets: a claim may take both mail jobs and release one at its start.
        caps={"mail": RateLimit(rps=0.0001, burst=1)},
        rate_limit_scope="process",
    )
    engine = AsyncEngine(store, settings, metrics=metrics)
    slow_started = asyncio.Event()
    proceed = asyncio.Event()
    flaky_calls = 0

    @engine.processor("ok")
    async def ok(payload: Any, ctx: JobContext) -> None:
        pass

    @engine.processor("late")
    async def late(payload: Any, ctx: JobContext) -> None:
        pass

    @engine.processor("flaky", max_attempts=3)
    async def flaky(payload: Any, ctx: JobContext) -> None:
        nonlocal flaky_calls
        flaky_calls += 1
        if flaky_calls == 1:
            raise ConnectionError("first attempt fails")

    @engine.processor("doomed", max_attempts=1)
    async def doomed(payload: Any, ctx: JobContext) -> None:
        raise ValueError("always fails")

    @engine.processor("mail.welcome", provider="mail")
    async def welcome(payload: Any, ctx: JobContext) -> None:
        pass

    @engine.processor("mail.digest", provider="mail")
    async def digest(payload: Any, ctx: JobContext) -> None:
        pass

    @engine.processor("slow")
    async def slow(payload: Any, ctx: JobContext) -> None:
        slow_started.set()
        await proceed.wait()

    engine.declare_kind("elsewhere")  # processed by another service: never claimed here

    now = await store.now()
    # First in claim order, so one claim takes both mail jobs: the one that runs second
    # finds the provider's token gone and is released (rate limited).
    mail_ids = [
        (await engine.enqueue(kind, tenant="acme", priority=10)).id
        for kind in ("mail.welcome", "mail.digest")
    ]
    for i in range(3):
        await engine.enqueue("ok", i)
    await engine.enqueue("late", available_at=now - timedelta(minutes=10))
    await engine.enqueue("flaky")
    await engine.enqueue("doomed")
    await engine.enqueue("slow", tenant="t1")
    await engine.enqueue("elsewhere", tenant="t2", available_at=now - timedelta(hours=1))
    await engine.enqueue("elsewhere", tenant="t3", delay=3600)

    worker = engine.worker(concurrency=8, worker_id="w-prom", install_signal_handlers=False)
    task = spawn(worker.run)
    expected = {
        JobState.SUCCEEDED: 6,  # ok x3, late, flaky, one mail
        JobState.DEAD: 1,
        JobState.RUNNING: 1,  # slow
        JobState.PENDING: 3,  # the throttled mail, elsewhere x2
    }

    async def settled() -> bool:
        totals: dict[JobState, int] = {}
        for c in await engine.counts():
            totals[c.state] = totals.get(c.state, 0) + c.count
        return totals == expected and slow_started.is_set() and worker.unwritten == 0

    try:
        await _until(settled, "the run to settle")
        mail = {job_id: (await engine.get_job(job_id)) for job_id in mail_ids}
        [winner] = [j.kind for j in mail.values() if j.state is JobState.SUCCEEDED]
        [loser] = [j.kind for j in mail.values() if j.state is JobState.PENDING]

        def scrapes(n: int) -> None:
            for _ in range(n):
                generate_latest(registry)  # what Prometheus' request gets

        # In another thread, as Prometheus' requests are served: the async store's query
        # runs on the worker's loop. Exactly one grouped query per scrape.
        store.counts_calls = 0
        await asyncio.to_thread(scrapes, 3)
        assert store.counts_calls == 3

        def value(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(f"skiplock_{name}", labels)

        def scrape() -> dict[str, float | None]:
            got: dict[str, float | None] = {}
            for kind, tenant in [
                (winner, "acme"),
                (loser, "acme"),
                ("ok", ""),
                ("slow", "t1"),
                ("doomed", ""),
                ("elsewhere", "t2"),
                ("elsewhere", "t3"),
            ]:
                for gauge in ("pending", "running", "dlq", "oldest_pending_age_seconds"):
                    got[f"{gauge} {kind} {tenant}"] = value(
                        f"jobs_{gauge}", kind=kind, tenant=tenant
                    )
            for kind in ("ok", "late", "flaky", "doomed", "slow", winner, loser):
                got[f"claimed {kind}"] = value("jobs_claim_latency_seconds_count", kind=kind)
                got[f"processed {kind}"] = value("jobs_processing_seconds_count", kind=kind)
            for le in ("300.0", "900.0"):
                got[f"late le {le}"] = value(
                    "jobs_claim_latency_seconds_bucket", kind="late", le=le
                )
            for kind, outcome in [
                ("ok", "succeeded"),
                ("late", "succeeded"),
                ("flaky", "retry"),
                ("flaky", "succeeded"),
                ("doomed", "dead"),
                (winner, "succeeded"),
                (loser, "released"),
                ("slow", "succeeded"),
            ]:
                got[f"{outcome} {kind}"] = value("jobs_attempts_total", kind=kind, outcome=outcome)
            for kind in (winner, loser):
                got[f"throttled {kind}"] = value("rate_limited_total", tenant="acme", kind=kind)
            for gauge in ("slots", "slots_busy", "jobs_held", "outcomes_unwritten"):
                got[gauge] = value(f"worker_{gauge}", worker="w-prom")
            return got

        got = await asyncio.to_thread(scrape)

        age = got.pop("oldest_pending_age_seconds elsewhere t2")
        assert age is not None
        assert 3600 <= age < 3600 + 60
        assert got == {
            # depths (the scheduled job is pending, but not due: age 0)
            f"pending {winner} acme": 0,
            f"running {winner} acme": 0,
            f"dlq {winner} acme": 0,
            f"oldest_pending_age_seconds {winner} acme": 0,
            f"pending {loser} acme": 1,
            f"running {loser} acme": 0,
            f"dlq {loser} acme": 0,
            f"oldest_pending_age_seconds {loser} acme": 0,
            "pending ok ": 0,
            "running ok ": 0,
            "dlq ok ": 0,
            "oldest_pending_age_seconds ok ": 0,
            "pending slow t1": 0,
            "running slow t1": 1,
            "dlq slow t1": 0,
            "oldest_pending_age_seconds slow t1": 0,
            "pending doomed ": 0,
            "running doomed ": 0,
            "dlq doomed ": 1,
            "oldest_pending_age_seconds doomed ": 0,
            "pending elsewhere t2": 1,
            "running elsewhere t2": 0,
            "dlq elsewhere t2": 0,
            "pending elsewhere t3": 1,
            "running elsewhere t3": 0,
            "dlq elsewhere t3": 0,
            "oldest_pending_age_seconds elsewhere t3": 0,
            # claims (latency observed per claim) and processing (per finished run)
            "claimed ok": 3,
            "processed ok": 3,
            "claimed late": 1,
            "processed late": 1,
            "claimed flaky": 2,
            "processed flaky": 2,
            "claimed doomed": 1,
            "processed doomed": 1,
            "claimed slow": 1,
            "processed slow": None,  # still running
            f"claimed {winner}": 1,
            f"processed {winner}": 1,
            f"claimed {loser}": 1,
            f"processed {loser}": None,  # released by the throttle: not a run
            # ten minutes late: between the 300 s and 900 s buckets
            "late le 300.0": 0,
            "late le 900.0": 1,
            # attempts by outcome
            "succeeded ok": 3,
            "succeeded late": 1,
            "retry flaky": 1,
            "succeeded flaky": 1,
            "dead doomed": 1,
            f"succeeded {winner}": 1,
            f"released {loser}": 1,
            "succeeded slow": None,
            # the token bucket's hit
            f"throttled {winner}": None,
            f"throttled {loser}": 1,
            # the worker
            "slots": 8,
            "slots_busy": 1,
            "jobs_held": 0,
            "outcomes_unwritten": 0,
        }
    finally:
        proceed.set()
        worker.stop()
        await join(task)
    # A stopped worker is forgotten: no gauges, no depths (nothing to read them with).
    assert registry.get_sample_value("skiplock_worker_slots", {"worker": "w-prom"}) is None
    assert registry.get_sample_value("skiplock_jobs_dlq", {"kind": "doomed", "tenant": ""}) is None


# ---- the depth collector, through the port ---------------------------------------------


class Status:
    """A worker as the metrics see it."""

    def __init__(
        self, worker_id: str = "w1", paused: tuple[tuple[str | None, str | None], ...] = ()
    ) -> None:
        self.id = worker_id
        self.concurrency = 4
        self.running = 2
        self.held = 1
        self.unwritten = 3
        self.paused = paused


class Counts:
    """A counts source: returns ``rows`` (or raises ``error``), counting calls."""

    def __init__(self, rows: Sequence[StateCount] = (), error: Exception | None = None) -> None:
        self.rows = list(rows)
        self.error = error
        self.calls = 0

    def __call__(self, timeout: float) -> Sequence[StateCount]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.rows


def _pending(kind: str, tenant: str | None, n: int, age: float = 0.0) -> StateCount:
    return StateCount(JobState.PENDING, kind, tenant, n, oldest_due_age=age)


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    found: dict[tuple[str, ...], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sample.labels.values())] = sample.value
    return found


def test_depths_beyond_the_cap_are_summed_per_kind() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, max_series=3, cache_seconds=0)
    counts = Counts(
        [
            _pending("k", "big", 50, age=5.0),
            StateCount(JobState.RUNNING, "k", "big", 2),
            _pending("k", "mid", 20, age=7.0),
            _pending("k", "small1", 2, age=30.0),
            StateCount(JobState.DEAD, "k", "small2", 1),
            _pending("k", None, 1, age=1.0),
            _pending("j", "other", 3, age=2.0),
            StateCount(JobState.SUCCEEDED, "k", "done", 900),  # no active job: ranks last
        ]
    )
    metrics.worker_started(Status(), counts)
    pending = _samples(registry, "skiplock_jobs_pending")
    # The three pairs with the most active jobs keep their series; per kind, the others
    # are summed under tenant "__other__".
    assert pending == {
        ("k", "big"): 50,
        ("k", "mid"): 20,
        ("j", "other"): 3,
        ("k", OTHER): 2 + 0 + 1 + 0,
    }
    assert _samples(registry, "skiplock_jobs_dlq")[("k", OTHER)] == 1
    assert _samples(registry, "skiplock_jobs_running")[("k", "big")] == 2
    ages = _samples(registry, "skiplock_jobs_oldest_pending_age_seconds")
    assert ages[("k", OTHER)] == 30.0  # the oldest of the summed ones
    assert ages[("k", "big")] == 5.0
    assert counts.calls == 4  # one per scrape, uncached


def test_rate_limited_tenants_beyond_the_cap_share_one_series() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, max_series=2)
    for tenant in ["a", "b", "c", "d", "a", None]:
        metrics.rate_limited("k", tenant)
    assert _samples(registry, "skiplock_rate_limited_total") == {
        ("a", "k"): 2,
        ("b", "k"): 1,
        (OTHER, "k"): 3,  # c, d and the tenant-less job
    }


def test_throttle_decisions_are_counted_per_kind_tenant_and_limit() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, max_series=2)
    metrics.claim_throttled("k", "a", "rate_limit")
    metrics.claim_throttled("k", "a", "rate_limit")
    metrics.claim_throttled("k", None, "cluster_limit")
    metrics.claim_throttled("k", "b", "rate_limit")  # beyond the cap
    assert _samples(registry, "skiplock_throttle_decisions_total") == {
        ("k", "a", "rate_limit"): 2,
        ("k", "", "cluster_limit"): 1,
        ("k", OTHER, "rate_limit"): 1,
    }


def test_depths_are_cached_and_concurrent_scrapes_share_a_query() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, cache_seconds=60)
    counts = Counts([_pending("k", None, 4)])
    metrics.worker_started(Status(), counts)
    for _ in range(3):
        assert _samples(registry, "skiplock_jobs_pending") == {("k", ""): 4}
    assert counts.calls == 1


def test_worker_gauges_and_a_failing_count(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, cache_seconds=0)
    counts = Counts(error=ConnectionError("database away"))
    metrics.worker_started(Status("w1"), counts)
    metrics.worker_started(Status("w2"), Counts())
    text = generate_latest(registry).decode()
    # The scrape still answers, with the worker gauges and without depths.
    assert "skiplock_jobs_pending{" not in text
    assert _samples(registry, "skiplock_worker_slots") == {("w1",): 4, ("w2",): 4}
    assert _samples(registry, "skiplock_worker_slots_busy") == {("w1",): 2, ("w2",): 2}
    assert _samples(registry, "skiplock_worker_jobs_held") == {("w1",): 1, ("w2",): 1}
    assert _samples(registry, "skiplock_worker_outcomes_unwritten") == {("w1",): 3, ("w2",): 3}
    assert "reading the job counts failed (ConnectionError: database away)" in caplog.text
    metrics.worker_stopped(Status("w1"))
    assert _samples(registry, "skiplock_worker_slots") == {("w2",): 4}


def test_the_pauses_the_workers_read() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, cache_seconds=0)
    metrics.worker_started(Status("w1", (("mail", None), (None, "acme"))), Counts())
    metrics.worker_started(Status("w2", (("mail", None),)), Counts())
    assert _samples(registry, "skiplock_paused") == {("mail", "*"): 1, ("*", "acme"): 1}


def test_without_depths_nothing_is_queried() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, depths=False)
    counts = Counts([_pending("k", None, 4)])
    metrics.worker_started(Status(), counts)
    text = generate_latest(registry).decode()
    assert "skiplock_jobs_pending" not in text
    assert "skiplock_worker_slots{" in text
    assert counts.calls == 0


def test_namespace_and_argument_checks() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(namespace="shop_queue", registry=registry)
    metrics.job_finished("k", None, "succeeded", 0.5)
    assert (
        registry.get_sample_value(
            "shop_queue_jobs_attempts_total", {"kind": "k", "outcome": "succeeded"}
        )
        == 1
    )
    assert registry.get_sample_value("shop_queue_jobs_processing_seconds_sum", {"kind": "k"}) == 0.5
    with pytest.raises(ValueError, match="Duplicated"):
        PrometheusMetrics(namespace="shop_queue", registry=registry)
    for bad in ["", "9lives", "with-dash", "spaß"]:
        with pytest.raises(ValidationError, match="namespace"):
            PrometheusMetrics(namespace=bad, registry=CollectorRegistry())
    with pytest.raises(ValidationError, match="max_series"):
        PrometheusMetrics(registry=CollectorRegistry(), max_series=0)
    with pytest.raises(ValidationError, match="cache_seconds"):
        PrometheusMetrics(registry=CollectorRegistry(), cache_seconds=-1)
    with pytest.raises(ValidationError, match="counts_timeout"):
        PrometheusMetrics(registry=CollectorRegistry(), counts_timeout=float("nan"))
    with pytest.raises(TypeError, match="CollectorRegistry"):
        PrometheusMetrics(registry=object())  # type: ignore[arg-type]


def test_released_and_lost_runs_are_counted_but_not_timed() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    for outcome in ("succeeded", "retry", "dead", "released", "lost", "error"):
        metrics.job_finished("k", None, outcome, 1.0)
    attempts = _samples(registry, "skiplock_jobs_attempts_total")
    assert attempts == {
        ("k", o): 1 for o in ("succeeded", "retry", "dead", "released", "lost", "error")
    }
    assert registry.get_sample_value("skiplock_jobs_processing_seconds_count", {"kind": "k"}) == 3


# ---- the async store's query, from the scrape thread ------------------------------------


class SlowCounts(AsyncInMemoryJobStore):
    """counts() takes ``delay`` seconds (an overloaded database)."""

    delay = 0.0

    async def counts(self) -> list[StateCount]:
        await asyncio.sleep(self.delay)
        return await super().counts()


async def test_a_slow_store_costs_a_scrape_at_most_counts_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry, cache_seconds=0, counts_timeout=0.2)
    store = SlowCounts()
    engine = AsyncEngine(store, metrics=metrics)

    @engine.processor("idle")
    async def idle(payload: Any, ctx: JobContext) -> None:
        pass

    engine.declare_kind("k")  # its job stays pending: nobody here claims it
    await engine.enqueue("k")
    worker = engine.worker(install_signal_handlers=False)
    task = spawn(worker.run)
    try:
        await eventually(lambda: worker.state == "running")  # it reported itself
        fast = await asyncio.to_thread(_samples, registry, "skiplock_jobs_pending")
        assert fast == {("k", ""): 1}
        store.delay = 5.0
        begun = time.monotonic()
        slow = await asyncio.to_thread(_samples, registry, "skiplock_jobs_pending")
        assert time.monotonic() - begun < 2.0
        assert slow == {}
        assert "reading the job counts failed (TimeoutError" in caplog.text
        # From the worker's own event loop the collector must not wait (it would block
        # the loop it waits for): no depths, at once.
        assert _samples(registry, "skiplock_jobs_pending") == {}
        assert "inside that loop" in caplog.text
    finally:
        worker.stop()
        await join(task)


# ---- serving ----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
        return text


def test_serve_answers_scrapes_over_http() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    metrics.job_claimed("k", None, 0.3)
    server, thread = metrics.serve(_free_port(), "127.0.0.1")
    try:
        text = _get(f"http://127.0.0.1:{server.server_port}/metrics")
    finally:
        server.shutdown()
        server.server_close()
    thread.join(5)
    assert 'skiplock_jobs_claim_latency_seconds_count{kind="k"} 1.0' in text


_APP = """
import time

from prometheus_client import CollectorRegistry

from skiplock import Engine, JobContext, Settings
from skiplock.adapters.memory import InMemoryJobStore
from skiplock.contrib.prometheus import PrometheusMetrics

metrics = PrometheusMetrics(registry=CollectorRegistry(), cache_seconds=0)
settings = Settings(poll_interval=0.05, shutdown_timeout=0.2)
engine = Engine(InMemoryJobStore(), settings, metrics=metrics)
plain = Engine(InMemoryJobStore())

@engine.processor("greet")
def greet(payload, ctx: JobContext) -> None:
    while not ctx.cancelled:  # keeps a slot busy until the worker stops
        time.sleep(0.01)

engine.enqueue("greet", tenant="acme")
"""


def test_worker_command_serves_metrics(tmp_path: Path) -> None:
    (tmp_path / "prom_app.py").write_text(textwrap.dedent(_APP), encoding="utf-8")
    port = _free_port()
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "skiplock",
                "worker",
                "prom_app:engine",
                "--metrics-port",
                str(port),
            ],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        text = ""
        # The job's series exist (at 0) from its enqueue on: wait for it to run.
        running = 'running{kind="greet",tenant="acme"} 1.0'
        while "skiplock_worker_slots_busy{" not in text or running not in text:
            assert proc.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, (text, log.read_text(errors="replace"))
            try:
                text = _get(f"http://127.0.0.1:{port}/metrics").replace("skiplock_jobs_", "")
            except OSError:
                time.sleep(0.05)
        assert running in text
        proc.send_signal(signal.SIGTERM)  # the job is interrupted after shutdown_timeout
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert f"serving Prometheus metrics on http://0.0.0.0:{port}/metrics" in log.read_text()


def test_metrics_port_needs_prometheus_metrics(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    module = make_app(_APP.replace("engine.enqueue", "pass  #"))
    assert cli.main(["worker", f"{module}:plain", "--metrics-port", "9100"]) == 2
    err = capsys.readouterr().err
    assert "the engine's metrics are NoopMetrics" in err
    assert "metrics=PrometheusMetrics()" in err
    assert cli.main(["worker", f"{module}:engine", "--metrics-port", "70000"]) == 2
    assert "up to 65535" in capsys.readouterr().err


def test_a_taken_metrics_port_fails_the_start(
    make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    module = make_app(_APP.replace("engine.enqueue", "pass  #"))
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert cli.main(["worker", f"{module}:engine", "--metrics-port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"cannot start the worker: cannot serve metrics on port {port}" in err


# ---- multiprocess mode --------------------------------------------------------------------

_MULTIPROCESS = """
import json
import sys

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from skiplock.contrib.prometheus import PrometheusMetrics

if sys.argv[1] == "work":
    metrics = PrometheusMetrics()
    metrics.job_finished("k", None, "succeeded", 0.25)
    metrics.rate_limited("k", "acme")
    metrics.worker_started(type("W", (), {"id": sys.argv[2], "concurrency": 4, "running": 1,
                                          "held": 0, "unwritten": 0})(), lambda t: [])
    print(generate_latest().decode().count("skiplock_worker_slots{"))
else:
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    print(json.dumps([
        registry.get_sample_value(
            "skiplock_jobs_attempts_total", {"kind": "k", "outcome": "succeeded"}),
        registry.get_sample_value("skiplock_jobs_processing_seconds_count", {"kind": "k"}),
        registry.get_sample_value("skiplock_rate_limited_total", {"tenant": "acme", "kind": "k"}),
        registry.get_sample_value("skiplock_worker_slots", {"worker": "w1"}),
    ]))
"""


def test_multiprocess_mode_sums_counters_but_not_scrape_time_gauges(tmp_path: Path) -> None:
    # What docs/metrics.md says about PROMETHEUS_MULTIPROC_DIR.
    env = os.environ | {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-c", _MULTIPROCESS, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    # Each process sees its own worker's gauges in its own registry...
    assert run("work", "w1") == "1"
    assert run("work", "w2") == "1"
    # ...but the aggregating collector reads only what the processes wrote to files.
    assert json.loads(run("read")) == [2.0, 2.0, 2.0, None]
