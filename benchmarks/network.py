"""``python -m benchmarks.network``: the queue across a network, in one run (issue 43).

Runs the same workloads three ways: over loopback, through :mod:`benchmarks.delayproxy`
with no delay (what the proxy's own CPU costs), and through it with ``--delay-ms`` each
way (default 1.25 ms: a 2.5 ms round trip). The workloads:

- **drain @16**: 20,000 no-op jobs enqueued over loopback (not timed), drained by one
  worker process whose connections go through the proxy (skiplock at 16 slots; pgqueuer
  in its best configuration of the main harness, batch 200);
- **single enqueue**: back-to-back ``enqueue`` calls from one client through the proxy,
  each its own transaction;
- **enqueue in the caller's transaction** (skiplock): ``BEGIN``, ``engine.enqueue(...,
  connection=conn)``, ``COMMIT`` on the caller's connection through the proxy. The
  enqueue's own round trips are the transaction's minus those of an empty ``BEGIN;
  COMMIT`` loop run the same way.

Round trips per job / per enqueue are the proxy's counts (client turns, see
:mod:`benchmarks.delayproxy`) over the timed phase divided by the jobs; the drain's include
everything the worker sent meanwhile (claims, completions, heartbeats, its listener). The
proxy also reports the delay it really applied (mean per chunk) and a ``SELECT 1`` round
trip through it is timed, so "2.5 ms" is checked, not assumed. Prints Markdown; writes
JSON to ``--json`` (default ``benchmarks/results/<timestamp>-network.json``, git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import importlib.util
import json
import os
import statistics
import sys
import time
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from benchmarks import _pg, _scenarios
from benchmarks._procs import ROOT
from benchmarks._scenarios import Namer, installed
from benchmarks._system import KIND
from benchmarks.delayproxy import Counts, ProxyProcess, proxy_process
from benchmarks.systems import make_system

if TYPE_CHECKING:
    from collections.abc import Sequence

    from benchmarks._system import System


@dataclasses.dataclass
class Row:
    """One workload of one system on one network."""

    system: str
    workload: str
    network: str
    jobs: int
    seconds: float
    #: The proxy's counts over the timed phase (None over loopback).
    counts: Counts | None = None
    #: Round trips of the enqueue call alone (in the caller's transaction).
    own_round_trips: float | None = None
    error: str = ""
    #: Over the timed phase: the proxy process's CPU (fraction of one core; None over
    #: loopback) and the whole machine's (fraction of all its cores busy, /proc/stat).
    proxy_cpu: float | None = None
    machine_busy: float | None = None

    @property
    def rate(self) -> float:
        """Jobs per second."""
        return self.jobs / self.seconds if self.seconds else 0.0

    @property
    def per_job(self) -> float | None:
        """Round trips per job (or per enqueue)."""
        if self.own_round_trips is not None:
            return self.own_round_trips
        return self.counts.round_trips / self.jobs if self.counts and self.jobs else None


def _log(message: str) -> None:
    print(f"[network] {message}", file=sys.stderr, flush=True)


def _proxied(conninfo: str, proxy: ProxyProcess | None) -> str:
    return (
        conninfo
        if proxy is None
        else make_conninfo(conninfo, host="127.0.0.1", port=str(proxy.port))
    )


@dataclasses.dataclass
class _Probe:
    """CPU counters at one moment: the proxy's CPU seconds, the machine's busy and total
    CPU time (/proc/stat, clock ticks)."""

    proxy_cpu: float | None
    busy: float
    total: float


def _ticks() -> list[float]:
    """The machine's CPU time by state (/proc/stat's first line, clock ticks)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            return [float(x) for x in f.readline().split()[1:]]
    except OSError:  # not Linux: the machine's share is not known
        return [0.0] * 5


async def _probe(proxy: ProxyProcess | None) -> _Probe:
    ticks = _ticks()  # one small read of a virtual file: no need for a thread
    idle = ticks[3] + ticks[4]  # idle and iowait
    cpu = None if proxy is None else float((await proxy.stats()).get("cpu_seconds", 0.0))
    return _Probe(cpu, sum(ticks) - idle, sum(ticks))


def _usage(row: Row, before: _Probe, after: _Probe) -> Row:
    """``row`` with the CPU used between ``before`` and ``after`` (see :class:`Row`)."""
    if before.proxy_cpu is not None and after.proxy_cpu is not None and row.seconds:
        row.proxy_cpu = (after.proxy_cpu - before.proxy_cpu) / row.seconds
    if after.total > before.total:
        row.machine_busy = (after.busy - before.busy) / (after.total - before.total)
    return row


async def _counted(proxy: ProxyProcess | None) -> Counts | None:
    return None if proxy is None else await proxy.counts()


def _since(proxy_before: Counts | None, after: Counts | None) -> Counts | None:
    return after.minus(proxy_before) if after is not None and proxy_before is not None else None


async def drain(system: System, label: str, adapter: str, dsn: str, namer: Namer,
                proxy: ProxyProcess | None, network: str, jobs: int) -> Row:  # fmt: skip
    """The drain @16 (pgqueuer: its backlog configuration) with the worker behind ``proxy``."""
    cfg = system.backlog_config if system.name != "skiplock" else None
    conc, batch = (cfg.concurrency, cfg.batch_size) if cfg else (16, 0)
    async with installed(system, dsn, namer, "netdrain") as (conninfo, client):
        holder: dict[str, Counts | None] = {}

        probes: dict[str, _Probe] = {}

        async def mark() -> None:
            holder["before"] = await _counted(proxy)
            probes["before"] = await _probe(proxy)

        m = await _scenarios.drain(
            system, label, conninfo, client, n=jobs, processes=1, concurrency=conc,
            batch_size=batch, adapter=adapter, tables="analyzed",
            worker_conninfo=_proxied(conninfo, proxy), before_release=mark,
        )  # fmt: skip
        after = await _probe(proxy)
        counts = _since(holder.get("before"), await _counted(proxy))
    row = Row(label, DRAIN, network, jobs, float(m.seconds or 0), counts)
    return _usage(row, probes["before"], after) if "before" in probes else row


async def enqueue_single(system: System, label: str, dsn: str, namer: Namer,
                         proxy: ProxyProcess | None, network: str, jobs: int) -> Row:  # fmt: skip
    """Back-to-back single enqueues from one client behind ``proxy``."""
    async with _pg.fresh_database(dsn, namer.next("netenq")) as conninfo:
        client = await system.install(_proxied(conninfo, proxy), _scenarios.SCHEMA)
        try:
            await client.enqueue_single(-1)  # warm up: connection, prepared statements
            before = await _counted(proxy)
            probe = await _probe(proxy)
            started = time.perf_counter()
            for i in range(jobs):
                await client.enqueue_single(i)
            secs = time.perf_counter() - started
            after = await _probe(proxy)
            counts = _since(before, await _counted(proxy))
        finally:
            await client.close()
    return _usage(Row(label, SINGLE, network, jobs, secs, counts), probe, after)


async def enqueue_in_transaction(adapter: str, label: str, dsn: str, namer: Namer,
                                 proxy: ProxyProcess | None, network: str,
                                 jobs: int) -> Row:  # fmt: skip
    """``BEGIN``, ``engine.enqueue(..., connection=conn)``, ``COMMIT`` on the caller's
    connection behind ``proxy``; the enqueue's own round trips from an empty twin loop."""
    from benchmarks.adapters import get_adapter
    from skiplock.engine import AsyncEngine

    async with _pg.fresh_database(dsn, namer.next("nettx")) as conninfo:
        target = _proxied(conninfo, proxy)
        a = get_adapter(adapter)
        await a.apply_schema(conninfo, _scenarios.SCHEMA)
        store = await a.open_store(target, _scenarios.SCHEMA, 2)
        engine = AsyncEngine(store)
        engine.declare_kind(KIND)
        caller = await _Caller.open(adapter, target)
        try:

            async def one(i: int | None) -> None:
                async with caller.transaction():
                    if i is not None:
                        await engine.enqueue(KIND, {"i": i}, connection=caller.conn)

            await one(-1)  # warm up
            await one(None)
            before = await _counted(proxy)
            for _ in range(jobs):
                await one(None)
            empty = _since(before, await _counted(proxy))
            before = await _counted(proxy)
            started = time.perf_counter()
            for i in range(jobs):
                await one(i)
            secs = time.perf_counter() - started
            counts = _since(before, await _counted(proxy))
        finally:
            await caller.close()
            await store.close()
    own = (counts.round_trips - empty.round_trips) / jobs if counts and empty else None
    return Row(label, IN_TX, network, jobs, secs, counts, own)


class _Caller:
    """The application's own connection (psycopg or asyncpg), through the proxy."""

    def __init__(self, conn: Any, asyncpg: bool) -> None:
        self.conn = conn
        self._asyncpg = asyncpg

    @classmethod
    async def open(cls, adapter: str, conninfo: str) -> _Caller:
        if adapter == "asyncpg":
            import asyncpg

            return cls(await asyncpg.connect(_pg.to_uri(conninfo)), True)
        return cls(await psycopg.AsyncConnection.connect(conninfo, autocommit=True), False)

    def transaction(self) -> Any:
        return self.conn.transaction()

    async def close(self) -> None:
        await self.conn.close()


async def round_trip_ms(conninfo: str, samples: int = 200) -> float:
    """The median of ``SELECT 1`` on one autocommit psycopg connection (ms)."""
    async with await psycopg.AsyncConnection.connect(
        conninfo, autocommit=True, prepare_threshold=None
    ) as conn:
        took = []
        for _ in range(samples):
            started = time.perf_counter()
            await conn.execute("SELECT 1")
            took.append(time.perf_counter() - started)
    return 1000 * statistics.median(took)


DRAIN, SINGLE, IN_TX = "drain @16", "single enqueue", "enqueue in the caller's transaction"
WORKLOADS = (DRAIN, SINGLE, IN_TX)


async def _one(what: str, system: System, label: str, adapter: str, ns: argparse.Namespace,
               namer: Namer, net: Network,
               proxies: dict[str, ProxyProcess | None]) -> Row:  # fmt: skip
    """One workload on one network (a failure is reported as the row's error)."""
    proxy = proxies[net.name]
    jobs = ns.enqueue_jobs if net.delay else ns.enqueue_jobs_loopback
    try:
        if what == DRAIN:
            step = drain(system, label, adapter, ns.dsn, namer, proxy, net.name, ns.drain_jobs)
        elif what == SINGLE:
            step = enqueue_single(system, label, ns.dsn, namer, proxy, net.name, jobs)
        else:
            step = enqueue_in_transaction(adapter, label, ns.dsn, namer, proxy, net.name, jobs)
        row = await asyncio.wait_for(step, 900)
    except Exception as exc:  # reported; the run goes on
        row = Row(label, what, net.name, 0, 0.0, error=f"{type(exc).__name__}: {exc}"[:200])
    per = f"{row.per_job:.3f}" if row.per_job is not None else "-"
    _log(f"  {label}, {what}, {net.name}: {row.rate:,.0f}/s, {per} round trips {row.error}")
    return row


@dataclasses.dataclass
class Network:
    """One of the run's networks: loopback, or the proxy with a delay."""

    name: str
    delay: float | None  # None: loopback, no proxy
    rtt_ms: float = 0.0
    applied_ms: float = 0.0
    timing: dict[str, float] = dataclasses.field(default_factory=dict)


async def run(ns: argparse.Namespace) -> tuple[list[Row], list[Network]]:
    """Every workload of every system on every network."""
    namer = Namer(_pg.new_run_id())
    target = conninfo_to_dict(ns.dsn)
    host, port = str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432)
    delay = ns.delay_ms / 1000
    networks = [Network("loopback", None), Network("proxy, 0 ms", 0.0),
                Network(f"proxy, {2 * ns.delay_ms:g} ms round trip", delay)]  # fmt: skip
    systems: list[tuple[str, str, System]] = [
        (f"skiplock/{a}", a, make_system("skiplock", a)) for a in ns.adapter.split(",")
    ]
    for name in [c for c in ns.competitors.split(",") if c]:
        if importlib.util.find_spec(name) is None:
            _log(f"{name} not installed (pip install --group bench): skipped")
            continue
        systems.append((name, "", make_system(name, "")))
    rows: list[Row] = []
    async with AsyncExitStack() as stack:
        proxies: dict[str, ProxyProcess | None] = {}
        for net in networks:
            proxy = None
            if net.delay is not None:
                context = proxy_process(net.delay, target=(host, port))
                proxy = await stack.enter_async_context(context)
            proxies[net.name] = proxy
            net.rtt_ms = await round_trip_ms(_proxied(ns.dsn, proxy))
            _log(f"{net.name}: SELECT 1 takes {net.rtt_ms:.3f} ms")
        # Each workload on the three networks one after the other: the machine's load
        # drifts, so the rows compared are measured minutes apart at most.
        for label, adapter, system in systems:
            for what in WORKLOADS:
                if what == IN_TX and system.name != "skiplock":
                    continue
                for net in networks:
                    row = await _one(what, system, label, adapter, ns, namer, net, proxies)
                    rows.append(row)
        for net in networks:
            proxy = proxies[net.name]
            if proxy is not None:
                stats = await proxy.stats()
                net.applied_ms = Counts.from_json(stats).mean_delay_ms
                net.timing = {k: float(v) for k, v in stats.items() if k.startswith("timer_")}
    return rows, networks


def markdown(rows: list[Row], networks: list[Network]) -> str:
    """The report: one line per system and workload, the networks side by side."""
    head = ["system", "workload"]
    for net in networks:
        head += [f"{net.name} (jobs/s)"] + (
            ["x of loopback", "round trips per job"] if net.delay is not None else []
        )
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * 2 + " ---: |" * (len(head) - 2)]
    keys = list(dict.fromkeys((r.system, r.workload) for r in rows))
    for system, workload in keys:
        found = {r.network: r for r in rows if (r.system, r.workload) == (system, workload)}
        base = found.get(networks[0].name)
        cells = [system, workload]
        for net in networks:
            r = found.get(net.name)
            if r is None or r.error:
                cells += [f"n/a ({r.error})" if r else "n/a"] + (
                    ["", ""] if net.delay is not None else []
                )
                continue
            cells.append(f"{r.rate:,.0f}")
            if net.delay is not None:
                ratio = r.rate / base.rate if base and base.rate else None
                cells.append(f"{ratio:.2f}x" if ratio is not None else "")
                cells.append(f"{r.per_job:.3f}" if r.per_job is not None else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "CPU over each timed phase (drain and single enqueue):", ""]
    lines += ["| system | workload | network | jobs/s | proxy CPU (of one core) | machine busy "
              "(of all cores) |", "| --- | --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for r in rows:
        if r.machine_busy is None or r.error:
            continue
        proxy = f"{100 * r.proxy_cpu:.0f} %" if r.proxy_cpu is not None else "-"
        lines.append(f"| {r.system} | {r.workload} | {r.network} | {r.rate:,.0f} | {proxy} | "
                     f"{100 * r.machine_busy:.0f} % |")  # fmt: skip
    lines.append("")
    for net in networks:
        extra = ""
        if net.delay is not None:
            early, late = (net.timing.get(f"timer_{k}_ms", 0.0) for k in ("early", "late"))
            extra = (
                f"; configured {1000 * net.delay:g} ms each way, applied {net.applied_ms:.3f} ms"
                f" per chunk on average (timers set {early:.3f} ms early, firing {late:.3f} ms"
                " after that on average)"
            )
        lines.append(f"- {net.name}: `SELECT 1` median {net.rtt_ms:.3f} ms{extra}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run it; print Markdown, write JSON."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.network", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--dsn", default=_pg.default_dsn())
    p.add_argument("--delay-ms", type=float, default=1.25, help="one-way delay (default 1.25)")
    p.add_argument("--adapter", default="psycopg", help="skiplock adapters, comma-separated")
    p.add_argument("--competitors", default="pgqueuer", help="'' for none")
    p.add_argument("--drain-jobs", type=int, default=20_000)
    p.add_argument("--enqueue-jobs", type=int, default=1_000, help="through the delay")
    p.add_argument("--enqueue-jobs-loopback", type=int, default=5_000)
    p.add_argument("--json", default=None)
    ns = p.parse_args(argv)
    load_start = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    rows, networks = asyncio.run(run(ns))
    load_end = os.getloadavg()
    report = markdown(rows, networks)
    load = "load average at start {}; at end {}".format(
        *(", ".join(f"{x:.2f}" for x in avg) for avg in (load_start, load_end))
    )
    print(f"## Across the network ({started:%Y-%m-%d %H:%M} UTC)\n\n{report}\n- {load}")
    path = ns.json or ROOT / "benchmarks" / "results" / f"{started:%Y%m%d-%H%M%S}-network.json"
    doc = {
        "timestamp": started.isoformat(timespec="seconds"),
        "argv": list(argv if argv is not None else sys.argv[1:]),
        "loadavg_at_start": list(load_start),
        "loadavg_at_end": list(load_end),
        "networks": [dataclasses.asdict(n) for n in networks],
        "rows": [
            dataclasses.asdict(r) | {"rate": r.rate, "round_trips_per_job": r.per_job} for r in rows
        ],
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")
    print(f"\nJSON: {path}", file=sys.stderr)
    return 1 if any(r.error and r.system.startswith("skiplock") for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
