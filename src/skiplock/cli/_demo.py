"""``demo``: skiplock at work in a few seconds (in memory, or on PostgreSQL)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import TYPE_CHECKING

from skiplock.core import StoreError
from skiplock.demo import DEMO_SCHEMA, DemoReport, run_demo

from . import _options
from ._database import DSN_ENV, check_psycopg_dsn, psycopg_adapter
from ._output import one_line

if TYPE_CHECKING:
    from skiplock.ports import AsyncJobStore

DESCRIPTION = (
    "Enqueue a mix of jobs (typed payloads, retries, a dead letter, a rate limit, a "
    f"scheduled job) and process them with a live view. Uses PostgreSQL if --dsn or "
    f"{DSN_ENV} is given (in its own schema, reset on every run), memory otherwise."
)


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dsn", help=f"PostgreSQL connection string (default: ${DSN_ENV})")
    parser.add_argument(
        "--jobs",
        type=_jobs,
        default=20,
        metavar="N",
        help="number of email jobs, besides the fixed showcase ones (default: 20)",
    )
    parser.add_argument(
        "--no-live", dest="live", action="store_false", help="no live progress display"
    )


def _jobs(text: str) -> int:
    value = _options.positive_int(text)
    if value > 10_000:
        raise argparse.ArgumentTypeError(f"at most 10000 jobs, got {value}")
    return value


def run(_: None, args: argparse.Namespace) -> int:
    dsn: str | None = args.dsn or os.environ.get(DSN_ENV) or None
    if dsn is not None:
        psycopg_adapter()  # the extra first: without it, that is what to fix
        check_psycopg_dsn(dsn, args)
    try:
        store = _store(dsn)
        report = asyncio.run(
            _run(
                store,
                postgres_schema=None if dsn is None else DEMO_SCHEMA,
                emails=args.jobs,
                live=args.live,
            )
        )
    except StoreError as exc:
        print(f"skiplock: demo failed: {one_line(str(exc))}", file=sys.stderr)
        return 1
    return 0 if report.complete else 1


def _store(dsn: str | None) -> AsyncJobStore:
    """The demo's store: in memory, or psycopg on a freshly reset demo schema."""
    if dsn is None:
        from skiplock.adapters.memory import AsyncInMemoryJobStore

        return AsyncInMemoryJobStore()
    pg = psycopg_adapter()
    import psycopg
    from psycopg import sql

    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(DEMO_SCHEMA))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(drop)
        pg.apply_schema(dsn, schema=DEMO_SCHEMA)
    except psycopg.Error as exc:
        raise StoreError(f"cannot prepare PostgreSQL: {exc}") from exc
    store: AsyncJobStore = pg.AsyncPsycopgJobStore(dsn, schema=DEMO_SCHEMA)
    return store


async def _run(
    store: AsyncJobStore, *, postgres_schema: str | None, emails: int, live: bool
) -> DemoReport:
    try:
        return await run_demo(store, postgres_schema=postgres_schema, emails=emails, live=live)
    finally:
        await store.close()
