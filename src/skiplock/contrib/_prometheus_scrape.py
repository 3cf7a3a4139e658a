"""The scrape-time gauges of :class:`~skiplock.contrib.prometheus.PrometheusMetrics`.

Queue depths, the store's own gauges (``up``, ``healthy``, ``workers``, throttled and
paused jobs) and the running workers' slots are read when Prometheus scrapes, not as
jobs go: :class:`Scraping` fills the gauge families ``PrometheusMetrics`` defines from
the state the metrics keep, and :class:`ScrapeCollector` registers them. Behind the
``prometheus`` extra, like the module that uses it.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from prometheus_client.registry import Collector

from skiplock.core import JobState

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable, Iterable, Sequence

    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

    from skiplock.core import HealthReport, StateCount
    from skiplock.ports import WorkerStatus

logger = logging.getLogger("skiplock.metrics")

#: The tenant label of the (kind, tenant) pairs beyond ``max_series``, summed per kind.
OTHER = "__other__"

#: The label value of a pause's kind or tenant that is "any" (``<ns>_paused``).
ANY = "*"


class Scraping:
    """The scrape half of ``PrometheusMetrics``: it reads the state below, which the
    metrics' constructor, ``watch()`` and worker hooks set."""

    _namespace: str
    _depths: bool
    _max_series: int
    _cache_seconds: float
    _counts_timeout: float
    _lock: threading.Lock  # workers and the throttled pairs; never per job
    _workers: dict[str, tuple[WorkerStatus, Callable[[float], Sequence[StateCount]]]]
    _depth_lock: threading.Lock  # one counts() query at a time
    _cached: list[StateCount] | None
    _cached_at: float
    # The store read without a worker (watch()): depths, and the health report.
    _watched: Callable[[float], Sequence[StateCount]] | None
    _health: Callable[[float], HealthReport] | None
    _health_lock: threading.Lock
    _cached_health: tuple[float, HealthReport | None] | None

    def _families(self) -> dict[str, GaugeMetricFamily]:
        """The scrape's gauge families, empty: ``PrometheusMetrics`` defines them (their
        names, help and labels), beside its per-job metrics."""
        raise NotImplementedError

    def _describe(self) -> Iterable[Metric]:
        return list(self._families().values())

    def _collect(self) -> Iterable[Metric]:
        families = self._families()
        with self._lock:
            workers = list(self._workers.values())
        for status, _ in workers:
            labels = [status.id]
            families["worker_slots"].add_metric(labels, status.concurrency)
            families["worker_slots_busy"].add_metric(labels, status.running)
            families["worker_jobs_held"].add_metric(labels, status.held)
            families["worker_outcomes_unwritten"].add_metric(labels, status.unwritten)
        source = self._watched or (workers[0][1] if workers else None)
        # A store that just failed its health read is not asked again in this scrape.
        up = self._collect_health(families) if self._health is not None else True
        if self._health is None:
            # The pauses as the workers of this process last read them (a status written
            # before WorkerStatus.paused has none).
            paused = {pair for status, _ in workers for pair in getattr(status, "paused", ())}
            for kind, tenant in sorted(paused, key=lambda p: (p[0] or "", p[1] or "")):
                families["paused"].add_metric([kind or ANY, tenant or ANY], 1)
        if self._depths and source is not None:
            counts = self._counts(source) if up else None
            if counts is not None:
                for (kind, tenant), (pending, running, dead, age) in self._depth_rows(counts):
                    labels = [kind, tenant]
                    families["jobs_pending"].add_metric(labels, pending)
                    families["jobs_running"].add_metric(labels, running)
                    families["jobs_dlq"].add_metric(labels, dead)
                    families["jobs_oldest_pending_age_seconds"].add_metric(labels, age)
            else:
                for name in ("jobs_pending", "jobs_running", "jobs_dlq"):
                    del families[name]
                del families["jobs_oldest_pending_age_seconds"]
        return list(families.values())

    def _collect_health(self, families: dict[str, GaugeMetricFamily]) -> bool:
        """The store's own gauges; whether its health read answered."""
        report = self._read_health()
        up = report is not None and report.reachable
        families["up"].add_metric([], 1 if up else 0)
        families["healthy"].add_metric([], 1 if report is not None and report.healthy else 0)
        replica = None if report is None or not up else report.replica
        if replica is not None and replica.lag is not None:
            families["replica_lag_seconds"].add_metric([], replica.lag.total_seconds())
        else:  # a primary (or a standby that replayed nothing yet): no series
            del families["replica_lag_seconds"]
        if report is None or not up:
            del families["workers"]
            del families["jobs_throttled"]
            return False
        for pause in report.paused:
            families["paused"].add_metric([pause.kind or ANY, pause.tenant or ANY], 1)
        live = sum(w.live for w in report.workers)
        families["workers"].add_metric(["live"], live)
        families["workers"].add_metric(["silent"], len(report.workers) - live)
        # The pairs holding back the most jobs keep their series, the rest are summed.
        throttled: dict[tuple[str, str], int] = {}
        ranked = sorted(report.throttled, key=lambda t: (-t.due, t.kind, t.tenant or ""))
        for index, pair in enumerate(ranked):
            tenant = (pair.tenant or "") if index < self._max_series else OTHER
            throttled[pair.kind, tenant] = throttled.get((pair.kind, tenant), 0) + pair.due
        for (kind, tenant), due in sorted(throttled.items()):
            families["jobs_throttled"].add_metric([kind, tenant], due)
        return True

    def _read_health(self) -> HealthReport | None:
        """The engine's health report: cached, else one read (None: it did not answer)."""
        source = self._health
        assert source is not None
        with self._health_lock:
            cached = self._cached_health
            if cached is not None and time.monotonic() - cached[0] < self._cache_seconds:
                return cached[1]
            try:
                report: HealthReport | None = source(self._counts_timeout)
            except Exception as exc:
                logger.warning(
                    "reading the health of the queue failed (%s: %s)", type(exc).__name__, exc
                )
                report = None
            self._cached_health = (time.monotonic(), report)
            return report

    def _counts(self, source: Callable[[float], Sequence[StateCount]]) -> list[StateCount] | None:
        """The store's counts: cached, else one query (concurrent scrapes share it)."""
        with self._depth_lock:
            now = time.monotonic()
            cached = self._cached
            if cached is not None and now - self._cached_at < self._cache_seconds:
                return cached
            try:
                counts = list(source(self._counts_timeout))
            except Exception as exc:
                logger.warning(
                    "reading the job counts failed (%s: %s); this scrape has no queue depths",
                    type(exc).__name__,
                    exc,
                )
                return None
            self._cached, self._cached_at = counts, time.monotonic()
            return counts

    def _depth_rows(
        self, counts: Iterable[StateCount]
    ) -> list[tuple[tuple[str, str], tuple[int, int, int, float]]]:
        """(kind, tenant label) -> (pending, running, dead, oldest due age), the pairs
        beyond ``max_series`` summed per kind under :data:`OTHER`."""
        pairs: dict[tuple[str, str | None], list[float]] = {}
        column = {JobState.PENDING: 0, JobState.RUNNING: 1, JobState.DEAD: 2}
        for c in counts:
            row = pairs.setdefault((c.kind, c.tenant), [0, 0, 0, 0.0])
            index = column.get(c.state)
            if index is not None:
                row[index] += c.count
            if c.state is JobState.PENDING and c.oldest_due_age is not None:
                row[3] = max(row[3], c.oldest_due_age)
        # The busiest pairs keep their series (ties broken by name, so it is stable).
        ranked = sorted(
            pairs.items(),
            key=lambda kv: (-(kv[1][0] + kv[1][1] + kv[1][2]), kv[0][0], kv[0][1] or ""),
        )
        rows: dict[tuple[str, str], list[float]] = {}
        for index, ((kind, tenant), values) in enumerate(ranked):
            key = (kind, tenant or "") if index < self._max_series else (kind, OTHER)
            row = rows.setdefault(key, [0, 0, 0, 0.0])
            row[0] += values[0]
            row[1] += values[1]
            row[2] += values[2]
            row[3] = max(row[3], values[3])
        return [
            (key, (int(row[0]), int(row[1]), int(row[2]), row[3]))
            for key, row in sorted(rows.items())
        ]


class ScrapeCollector(Collector):
    """The scrape-time gauges of one ``PrometheusMetrics``."""

    def __init__(self, owner: Scraping) -> None:
        self._owner = owner

    def describe(self) -> Iterable[Metric]:
        # Names for the registry's duplicate check, without querying anything.
        return self._owner._describe()

    def collect(self) -> Iterable[Metric]:
        return self._owner._collect()
