"""The worker entry point: ``python -m examples.aa_jobs.worker`` (see README.md).

Runs the pool (J1: 4 slots by default) until SIGTERM/SIGINT, then drains. ``--kinds`` and
``--tenants`` make a dedicated worker (J2), e.g. one for a high-volume tenant.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from skiplock import Settings

from .jobs import build, make_settings


async def serve(
    dsn: str,
    *,
    concurrency: int,
    kinds: list[str] | None,
    tenants: list[str] | None,
    metrics_port: int | None,
) -> None:
    jobs = build(dsn, Settings.from_env(base=make_settings()))  # SKIPLOCK_* on top
    if metrics_port is not None:
        jobs.metrics.serve(metrics_port)  # mdm_jobs_* for Prometheus
    async with jobs.store:
        worker = jobs.engine.worker(
            install_signal_handlers=True, concurrency=concurrency, kinds=kinds, tenants=tenants
        )
        await worker.run()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.aa_jobs.worker")
    parser.add_argument(
        "--dsn", default=os.environ.get("AA_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--kinds", type=lambda text: text.split(","))
    parser.add_argument("--tenants", type=lambda text: text.split(","))
    parser.add_argument("--metrics-port", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    asyncio.run(
        serve(
            args.dsn,
            concurrency=args.concurrency,
            kinds=args.kinds,
            tenants=args.tenants,
            metrics_port=args.metrics_port,
        )
    )


if __name__ == "__main__":
    main()
