"""The soak's short variant (benchmarks/soak.py): one minute of steady load with
retention on, asserting behaviour, not speed: every job enqueued succeeds exactly once,
the worker keeps up with the load, and retention holds the table's row count to what
its window implies (without it, the rows would grow with every minute).

The 30-minute run and its figures (throughput, pickup, sizes per minute) are a
benchmark: ``python -m benchmarks.soak`` (docs/performance.md).
"""

from __future__ import annotations

import asyncio

import pytest
from benchmarks.soak import SoakPlan, run

from tests.pgfixtures import base_dsn

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

RATE = 150.0
# Retention, maintenance and the report window are scaled down with the run (a minute holds
# six retention windows), so that the bound on the rows is tested in a minute of CI time.
PLAN = SoakPlan(
    minutes=1, window=5, rate=RATE, concurrency=16, sleep_ms=3, retention=10, maintenance=2
)


def test_a_minute_of_steady_load_loses_nothing_and_stays_bounded() -> None:
    result = asyncio.run(run(base_dsn(), PLAN, log=lambda _: None))

    assert result.enqueued >= RATE * PLAN.minutes * 60 * 0.9
    # Exactly once: what succeeded, counted window by window before retention purged
    # it, is what was enqueued; nothing failed and nothing is left.
    assert result.finished == result.enqueued
    assert (result.failed, result.unfinished) == (0, 0)
    steady = result.steady
    assert len(steady) == 12
    # The worker keeps up: at each window's end at most a few seconds of load wait.
    assert max(w.backlog for w in steady) <= RATE * 5
    # Retention purges: rows are bounded by the retention window plus a maintenance
    # period and a report window (with slack), far below the 9,000 jobs enqueued.
    bound = RATE * (PLAN.retention + PLAN.maintenance + PLAN.window) * 1.5
    late = steady[len(steady) // 2 :]
    assert max(w.rows for w in late) <= bound, [w.rows for w in late]
