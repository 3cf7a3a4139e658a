"""The soak's worker process: ``python -m benchmarks.soak_worker --dsn ... --schema ...``.

One skiplock worker whose processor sleeps a few milliseconds (a real job's I/O wait),
with the settings of the ``SKIPLOCK_*`` variables the harness passes (retention,
maintenance interval). Prints ``ready`` once its processor is registered and runs until
SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from benchmarks.adapters import get_adapter
from skiplock.engine import AsyncEngine, JobContext, Settings

#: The one job kind of the soak.
KIND = "soak.sleep"


async def _main(ns: argparse.Namespace) -> int:
    adapter = get_adapter(ns.adapter)
    store = await adapter.open_store(ns.dsn, ns.schema, ns.concurrency + 4)
    engine = AsyncEngine(store, Settings.from_env())
    pause = ns.sleep_ms / 1000

    @engine.processor(KIND, transactional=False)
    async def sleep(payload: dict[str, Any], ctx: JobContext) -> None:
        await asyncio.sleep(pause)

    worker = engine.worker(concurrency=ns.concurrency, install_signal_handlers=False)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    loop.add_signal_handler(signal.SIGINT, worker.stop)
    print("ready", flush=True)
    try:
        await worker.run()
    finally:
        await store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one soak worker until SIGTERM."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.soak_worker")
    p.add_argument("--dsn", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--adapter", default="psycopg")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--sleep-ms", type=float, default=3.0)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(_main(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
