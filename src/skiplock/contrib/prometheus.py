"""Prometheus metrics for skiplock (R5): ``pip install 'skiplock[prometheus]'``.

:class:`PrometheusMetrics` is a :class:`skiplock.ports.Metrics`: pass it to the engine
(``AsyncEngine(store, metrics=PrometheusMetrics())``) and serve its registry
(``skiplock worker --metrics-port 9100``, or :meth:`PrometheusMetrics.serve`). The full
list of metrics, their labels and example alerts are in docs/metrics.md, "Metrics".

Per-job counters and histograms are updated by the worker as jobs go. Queue depths and
worker gauges are read when Prometheus scrapes: one ``counts()`` read per scrape (cached
for ``cache_seconds``), never per job. ``counts()`` is exact and costs O(kinds x tenants x
states), whatever the number of jobs (PostgreSQL: running totals, docs/internals.md
"Operator reads").

Without a worker in the process (an exporter: ``skiplock metrics serve``, or the
endpoints of :mod:`skiplock.integrations.fastapi` / :mod:`~skiplock.integrations.flask`),
:meth:`PrometheusMetrics.watch` reads the depths from an engine's store instead, and adds
what only the store knows: whether it answers, the health verdict and the registered
workers (:func:`exporter` makes such a collector on a registry of its own). The
scrape-time gauges are built in :mod:`skiplock.contrib._prometheus_scrape`.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily

from skiplock.core import ValidationError
from skiplock.core.rules import check_bool, check_int
from skiplock.engine import AsyncEngine, AsyncReader, Engine, Reader

from ._prometheus_scrape import ANY, OTHER, ScrapeCollector, Scraping

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from threading import Thread
    from wsgiref.simple_server import WSGIServer

    from skiplock.core import StateCount
    from skiplock.ports import WorkerStatus

__all__ = [
    "ANY",
    "CONTENT_TYPE",
    "DEFAULT_DURATION_BUCKETS",
    "DEFAULT_LATENCY_BUCKETS",
    "OTHER",
    "PrometheusMetrics",
    "exporter",
]

#: The media type of :meth:`PrometheusMetrics.exposition` (Prometheus' text format).
CONTENT_TYPE: str = CONTENT_TYPE_LATEST

#: Claim latency (due to claimed): from a few ms on an idle queue to hours of backlog.
DEFAULT_LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
    3600.0,
)  # fmt: skip
#: Processing time of an attempt: sub-millisecond work to hour-long jobs.
DEFAULT_DURATION_BUCKETS = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0, 3600.0,
)  # fmt: skip

# Outcomes of attempts whose processor ran to an end: their durations are observed.
_PROCESSED = frozenset({"succeeded", "retry", "dead"})

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def _check_namespace(namespace: object) -> str:
    if (
        not isinstance(namespace, str)
        or not namespace
        or namespace[0].isdigit()
        or not set(namespace) <= _NAME_CHARS
    ):
        raise ValidationError(
            f"namespace must be a Prometheus name ([a-zA-Z_][a-zA-Z0-9_]*), got {namespace!r}"
        )
    return namespace


def _positive(name: str, value: object, *, allow_zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value >= 0 if allow_zero else value > 0)
        or value != value  # NaN
        or value == float("inf")
    ):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValidationError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


class PrometheusMetrics(Scraping):
    """A :class:`skiplock.ports.Metrics` that keeps Prometheus metrics in ``registry``.

    Every name starts with ``namespace`` (default ``skiplock``). ``depths=False`` leaves
    out the queue-depth gauges (they are cluster-wide: one process reporting them is
    enough). ``max_series`` caps the (kind, tenant) pairs of every metric with a tenant
    label: the pairs with the most jobs keep their own series, the rest are summed per
    kind under tenant ``"__other__"``. Depths are read at most once per ``cache_seconds``
    (concurrent scrapes share one query); an async store gets ``counts_timeout`` seconds
    to answer, else the scrape goes without depths (logged).

    Register one instance per registry: a second one on the same registry raises
    ``ValueError`` (duplicated time series).
    """

    def __init__(
        self,
        *,
        namespace: str = "skiplock",
        registry: CollectorRegistry = REGISTRY,
        depths: bool = True,
        max_series: int = 100,
        cache_seconds: float = 5.0,
        counts_timeout: float = 5.0,
        latency_buckets: Sequence[float] = DEFAULT_LATENCY_BUCKETS,
        duration_buckets: Sequence[float] = DEFAULT_DURATION_BUCKETS,
    ) -> None:
        ns = _check_namespace(namespace)
        check_int("max_series", max_series, minimum=1)
        if not isinstance(registry, CollectorRegistry):
            raise TypeError(
                f"registry must be a prometheus_client CollectorRegistry, got "
                f"{type(registry).__name__}"
            )
        self._namespace = ns
        self._registry = registry
        self._depths = check_bool("depths", depths)
        self._max_series = max_series
        self._cache_seconds = _positive("cache_seconds", cache_seconds, allow_zero=True)
        self._counts_timeout = _positive("counts_timeout", counts_timeout)

        self._claim_latency = Histogram(
            f"{ns}_jobs_claim_latency_seconds",
            "Seconds from a job's due time to its claim.",
            ["kind"],
            registry=registry,
            buckets=tuple(latency_buckets),
        )
        self._processing = Histogram(
            f"{ns}_jobs_processing_seconds",
            "Seconds an attempt ran, for attempts that ended succeeded, retry or dead.",
            ["kind"],
            registry=registry,
            buckets=tuple(duration_buckets),
        )
        self._attempts = Counter(
            f"{ns}_jobs_attempts",
            "Claimed jobs that ended, by outcome: succeeded, retry, dead, released, lost, error.",
            ["kind", "outcome"],
            registry=registry,
        )
        self._rate_limited = Counter(
            f"{ns}_rate_limited",
            "Jobs released by a token bucket (rate limit or provider cap).",
            ["tenant", "kind"],
            registry=registry,
        )
        self._throttle_decisions = Counter(
            f"{ns}_throttle_decisions",
            'Times a worker started holding a (kind, tenant) pair or a kind (tenant "") '
            "back because a limit had no room (rate_limit, provider or cluster_limit); "
            "not again while it stays held back.",
            ["kind", "tenant", "limit"],
            registry=registry,
        )
        # Label children by label values, so the per-job hooks skip labels() (its lock and
        # validation) after the first job of a kind: a plain dict read, no lock of ours.
        self._latency_of: dict[str, Histogram] = {}
        self._processing_of: dict[str, Histogram] = {}
        self._attempts_of: dict[tuple[str, str], Counter] = {}
        self._throttled_of: dict[tuple[str, str | None], Counter] = {}
        self._decisions_of: dict[tuple[str, str | None, str], Counter] = {}

        # The state the scrape reads (typed, and explained, in Scraping).
        self._lock = threading.Lock()  # workers and the throttled pairs; never per job
        self._workers = {}
        self._depth_lock = threading.Lock()  # one counts() query at a time
        self._cached = None
        self._cached_at = 0.0
        # The store read without a worker (watch()): depths, and the health report.
        self._watched = None
        self._health = None
        self._health_lock = threading.Lock()
        self._cached_health = None
        registry.register(ScrapeCollector(self))

    # ---- accessors ------------------------------------------------------------------

    @property
    def registry(self) -> CollectorRegistry:
        """The registry holding these metrics (serve it)."""
        return self._registry

    @property
    def namespace(self) -> str:
        """The prefix of every metric name."""
        return self._namespace

    def serve(self, port: int, addr: str = "0.0.0.0") -> tuple[WSGIServer, Thread]:
        """Serve the registry on ``http://addr:port/metrics`` from a daemon thread
        (``prometheus_client.start_http_server``); returns the server (``shutdown()`` it)
        and its thread. Raises OSError if the port is taken."""
        return start_http_server(port, addr, registry=self._registry)

    def exposition(self) -> bytes:
        """One scrape of the registry in Prometheus' text format (media type
        :data:`CONTENT_TYPE`). It blocks while the store is read: call it from a thread,
        not from an event loop."""
        return generate_latest(self._registry)

    def watch(self, engine: AsyncEngine | Engine | AsyncReader | Reader) -> None:
        """Read the queue depths from ``engine``'s store at scrape time, whether or not a
        worker runs in this process (an exporter), and add the store's own gauges:
        ``up`` (its last read answered), ``healthy`` (the verdict of ``engine.health()``
        with its default thresholds) and ``workers`` (registered workers, live or
        silent by heartbeat). Two reads per scrape, ``counts()`` and
        ``health_snapshot()``, each cached for ``cache_seconds``.

        With an :class:`~skiplock.AsyncEngine`, call it on the event loop that owns the
        store: scrapes then run its reads there (within ``counts_timeout``) and must come
        from another thread (:meth:`exposition` in a thread pool,
        :meth:`serve`'s thread). An :class:`~skiplock.engine.AsyncReader` (or
        :class:`~skiplock.engine.Reader`) reads as an engine does, from a store that
        implements only the reads role (a read replica). An engine with ``reads=`` is
        read through its :meth:`~skiplock.AsyncEngine.reader` (the hot standby's store),
        and ``replica_lag_seconds`` says how far behind the primary that standby is."""
        if isinstance(engine, AsyncEngine | Engine) and engine.reads_store is not None:
            engine = engine.reader()
        if isinstance(engine, AsyncEngine | AsyncReader):
            from skiplock._compat_async import blocking_caller as async_caller

            counts = async_caller(engine.counts)
            health = async_caller(engine.health)
        elif isinstance(engine, Engine | Reader):
            from skiplock._compat import blocking_caller

            counts = blocking_caller(engine.counts)
            health = blocking_caller(engine.health)
        else:
            raise TypeError(
                f"expected a skiplock Engine or AsyncEngine (or a Reader), got {engine!r}"
            )
        with self._depth_lock, self._health_lock:
            self._watched, self._health = counts, health
            self._cached = self._cached_health = None

    # ---- the Metrics port: per job --------------------------------------------------

    def job_claimed(self, kind: str, tenant: str | None, latency: float) -> None:
        child = self._latency_of.get(kind)
        if child is None:
            child = self._latency_of[kind] = self._claim_latency.labels(kind)
        child.observe(latency)

    def job_finished(self, kind: str, tenant: str | None, outcome: str, duration: float) -> None:
        counter = self._attempts_of.get((kind, outcome))
        if counter is None:
            counter = self._attempts_of[kind, outcome] = self._attempts.labels(kind, outcome)
        counter.inc()
        if outcome in _PROCESSED:
            child = self._processing_of.get(kind)
            if child is None:
                child = self._processing_of[kind] = self._processing.labels(kind)
            child.observe(duration)

    def rate_limited(self, kind: str, tenant: str | None) -> None:
        counter = self._throttled_of.get((kind, tenant))
        if counter is None:
            with self._lock:
                counter = self._throttled_of.get((kind, tenant))
                if counter is None:
                    if len(self._throttled_of) < self._max_series:
                        counter = self._rate_limited.labels(tenant or "", kind)
                        self._throttled_of[kind, tenant] = counter
                    else:  # beyond the cap: not remembered, so memory stays bounded too
                        counter = self._rate_limited.labels(OTHER, kind)
        counter.inc()

    def claim_throttled(self, kind: str, tenant: str | None, limit: str) -> None:
        key = (kind, tenant, limit)
        counter = self._decisions_of.get(key)
        if counter is None:
            with self._lock:
                counter = self._decisions_of.get(key)
                if counter is None:
                    if len(self._decisions_of) < self._max_series:
                        counter = self._throttle_decisions.labels(kind, tenant or "", limit)
                        self._decisions_of[key] = counter
                    else:  # beyond the cap: summed per kind, memory stays bounded
                        counter = self._throttle_decisions.labels(kind, OTHER, limit)
        counter.inc()

    # ---- the Metrics port: workers --------------------------------------------------

    def worker_started(
        self, worker: WorkerStatus, counts: Callable[[float], Sequence[StateCount]]
    ) -> None:
        with self._lock:
            self._workers[worker.id] = (worker, counts)

    def worker_stopped(self, worker: WorkerStatus) -> None:
        with self._lock:
            self._workers.pop(worker.id, None)
            if not self._workers:
                self._cached = None  # stale: the next worker reads afresh

    # ---- the scrape-time gauges (filled in by Scraping) -----------------------------

    def _families(self) -> dict[str, GaugeMetricFamily]:
        ns = self._namespace
        pair = ["kind", "tenant"]
        worker = ["worker"]
        specs: list[tuple[str, str, list[str]]] = []
        if self._depths:
            specs += [
                ("jobs_pending", "Jobs waiting to run (due or scheduled).", pair),
                ("jobs_running", "Jobs claimed by a worker (running or prefetched).", pair),
                ("jobs_dlq", "Jobs in the dead-letter state (dead).", pair),
                (
                    "jobs_oldest_pending_age_seconds",
                    "Seconds the longest-waiting due pending job has been due (0: none).",
                    pair,
                ),
            ]
        if self._health is not None:
            specs += [
                ("up", "1 if the last read of the store answered, else 0.", []),
                (
                    "healthy",
                    "1 if the queue is healthy (engine.health() with default thresholds: "
                    "schema current, every due job claimable by a live worker), else 0.",
                    [],
                ),
                (
                    "workers",
                    "Registered workers by state: live (a recent heartbeat) or silent.",
                    ["state"],
                ),
                (
                    "jobs_throttled",
                    "Due jobs held back by a limit now (an empty rate or provider bucket, a "
                    "full cluster limit).",
                    pair,
                ),
                (
                    "replica_lag_seconds",
                    "Seconds the hot standby read is behind the primary (0: it replayed all "
                    "it received); only when the store reads a standby (docs/replicas.md).",
                    [],
                ),
            ]
        specs += [
            (
                "paused",
                '1 per pause in force: its jobs are not claimed (kind or tenant "*": any).',
                pair,
            ),
            ("worker_slots", "Job slots of a running worker (its concurrency).", worker),
            ("worker_slots_busy", "Slots running a job now.", worker),
            ("worker_jobs_held", "Claimed jobs waiting in the worker's prefetch buffer.", worker),
            (
                "worker_outcomes_unwritten",
                "Finished jobs whose outcome is not written yet.",
                worker,
            ),
        ]
        return {
            name: GaugeMetricFamily(f"{ns}_{name}", doc, labels=labels)
            for name, doc, labels in specs
        }


def exporter(
    engine: AsyncEngine | Engine | AsyncReader | Reader,
    *,
    namespace: str = "skiplock",
    max_series: int = 100,
    cache_seconds: float = 5.0,
    counts_timeout: float = 5.0,
) -> PrometheusMetrics:
    """Metrics of ``engine``'s queue without a worker: a :class:`PrometheusMetrics` on a
    registry of its own that :meth:`watches <PrometheusMetrics.watch>` the engine's store
    (serve it with :meth:`~PrometheusMetrics.serve`, or render scrapes with
    :meth:`~PrometheusMetrics.exposition`). With an AsyncEngine, call it on the loop that
    owns the store. A reader over a reads-only store serves as well as an engine."""
    metrics = PrometheusMetrics(
        namespace=namespace,
        registry=CollectorRegistry(),
        max_series=max_series,
        cache_seconds=cache_seconds,
        counts_timeout=counts_timeout,
    )
    metrics.watch(engine)
    return metrics
