"""Harness side of the driver ceiling (:mod:`benchmarks.ceiling_proc`): what one Python
process gets out of a driver when every job is its own transaction, with no queue."""

from __future__ import annotations

import asyncio
import sys

from benchmarks import _pg
from benchmarks._procs import ROOT
from benchmarks._results import DRIVER_TX, Measurement
from benchmarks.ceiling_proc import DRIVERS, JOBS_TABLE, WRITES_TABLE

#: The driver behind each skiplock adapter of the harness (SQLAlchemy runs on asyncpg).
ADAPTER_DRIVERS = {"psycopg": "psycopg", "asyncpg": "asyncpg", "sqlalchemy": "asyncpg"}

LABEL = "the driver alone: BEGIN, INSERT, UPDATE by key, COMMIT per job, one process"


def system_name(driver: str) -> str:
    """How results name the driver's row: ``asyncpg alone``."""
    return f"{driver} alone"


async def run_ceiling(conninfo: str, driver: str, *, jobs: int, clients: int) -> Measurement:
    """Run ``jobs`` one-transaction jobs through ``driver`` on ``clients`` connections
    from one subprocess (on ``conninfo``'s fresh database) and check every one committed."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown driver {driver!r}; known: {sorted(DRIVERS)}")
    await _pg.execute(
        conninfo,
        f"CREATE TABLE {JOBS_TABLE} (id int PRIMARY KEY, status text NOT NULL, "
        f"completed_at timestamptz); CREATE TABLE {WRITES_TABLE} (i int PRIMARY KEY)",
    )
    await _pg.execute(
        conninfo,
        f"INSERT INTO {JOBS_TABLE} (id, status) SELECT g, 'running' FROM generate_series(1, %s) g",
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
    done, writes = await _pg.fetch_one(
        conninfo,
        f"SELECT (SELECT count(*) FROM {JOBS_TABLE} WHERE status = 'succeeded'), "
        f"(SELECT count(*) FROM {WRITES_TABLE})",
    )
    if done != jobs or writes != jobs:
        raise RuntimeError(f"{done} jobs completed and {writes} writes for {jobs} jobs")
    return Measurement(
        system_name(driver),
        DRIVER_TX,
        LABEL,
        clients,
        jobs / seconds,
        "jobs/s",
        jobs=jobs,
        seconds=seconds,
        extra={"driver": driver},
    )
