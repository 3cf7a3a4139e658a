"""R7: without a metrics or tracing backend skiplock runs on no-ops and never imports
prometheus-client or OpenTelemetry; ``--metrics-port`` without the extra is a usage error.

Runs in every environment; in tox's ``noextras`` env, which checks first that neither
library is installed, it proves the no-op path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from skiplock import cli

if TYPE_CHECKING:
    from collections.abc import Callable

OPTIONAL = ("prometheus_client", "opentelemetry")

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import json
    import logging
    import sys

    import skiplock
    import skiplock.cli
    import skiplock.contrib
    import skiplock.contrib.logging
    from skiplock import AsyncEngine, Engine, NoopMetrics, NoopTracer
    from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore

    logging.basicConfig(level=logging.DEBUG, handlers=[skiplock.contrib.logging.json_handler()])
    ran = []

    async_engine = AsyncEngine(AsyncInMemoryJobStore())
    sync_engine = Engine(InMemoryJobStore())
    assert type(async_engine.metrics) is NoopMetrics and type(async_engine.tracer) is NoopTracer

    @async_engine.processor("a")
    async def a(payload, ctx):
        logging.getLogger("app").info("async job")
        ran.append("a")

    @async_engine.processor("b", max_attempts=1)
    def b(payload, ctx):
        raise ValueError("fails on purpose")

    @sync_engine.processor("c")
    def c(payload, ctx):
        ran.append("c")

    async def main():
        await async_engine.enqueue("a")
        await async_engine.enqueue("b")
        return await async_engine.worker().run_until_idle()

    handled = asyncio.run(main())
    sync_engine.enqueue("c")
    handled += sync_engine.worker().run_until_idle()
    assert handled == 3 and ran == ["a", "c"], (handled, ran)
    loaded = sorted(m for m in sys.modules if m.partition(".")[0] in {OPTIONAL!r})
    print(json.dumps(loaded))
    """
).replace("{OPTIONAL!r}", repr(set(OPTIONAL)))


def test_nothing_imports_the_optional_libraries() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert '"message": "async job"' in done.stderr  # the jobs ran, with JSON logs


# skiplock's modules that import prometheus_client (imported again without it).
_PROMETHEUS_MODULES = {"skiplock.contrib.prometheus", "skiplock.contrib._prometheus_scrape"}


@pytest.fixture
def no_prometheus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import prometheus_client`` fail as if the extra were not installed."""
    for name in list(sys.modules):
        if name.partition(".")[0] == "prometheus_client" or name in _PROMETHEUS_MODULES:
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)


def test_metrics_port_without_the_extra_is_a_usage_error(
    no_prometheus: None, make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    module = make_app(
        """
        from skiplock import AsyncEngine
        from skiplock.adapters.memory import AsyncInMemoryJobStore

        engine = AsyncEngine(AsyncInMemoryJobStore())
        """
    )
    assert cli.main(["worker", f"{module}:engine", "--metrics-port", "9100"]) == 2
    err = capsys.readouterr().err
    assert "prometheus-client, which is not installed" in err
    assert "pip install 'skiplock[prometheus]'" in err


def test_the_metrics_command_without_the_extra_is_a_usage_error(
    no_prometheus: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from skiplock import Engine
    from skiplock.adapters.memory import InMemoryJobStore

    assert cli.run_mounted("metrics", ["print"], Engine(InMemoryJobStore()), prog="app") == 2
    err = capsys.readouterr().err
    assert "metrics needs prometheus-client, which is not installed" in err
    assert "pip install 'skiplock[prometheus]'" in err
