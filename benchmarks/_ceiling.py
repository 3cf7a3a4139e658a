"""Harness side of the driver ceilings (:mod:`benchmarks.ceiling_proc`): what one Python
process gets out of a driver with no queue around it, for a transactional job and for a
single enqueue."""

from __future__ import annotations

import asyncio
import sys

from benchmarks import _pg
from benchmarks._procs import ROOT
from benchmarks._results import DRIVER_ENQUEUE, DRIVER_TX, Measurement
from benchmarks.ceiling_proc import DRIVERS, JOBS_TABLE, WRITES_TABLE

#: The driver behind each skiplock adapter of the harness (SQLAlchemy runs on asyncpg).
ADAPTER_DRIVERS = {"psycopg": "psycopg", "asyncpg": "asyncpg", "sqlalchemy": "asyncpg"}

#: Per ceiling workload (as in ceiling_proc): the results' workload name and label.
WORKLOADS = {
    "tx": (
        DRIVER_TX,
        "the driver alone: BEGIN, INSERT, UPDATE by key, COMMIT per job, one process",
    ),
    "enqueue": (
        DRIVER_ENQUEUE,
        "the driver alone: one autocommit INSERT ... RETURNING per job, one connection",
    ),
}


def system_name(driver: str) -> str:
    """How results name the driver's rows: ``asyncpg alone``."""
    return f"{driver} alone"


async def run_ceiling(
    conninfo: str, driver: str, workload: str, *, jobs: int, clients: int
) -> Measurement:
    """Run ``jobs`` jobs of ``workload`` through ``driver`` on ``clients`` connections
    from one subprocess (on ``conninfo``'s fresh database) and check every one committed."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}; known: {sorted(DRIVERS)}")
    name, label = WORKLOADS[workload]
    await _pg.execute(
        conninfo,
        f"CREATE TABLE {JOBS_TABLE} (id int PRIMARY KEY, status text NOT NULL, "
        f"completed_at timestamptz); CREATE TABLE {WRITES_TABLE} (i int PRIMARY KEY)",
    )
    if workload == "tx":
        await _pg.execute(
            conninfo,
            f"INSERT INTO {JOBS_TABLE} (id, status) SELECT g, 'running' "
            "FROM generate_series(1, %s) g",
            [jobs],
        )
    await _pg.settle(conninfo)
    dsn = _pg.to_uri(conninfo) if driver == "asyncpg" else conninfo
    argv = ["--driver", driver, "--dsn", dsn, "--clients", str(clients), "--jobs", str(jobs)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.ceiling_proc",
        *argv,
        "--workload",
        workload,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        tail = err.decode(errors="replace").strip()[-300:]
        raise RuntimeError(f"ceiling_proc exited {proc.returncode}: {tail}")
    words = out.decode().split()
    if len(words) != 2 or words[0] != "elapsed":
        raise RuntimeError(f"unexpected ceiling_proc output: {out[-200:]!r}")
    seconds = float(words[1])
    done_status = "succeeded" if workload == "tx" else "pending"
    done, writes = await _pg.fetch_one(
        conninfo,
        f"SELECT (SELECT count(*) FROM {JOBS_TABLE} WHERE status = %s), "
        f"(SELECT count(*) FROM {WRITES_TABLE})",
        [done_status],
    )
    if done != jobs or writes != (jobs if workload == "tx" else 0):
        raise RuntimeError(f"{done} jobs {done_status} and {writes} writes for {jobs} jobs")
    return Measurement(
        system_name(driver),
        name,
        label,
        clients,
        jobs / seconds,
        "jobs/s",
        jobs=jobs,
        seconds=seconds,
        extra={"driver": driver},
    )
