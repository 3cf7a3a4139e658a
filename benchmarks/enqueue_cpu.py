"""``python -m benchmarks.enqueue_cpu [SRC ...]``: the client CPU of the engine's enqueue
path, without a database, for each source tree given (``src`` directories; default this
checkout's), interleaved.

A PostgreSQL enqueue's time is mostly the server's commit, which a loaded machine makes
swing by several times between runs; the engine's own share (building and checking the
requests) is a few microseconds per job, which this measures alone: each round runs one
child process per tree (alternating their order) with an ``Engine`` on a store that
writes nothing, and takes ``time.process_time()`` per job of 20,000 single enqueues
(without options, and with four) and of 100,000 jobs in one ``enqueue_many`` (without
keys, and with a tenant and key each). Prints each round and the medians.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

SINGLE = 20_000
BULK = 100_000


def _cpu(fn: Callable[[], object], jobs: int) -> float:
    """CPU microseconds per job of ``fn()``, the garbage collector off."""
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return (time.process_time() - start) / jobs * 1e6
    finally:
        gc.enable()


def child() -> dict[str, float]:
    """One round in this process: µs of CPU per job of each workload."""
    from skiplock import Engine, Enqueue, Settings, declare
    from skiplock.core import EnqueueResult

    results = [EnqueueResult(id=i, created=True) for i in range(BULK)]

    class Stub:
        def enqueue(self, requests: Sequence[Any], **_: Any) -> list[EnqueueResult]:
            return results[: len(requests)]

    engine = Engine(Stub(), Settings())  # type: ignore[arg-type]  # enqueue only
    engine.declare(declare("email.send", priority=2))

    def single() -> None:
        for i in range(SINGLE):
            engine.enqueue("email.send", {"to": "a@example.com", "n": i})

    def single_options() -> None:
        for i in range(SINGLE):
            engine.enqueue(
                "email.send",
                {"to": "a@example.com", "n": i},
                priority=5,
                tenant="acme",
                idempotency_key=f"k{i}",
                max_attempts=3,
            )

    items = [Enqueue("email.send", {"to": "a@example.com", "n": i}) for i in range(BULK)]
    keyed = [
        Enqueue("email.send", {"n": i}, tenant="acme", idempotency_key=f"k{i}") for i in range(BULK)
    ]
    single()  # warm: the kind compiled, the code paths run once
    return {
        "single": _cpu(single, SINGLE),
        "single, 4 options": _cpu(single_options, SINGLE),
        "bulk": _cpu(lambda: engine.enqueue_many(items), BULK),
        "bulk, tenant and key": _cpu(lambda: engine.enqueue_many(keyed), BULK),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.enqueue_cpu")
    parser.add_argument("src", nargs="*", type=Path, help="src directories (default: ./src)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        json.dump(child(), sys.stdout)
        return 0
    trees = [path.resolve() for path in args.src] or [Path("src").resolve()]
    rounds: dict[Path, list[dict[str, float]]] = {tree: [] for tree in trees}
    for n in range(args.rounds):
        for tree in trees if n % 2 == 0 else trees[::-1]:
            env = os.environ | {"PYTHONPATH": f"{tree}{os.pathsep}{Path.cwd()}"}
            command = [sys.executable, "-m", "benchmarks.enqueue_cpu", "--child"]
            out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            rounds[tree].append(json.loads(out.stdout))
            shown = ", ".join(f"{k} {v:.2f}" for k, v in rounds[tree][-1].items())
            print(f"round {n} {tree}: {shown}", flush=True)
    print("median µs of CPU per job:")
    for workload in rounds[trees[0]][0]:
        medians = [statistics.median(r[workload] for r in rounds[tree]) for tree in trees]
        ratios = " ".join(f"{m / medians[0]:.3f}" for m in medians[1:])
        print(f"  {workload}: {' / '.join(f'{m:.2f}' for m in medians)}  (vs the first: {ratios})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
