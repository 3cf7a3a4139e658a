"""What a run measures, and how it is reported (JSON and a Markdown table)."""

from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: Workload names, as used in ``--only``, the JSON and the targets.
ENQUEUE_SINGLE = "enqueue_single"
ENQUEUE_BULK = "enqueue_bulk"
ENQUEUE_BATCHES = "enqueue_batches"
DRAIN = "drain"
DRAIN_TX = "drain_tx"
#: One ``enqueue_many`` of a big backlog (200,000 jobs by default), then drained.
DRAIN_BACKLOG = "drain_backlog"
LATENCY = "latency"
#: Jobs enqueued to run 0.3-2 s later on an idle worker: how late each starts.
LATENESS = "lateness"
PGBENCH = "pgbench"
#: A transactional job's statements through the driver alone, no queue (the ceiling of
#: a transactional drain in one process; see benchmarks.ceiling_proc).
DRIVER_TX = "driver_tx"
#: One autocommit INSERT ... RETURNING per job through the driver alone, one connection
#: (the ceiling of single enqueues).
DRIVER_ENQUEUE = "driver_enqueue"
#: Which skiplock workload each driver-alone workload bounds.
DRIVER_BOUNDS = {DRIVER_TX: DRAIN_TX, DRIVER_ENQUEUE: ENQUEUE_SINGLE}

#: The state of the tables a drain is timed on: ``cold``, the planner statistics as the
#: bulk prefill left them (none: no ANALYZE), or ``analyzed`` (VACUUM ANALYZE after it).
Tables = Literal["cold", "analyzed"]
TABLES: tuple[Tables, ...] = ("cold", "analyzed")
#: The workloads measured on cold and on analyzed tables.
DRAINS = (DRAIN, DRAIN_TX, DRAIN_BACKLOG)


@dataclasses.dataclass
class Measurement:
    """One number (or one failure) of one system on one workload."""

    system: str
    workload: str
    label: str
    #: Concurrent connections/slots that matter for the pgbench comparison.
    clients: int
    #: jobs/s (tps for pgbench, p50 in ms for latency); None when it could not be measured.
    value: float | None
    unit: str
    jobs: int | None = None
    seconds: float | None = None
    processes: int = 1
    #: ``value`` divided by pgbench's tps at the matching client count.
    ratio: float | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Why there is no value ("n/a (reason)" in the table).
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether a value was measured."""
        return self.value is not None and self.error is None


def failed(system: str, workload: str, label: str, clients: int, reason: str) -> Measurement:
    """A measurement that could not be taken."""
    return Measurement(system, workload, label, clients, None, "", error=reason)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation."""
    if not samples:
        raise ValueError("no samples")
    if len(samples) == 1:
        return samples[0]
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    if q >= 100:
        return max(samples)
    if q <= 0:
        return min(samples)
    return cuts[int(q) - 1]


def reference_tps(pgbench: Mapping[int, float], clients: int) -> tuple[int, float] | None:
    """pgbench's rate at the largest measured client count not above ``clients``.

    More clients than pgbench ran (two worker processes at 16) compare with the largest
    run: on this machine the commit rate is saturated well before that.
    """
    fitting = [c for c in pgbench if c <= clients]
    if not fitting:
        return None
    best = max(fitting)
    return best, pgbench[best]


def add_ratios(measurements: Sequence[Measurement], pgbench: Mapping[int, float]) -> None:
    """Fill ``ratio`` of every throughput measurement from pgbench's rates."""
    for m in measurements:
        if not m.ok or m.unit != "jobs/s" or m.value is None:
            continue
        ref = reference_tps(pgbench, m.clients)
        if ref is not None and ref[1] > 0:
            m.ratio = m.value / ref[1]
            m.extra["pgbench_clients"] = ref[0]


def _twin_key(m: Measurement) -> tuple[Any, ...]:
    # A drain's configuration, whatever the state of its tables.
    e = m.extra
    return (m.system, m.workload, m.processes, e.get("concurrency"), e.get("note"), m.jobs)


def add_cold_ratios(measurements: Sequence[Measurement]) -> None:
    """Give every cold drain the ratio to its analyzed twin of the same run
    (``extra["vs_analyzed"]``: cold jobs/s over analyzed jobs/s)."""
    analyzed = {
        _twin_key(m): m
        for m in measurements
        if m.ok and m.workload in DRAINS and m.extra.get("tables") == "analyzed"
    }
    for m in measurements:
        if not m.ok or m.workload not in DRAINS or m.extra.get("tables") != "cold":
            continue
        twin = analyzed.get(_twin_key(m))
        if twin is not None and twin.value and m.value is not None:
            m.extra["vs_analyzed"] = m.value / twin.value


def add_index_ratios(measurements: Sequence[Measurement]) -> None:
    """Give every skiplock measurement whose twin ran without some indexes or triggers
    (``--without-indexes``, ``--without-triggers``: system ``<label> -N indexes -M
    triggers``) the ratio to it (``extra["vs_without_indexes"]``: jobs/s with them over
    jobs/s without)."""
    variants = {
        (m.system.split(" -", 1)[0], *_twin_key(m)[1:], m.extra.get("tables")): m
        for m in measurements
        if m.ok and m.system.endswith((" indexes", " triggers"))
    }
    for m in measurements:
        twin = variants.get((m.system, *_twin_key(m)[1:], m.extra.get("tables")))
        if m.ok and m.value is not None and twin is not None and twin.value:
            m.extra["vs_without_indexes"] = m.value / twin.value


def add_driver_ratios(
    measurements: Sequence[Measurement], ceilings: Mapping[tuple[str, str], Measurement]
) -> None:
    """Give every skiplock measurement that a driver-alone measurement bounds the ratio to
    it (``extra["vs_driver"]``). ``ceilings``: (system label, skiplock workload) → the
    driver-alone measurement of that system's driver."""
    for m in measurements:
        ceiling = ceilings.get((m.system, m.workload))
        if m.ok and ceiling is not None and ceiling.value:
            assert m.value is not None  # ok
            m.extra["vs_driver"] = m.value / ceiling.value
            m.extra["driver_system"] = ceiling.system


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def _fmt_result(m: Measurement) -> str:
    if not m.ok or m.value is None:
        return f"n/a ({m.error})" if m.error else "n/a"
    if m.workload == LATENCY:
        e = m.extra
        return f"p50 {e['p50_ms']:.2f} / p95 {e['p95_ms']:.2f} / p99 {e['p99_ms']:.2f} ms"
    if m.workload == LATENESS:
        e = m.extra
        return f"p50 {e['p50_ms']:.2f} / p99 {e['p99_ms']:.2f} / max {e['max_ms']:.2f} ms"
    return f"{_fmt_rate(m.value)} {m.unit}"


def _fmt_ratio(m: Measurement) -> str:
    if m.ratio is None:
        return ""
    return f"{m.ratio:.2f}x @{m.extra.get('pgbench_clients', m.clients)}"


def markdown_table(measurements: Sequence[Measurement]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| system | workload | clients | result | vs pgbench | notes |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for m in measurements:
        parts = []
        if m.jobs is not None and m.seconds is not None:
            parts.append(f"{m.jobs:,} jobs in {m.seconds:.2f} s")
        if "vs_analyzed" in m.extra:
            parts.append(f"{m.extra['vs_analyzed']:.2f}x of analyzed")
        if "vs_without_indexes" in m.extra:
            parts.append(f"{m.extra['vs_without_indexes']:.3f}x of without the indexes/triggers")
        if "vs_driver" in m.extra:
            parts.append(f"{m.extra['vs_driver']:.2f}x of {m.extra['driver_system']}")
        if m.extra.get("analyses_during"):
            parts.append(f"ANALYZE ran {m.extra['analyses_during']} time(s) during the drain")
        if m.extra.get("note"):
            parts.append(str(m.extra["note"]))
        notes = "; ".join(parts)
        clients = f"{m.processes}x{m.clients // m.processes}" if m.processes > 1 else str(m.clients)
        lines.append(
            f"| {m.system} | {m.label} | {clients} | {_fmt_result(m)} | {_fmt_ratio(m)} | {notes} |"
        )
    return "\n".join(lines)


@dataclasses.dataclass
class Target:
    """One performance target and whether this run met it."""

    name: str
    wanted: str
    measured: str
    met: bool | None  # None: could not be evaluated

    @property
    def status(self) -> str:
        """met / MISSED / n/a."""
        return {True: "met", False: "MISSED", None: "n/a"}[self.met]


def _find(
    ms: Sequence[Measurement], system_prefix: str, workload: str, **extra: Any
) -> Measurement | None:
    for m in ms:
        if (
            m.ok
            and m.system.startswith(system_prefix)
            and m.workload == workload
            and all(m.extra.get(k) == v for k, v in extra.items())
        ):
            return m
    return None


def _best(
    ms: Sequence[Measurement], system: str, workload: str, **extra: Any
) -> Measurement | None:
    found = [
        m
        for m in ms
        if m.ok
        and m.system == system
        and m.workload == workload
        and all(m.extra.get(k) == v for k, v in extra.items())
    ]
    return max(found, key=lambda m: m.value or 0.0, default=None)


def _ratio_target(
    name: str, factor: float, mine: Measurement | None, theirs: Measurement | None, what: str
) -> Target:
    wanted = f"≥ {factor:g}x {what}"
    if mine is None or theirs is None or not mine.value or not theirs.value:
        return Target(name, wanted, "n/a", None)
    ratio = mine.value / theirs.value
    measured = f"{ratio:.2f}x ({_fmt_rate(mine.value)} vs {_fmt_rate(theirs.value)} jobs/s)"
    return Target(name, wanted, measured, ratio >= factor)


def evaluate_targets(
    ms: Sequence[Measurement], pgbench: Mapping[int, float], system: str, tables: Tables
) -> list[Target]:
    """The targets of docs/performance.md for ``system`` (a skiplock adapter's label),
    judged on the drains timed on ``tables`` (pgqueuer's too)."""
    drain16 = _find(ms, system, DRAIN, processes=1, concurrency=16, tables=tables)
    drain2x16 = _find(ms, system, DRAIN, processes=2, concurrency=16, tables=tables)
    tx16 = _find(ms, system, DRAIN_TX, tables=tables)
    single = _find(ms, system, ENQUEUE_SINGLE)
    bulk = _find(ms, system, ENQUEUE_BULK)
    batches = _find(ms, system, ENQUEUE_BATCHES)
    latency = _find(ms, system, LATENCY)
    pgq_drain = _best(ms, "pgqueuer", DRAIN, tables=tables)
    targets = [
        _ratio_target("drain @16, one process", 2, drain16, pgq_drain, "pgqueuer's best drain"),
    ]
    pg16 = pgbench.get(16)
    if drain16 is not None and drain16.value and pg16:
        r = drain16.value / pg16
        targets.append(Target("drain @16 vs pgbench @16", "≥ 0.5x", f"{r:.2f}x", r >= 0.5))
    else:
        targets.append(Target("drain @16 vs pgbench @16", "≥ 0.5x", "n/a", None))
    targets += [
        _ratio_target("transactional drain @16", 1, tx16, pgq_drain, "pgqueuer's best drain"),
        _ratio_target("two processes @16", 1.3, drain2x16, drain16, "one process @16"),
        _ratio_target(
            "enqueue, one per transaction",
            1,
            single,
            _best(ms, "pgqueuer", ENQUEUE_SINGLE),
            "pgqueuer",
        ),
        _ratio_target(
            "bulk enqueue",
            1.5,
            bulk,
            _best(ms, "pgqueuer", ENQUEUE_BULK),
            "pgqueuer's batch enqueue",
        ),
        _ratio_target(
            "bulk enqueue, calls of 1,000",
            1.5,
            batches,
            _best(ms, "pgqueuer", ENQUEUE_BATCHES),
            "pgqueuer's batch enqueue",
        ),
    ]
    vs_driver = None if single is None else single.extra.get("vs_driver")
    targets.append(
        Target(
            "enqueue, one per transaction, vs the driver alone",
            "≥ 0.8x",
            "n/a" if vs_driver is None else f"{vs_driver:.2f}x",
            None if vs_driver is None else vs_driver >= 0.8,
        )
    )
    lateness = _find(ms, system, LATENESS)
    if lateness is not None and lateness.ok:
        p99 = lateness.extra["p99_ms"]
        targets.append(Target("scheduled-job lateness p99", "≤ 10 ms", f"{p99:.2f} ms", p99 <= 10))
    else:
        targets.append(Target("scheduled-job lateness p99", "≤ 10 ms", "n/a", None))
    if latency is not None:
        p50, p99 = latency.extra["p50_ms"], latency.extra["p99_ms"]
        targets.append(Target("pickup p50", "≤ 2 ms", f"{p50:.2f} ms", p50 <= 2.0))
        targets.append(Target("pickup p99", "≤ 5 ms", f"{p99:.2f} ms", p99 <= 5.0))
    else:
        targets.append(Target("pickup p50", "≤ 2 ms", "n/a", None))
        targets.append(Target("pickup p99", "≤ 5 ms", "n/a", None))
    return targets


def targets_table(system: str, targets: Sequence[Target]) -> str:
    """Targets as a Markdown table."""
    lines = [
        f"| target ({system}) | wanted | measured | status |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| {t.name} | {t.wanted} | {t.measured} | {t.status} |" for t in targets]
    return "\n".join(lines)
