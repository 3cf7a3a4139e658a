"""A benchmark worker process: ``python -m benchmarks.worker_proc --system ... --dsn ...``.

Protocol with the harness (one line each): it prints ``ready`` once connected and its
processors are registered, waits for ``go`` on stdin (the start barrier), then
processes jobs until SIGTERM. Processors report ``first <t>`` (noop/tx modes) or
``start <job> <t>`` (latency mode) with ``t = time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from benchmarks._system import Hooks, WorkerArgs
from benchmarks.systems import make_system


async def _main(args: WorkerArgs) -> int:
    hooks = Hooks(args.mode)
    system = make_system(args.system, args.adapter)
    runner = await system.open_worker(args, hooks)
    loop = asyncio.get_running_loop()
    try:
        hooks.send("ready")
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "go":
            return 0  # the harness went away before the start
        loop.add_signal_handler(signal.SIGTERM, runner.stop)
        loop.add_signal_handler(signal.SIGINT, runner.stop)
        await runner.run()
    finally:
        await runner.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one worker until SIGTERM."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    args = WorkerArgs.from_argv(argv)
    return asyncio.run(_main(args))


if __name__ == "__main__":
    raise SystemExit(main())
