"""``python -m benchmarks``: run the workloads, print a Markdown table, write JSON."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import _ceiling, _pg, _pgbench, _scenarios
from benchmarks._procs import ROOT
from benchmarks._results import (
    DRAIN,
    DRIVER_BOUNDS,
    ENQUEUE_BATCHES,
    ENQUEUE_BULK,
    ENQUEUE_SINGLE,
    LATENCY,
    LATENESS,
    TABLES,
    Measurement,
    Tables,
    add_cold_ratios,
    add_driver_ratios,
    add_index_ratios,
    add_ratios,
    evaluate_targets,
    failed,
    markdown_table,
    targets_table,
)
from benchmarks._scenarios import Namer, installed
from benchmarks._sys_skiplock import SkiplockSystem
from benchmarks.adapters import ADAPTERS
from benchmarks.systems import COMPETITORS, make_system

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from benchmarks._scenarios import IdleScenario
    from benchmarks._system import Mode, System

SECTIONS = ("pgbench", "enqueue", "drain", "backlog", "latency", "scheduled", "competitors")
#: The sections that measure workloads (for skiplock, and for competitors when asked).
WORKLOADS = frozenset({"enqueue", "drain", "backlog", "latency", "scheduled"})
#: A scenario that takes longer than this is reported as failed (never hangs CI).
SCENARIO_TIMEOUT = 900.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """Sizes of one run."""

    enqueue_jobs: int = 10_000
    bulk_jobs: int = 100_000
    drain_jobs: int = 20_000
    #: The backlog workload: one enqueue_many of this many jobs, then drained (0: skip).
    backlog_jobs: int = 200_000
    latency_samples: int = 200
    #: Jobs of the scheduled-lateness workload, each due 0.3-2.0 s after its enqueue.
    scheduled_samples: int = 40
    pgbench_seconds: float = 10.0
    pgbench_clients: tuple[int, ...] = (1, 4, 16)
    drain_concurrency: tuple[int, ...] = (1, 4, 16)
    competitor_configs: int = 99
    #: Table states every drain is timed on, in this order (cold first).
    tables: tuple[Tables, ...] = TABLES

    @classmethod
    def quick(cls) -> Plan:
        """CI smoke: every code path, tiny sizes, a few seconds per system."""
        return cls(
            enqueue_jobs=100,
            bulk_jobs=1_000,
            drain_jobs=500,
            backlog_jobs=2_000,
            latency_samples=10,
            scheduled_samples=5,
            pgbench_seconds=1.0,
            competitor_configs=1,
        )


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").replace("|", "/")
    return text if len(text) <= 160 else text[:157] + "..."


class Runner:
    """Runs the selected sections and collects measurements."""

    def __init__(self, dsn: str, plan: Plan, sections: set[str], adapters: list[str],
                 competitors: list[str], without: tuple[str, ...] = (),
                 without_triggers: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.dsn = dsn
        #: Indexes a second run of each adapter drops (``--without-indexes``).
        self.without = without
        #: Triggers of jobs that second run drops (``--without-triggers``).
        self.without_triggers = without_triggers
        self.plan = plan
        self.sections = sections
        self.adapters = adapters
        self.competitors = competitors
        self.namer = Namer(_pg.new_run_id())
        self.results: list[Measurement] = []
        self.pgbench: dict[int, float] = {}
        #: (skiplock system label, workload) → the driver-alone measurement bounding it.
        self.ceilings: dict[tuple[str, str], Measurement] = {}
        self.profile: Path | None = None

    async def _guard(
        self,
        what: Callable[[], Awaitable[list[Measurement]]],
        on_error: Callable[[str], list[Measurement]],
        title: str,
    ) -> None:
        _log(title)
        started = time.perf_counter()
        try:
            found = await asyncio.wait_for(what(), SCENARIO_TIMEOUT)
        except Exception as exc:
            _log(f"  failed: {_reason(exc)}")
            found = on_error(_reason(exc))
        took = time.perf_counter() - started
        for m in found:
            _log(f"  {m.label}: {m.value if m.ok else m.error} ({took:.1f} s)")
        self.results.extend(found)

    async def run(self) -> None:
        """Everything selected, in a fixed order."""
        if "pgbench" in self.sections:
            await self._run_pgbench()
        for adapter in self.adapters:
            system = make_system("skiplock", adapter)
            await self._run_system(system, f"skiplock/{adapter}", adapter, competitor=False)
            if self.without or self.without_triggers:
                variant = SkiplockSystem(adapter, self.without, self.without_triggers)
                await self._run_system(variant, variant.label, adapter, competitor=False)
        if "competitors" in self.sections:
            for name in self.competitors:
                label = name
                if importlib.util.find_spec(name) is None:
                    reason = f"{name} not installed (pip install --group bench)"
                    self.results.append(failed(label, DRAIN, "all workloads", 0, reason))
                    continue
                await self._run_system(COMPETITORS[name](), label, "", competitor=True)
        add_ratios(self.results, self.pgbench)
        add_cold_ratios(self.results)
        add_index_ratios(self.results)
        add_driver_ratios(self.results, self.ceilings)

    async def _run_pgbench(self) -> None:
        async def go() -> list[Measurement]:
            async with _pg.fresh_database(self.dsn, self.namer.main()) as conninfo:
                found, self.pgbench = await _pgbench.run_pgbench(
                    conninfo, list(self.plan.pgbench_clients), self.plan.pgbench_seconds
                )
            return found

        await self._guard(go, lambda r: [failed("pgbench", "pgbench", "pgbench", 1, r)], "pgbench")

    async def _run_system(self, system: System, label: str, adapter: str, *,
                          competitor: bool) -> None:  # fmt: skip
        p = self.plan
        want = self.sections & WORKLOADS
        if competitor and not want:  # "--only competitors": every workload for them
            want = set(WORKLOADS)
        if not competitor and adapter not in ADAPTERS:
            self.results.append(failed(label, DRAIN, "all workloads", 0, "unknown adapter"))
            return

        if "enqueue" in want:

            async def enqueue() -> list[Measurement]:
                async with installed(system, self.dsn, self.namer, "enqueue") as (_, client):
                    single = await _scenarios.enqueue_single(label, client, p.enqueue_jobs)
                    bulk = await _scenarios.enqueue_bulk(label, client, p.bulk_jobs)
                    batches = await _scenarios.enqueue_batches(label, client, p.bulk_jobs)
                return [single, bulk, batches]

            await self._guard(
                enqueue,
                lambda r: [
                    failed(label, ENQUEUE_SINGLE, "enqueue, one job per transaction", 1, r),
                    failed(label, ENQUEUE_BULK, "bulk enqueue", 1, r),
                    failed(label, ENQUEUE_BATCHES, "bulk enqueue, calls of 1,000", 1, r),
                ],
                f"{label}: enqueue",
            )
            if not competitor:
                await self._ceiling(label, adapter, "enqueue")

        if "drain" in want:
            runs: list[tuple[int, int, str, int, str]] = []  # processes, conc, mode, batch, note
            if competitor:
                for cfg in system.drain_configs[: p.competitor_configs]:
                    runs.append((1, cfg.concurrency, "noop", cfg.batch_size, cfg.label))
            else:
                runs += [(1, c, "noop", 0, "") for c in p.drain_concurrency]
                top = max(p.drain_concurrency)
                runs += [(2, top, "noop", 0, ""), (1, top, "tx", 0, "")]
            for processes, conc, mode, batch, note in runs:
                for tables in p.tables:
                    await self._drain(
                        system, label, adapter, processes, conc, mode, batch, note, tables
                    )
            if not competitor:
                await self._ceiling(label, adapter, "tx")

        if "backlog" in want and p.backlog_jobs > 0:
            # One process at skiplock's largest concurrency; a competitor in the
            # configuration it names for it (its best drain of the reference run).
            cfg = system.backlog_config
            conc, batch, note = max(p.drain_concurrency), 0, ""
            if competitor:
                conc, batch, note = cfg.concurrency, cfg.batch_size, cfg.label
            for tables in p.tables:
                await self._drain(
                    system, label, adapter, 1, conc, "noop", batch, note, tables, backlog=True
                )

        # An idle worker's timing: pickup of a job due now, lateness of jobs due later.
        idle = (
            ("latency", LATENCY, "pickup latency", _scenarios.latency, p.latency_samples),
            (
                "scheduled",
                LATENESS,
                "scheduled-job lateness",
                _scenarios.lateness,
                p.scheduled_samples,
            ),
        )
        for section, workload, what, scenario, samples in idle:
            if section in want:
                await self._idle_worker(
                    system, label, adapter, section, workload, what, scenario, samples
                )

    async def _idle_worker(self, system: System, label: str, adapter: str, tag: str,
                           workload: str, what: str, scenario: IdleScenario,
                           samples: int) -> None:  # fmt: skip
        """One scenario of an idle worker in a fresh database (a failure is reported)."""

        async def go() -> list[Measurement]:
            async with installed(system, self.dsn, self.namer, tag) as (ci, client):
                return [await scenario(system, label, ci, client, samples=samples, adapter=adapter)]

        await self._guard(go, lambda r: [failed(label, workload, what, 1, r)], f"{label}: {what}")

    async def _ceiling(self, label: str, adapter: str, workload: str) -> None:
        """The ceiling of a skiplock workload: its driver alone (once per driver)."""
        driver = _ceiling.ADAPTER_DRIVERS.get(adapter)
        if driver is None:
            return
        name = _ceiling.system_name(driver)
        result, text = _ceiling.WORKLOADS[workload]
        known = next((m for m in self.results if (m.system, m.workload) == (name, result)), None)
        if known is None:
            if workload == "tx":
                clients, n = max(self.plan.drain_concurrency), self.plan.drain_jobs
            else:
                clients, n = 1, self.plan.enqueue_jobs

            async def go() -> list[Measurement]:
                async with _pg.fresh_database(self.dsn, self.namer.next("ceiling")) as conninfo:
                    m = await _ceiling.run_ceiling(
                        conninfo, driver, workload, jobs=n, clients=clients
                    )
                return [m]

            def on_error(reason: str) -> list[Measurement]:
                return [failed(name, result, text, clients, reason)]

            await self._guard(go, on_error, f"{name}: {text}")
            known = self.results[-1]
        self.ceilings[(label, DRIVER_BOUNDS[result])] = known

    async def _drain(self, system: System, label: str, adapter: str, processes: int,
                     conc: int, mode: str, batch: int, note: str, tables: Tables, *,
                     backlog: bool = False) -> None:  # fmt: skip
        n = self.plan.backlog_jobs if backlog else self.plan.drain_jobs
        wmode: Mode = "tx" if mode == "tx" else "noop"
        wl, name = _scenarios.drain_name(
            n=n, processes=processes, concurrency=conc, mode=wmode, tables=tables,
            backlog=backlog,
        )  # fmt: skip
        title = f"{label}: {name}{'; ' + note if note else ''}"

        async def go() -> list[Measurement]:
            async with installed(system, self.dsn, self.namer, wl) as (ci, client):
                m = await _scenarios.drain(
                    system, label, ci, client, n=n, processes=processes, concurrency=conc,
                    mode=wmode, batch_size=batch, config=note, adapter=adapter,
                    profile=self.profile, tables=tables, backlog=backlog,
                )  # fmt: skip
            return [m]

        def on_error(reason: str) -> list[Measurement]:
            m = failed(label, wl, name, processes * (conc or 16), reason)
            m.processes = processes
            m.jobs = n
            m.extra.update(processes=processes, concurrency=conc, tables=tables)
            if note:
                m.extra["note"] = note
            return [m]

        await self._guard(go, on_error, title)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="skiplock benchmarks against PostgreSQL's own commit rate (pgbench) "
        "and, when installed, pgqueuer and procrastinate. See docs/performance.md; recorded "
        "runs are in benchmarks/results/.",
    )
    p.add_argument("--dsn", default=_pg.default_dsn(),
                   help="server to use; a fresh database is created and dropped "
                        "(default: $SKIPLOCK_BENCH_DSN or %(default)s)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None,
                   help="where to write the JSON results "
                        "(default: benchmarks/results/<timestamp>.json)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="CI smoke: tiny sizes, 1 s pgbench")
    p.add_argument("--only", default=",".join(SECTIONS),
                   help=f"comma-separated sections: {','.join(SECTIONS)}")  # fmt: skip
    p.add_argument("--adapter", default="psycopg",
                   help=f"comma-separated skiplock adapters ({', '.join(ADAPTERS)})")  # fmt: skip
    p.add_argument("--competitors", default=",".join(COMPETITORS),
                   help="comma-separated competitors to compare when installed")  # fmt: skip
    p.add_argument("--profile", type=Path, default=None, metavar="DIR",
                   help="attach py-spy to drain workers; raw stacks go to DIR")  # fmt: skip
    p.add_argument("--enqueue-jobs", type=int)
    p.add_argument("--bulk-jobs", type=int)
    p.add_argument("--drain-jobs", type=int)
    p.add_argument("--backlog-jobs", type=int,
                   help="jobs of the backlog workload, enqueued in one enqueue_many "
                        "(default 200,000; 0 skips it)")  # fmt: skip
    p.add_argument("--tables", type=_tables, metavar="LIST",
                   help="table states the drains are timed on, comma-separated: cold (no "
                        "ANALYZE after the prefill), analyzed (default: both)")  # fmt: skip
    p.add_argument("--without-indexes", type=lambda t: tuple(_split(t)), default=(),
                   metavar="LIST",
                   help="also run each adapter's workloads with these indexes of jobs "
                        "dropped after the schema is applied (comma-separated names; "
                        "labelled 'skiplock/<adapter> -N indexes'): what they cost, in one "
                        "run")  # fmt: skip
    p.add_argument("--without-triggers", type=lambda t: tuple(_split(t)), default=(),
                   metavar="LIST",
                   help="as --without-indexes, for triggers of jobs (the same second run "
                        "drops both)")  # fmt: skip
    p.add_argument("--latency-samples", type=int)
    p.add_argument("--scheduled-samples", type=int,
                   help="jobs of the scheduled-lateness workload, each due 0.3-2.0 s after "
                        "its enqueue (default 40)")  # fmt: skip
    p.add_argument("--pgbench-seconds", type=float)
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="the event loop of this process, whose producers enqueue (the "
                        "drains' worker processes stay on asyncio's): asyncio's (default) "
                        "or uvloop's")  # fmt: skip
    p.add_argument("--drain-concurrency", type=lambda t: tuple(int(x) for x in _split(t)),
                   help="slots per worker process for the one-process drains (default 1,4,16; "
                        "the two-process and transactional drains use the largest)")  # fmt: skip
    return p.parse_args(argv)


def _split(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _tables(text: str) -> tuple[Tables, ...]:
    wanted = _split(text)
    known = [t for t in TABLES if t in wanted]  # always cold first
    if not wanted or len(known) != len(set(wanted)):
        raise argparse.ArgumentTypeError(f"expected some of {', '.join(TABLES)}, got {text!r}")
    return tuple(known)


def _plan(ns: argparse.Namespace) -> Plan:
    plan = Plan.quick() if ns.quick else Plan()
    changes = {
        k: getattr(ns, k)
        for k in (
            "enqueue_jobs",
            "bulk_jobs",
            "drain_jobs",
            "backlog_jobs",
            "latency_samples",
            "scheduled_samples",
            "pgbench_seconds",
            "drain_concurrency",
            "tables",
        )
        if getattr(ns, k) is not None
    }
    return dataclasses.replace(plan, **changes)


def _meta(
    ns: argparse.Namespace, plan: Plan, server: dict[str, str], load_start: tuple[float, ...]
) -> dict[str, Any]:
    return {
        "timestamp": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "quick": bool(ns.quick),
        "loop": ns.loop,
        "plan": dataclasses.asdict(plan),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            # Other work on the machine skews every number: recorded, not corrected.
            "loadavg_at_start": list(load_start),
            "loadavg_at_end": list(os.getloadavg()),
        },
        "postgres": server,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks. Slow numbers never fail the run; exit 1 only if a skiplock
    workload could not run or failed verification (a competitor's failure is reported)."""
    ns = _parse(argv)
    sections = set(_split(ns.only))
    unknown = sections - set(SECTIONS)
    if unknown:
        print(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
        return 2
    plan = _plan(ns)
    adapters = _split(ns.adapter) if sections & WORKLOADS else []
    competitors = _split(ns.competitors)
    bad = [c for c in competitors if c not in COMPETITORS]
    if bad:
        print(f"unknown competitor(s) {bad}; known: {', '.join(COMPETITORS)}")
        return 2
    runner = Runner(
        ns.dsn, plan, sections, adapters, competitors, ns.without_indexes, ns.without_triggers
    )
    runner.profile = ns.profile

    async def go() -> dict[str, str]:
        server = await _pg.server_info(ns.dsn)
        await runner.run()
        return server

    load_start = os.getloadavg()
    factory = None
    if ns.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as loop:
        server = loop.run(go())
    results = runner.results
    # Judged per table state: on the cold drains (first) and on the analyzed ones.
    targets = {
        (a, tables): evaluate_targets(results, runner.pgbench, f"skiplock/{a}", tables)
        for a in adapters
        for tables in plan.tables
    }
    doc = {
        **_meta(ns, plan, server, load_start),
        "pgbench_tps": {str(k): v for k, v in runner.pgbench.items()},
        "results": [dataclasses.asdict(m) for m in results],
        "targets": {
            a: {
                tables: [dataclasses.asdict(t) | {"status": t.status} for t in ts]
                for (adapter, tables), ts in targets.items()
                if adapter == a
            }
            for a in adapters
        },
    }
    path = ns.json
    if path is None:
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = ROOT / "benchmarks" / "results" / f"{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")

    settings = ", ".join(f"{k}={v}" for k, v in sorted(server.items()))
    print(f"## skiplock benchmarks ({'quick' if ns.quick else 'full'} run)\n")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"PostgreSQL: {settings}; CPUs: {os.cpu_count()}; load average at end: {load}\n")
    print(markdown_table(results))
    for (a, tables), ts in targets.items():
        print()
        print(targets_table(f"skiplock/{a}, {tables} tables", ts))
    print(f"\nJSON: {path}")
    broken = [m for m in results if m.error and m.system.startswith("skiplock/")]
    return 1 if broken else 0
