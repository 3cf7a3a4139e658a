"""An embedded worker's log lines where the host configured no logging (issue 41): under
uvicorn's default config only uvicorn's loggers have handlers, and the worker's INFO lines
went nowhere. Each case runs in a fresh interpreter: pytest configures logging itself."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = """
import logging
import sys

from skiplock import Engine
from skiplock.adapters.memory import InMemoryJobStore

SETUP

engine = Engine(InMemoryJobStore())


@engine.processor("a")
def handle(payload, ctx):
    pass


before = logging.getLogger("skiplock").level
with engine.worker(worker_id="w-embedded").in_background():
    pass
logger = logging.getLogger("skiplock")
print(f"level {logger.level} (was {before}), handlers {len(logger.handlers)}")
"""


def run(setup: str) -> tuple[str, str]:
    """Run the script with ``setup`` as its logging setup; (stdout, stderr)."""
    code = textwrap.dedent(SCRIPT).replace("SETUP", textwrap.dedent(setup))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout, done.stderr


def test_without_a_logging_setup_the_worker_logs_at_info_on_stderr() -> None:
    out, err = run("")
    assert "INFO    skiplock.worker: worker w-embedded started: " in err
    assert "INFO    skiplock.worker: worker w-embedded stopped after 0 jobs" in err
    # Nothing is left behind once the block ended.
    assert out == "level 0 (was 0), handlers 0\n"


def test_an_application_logging_setup_is_left_alone() -> None:
    # Its handler and level rule: WARNING and above only.
    out, err = run("logging.basicConfig(level=logging.WARNING, stream=sys.stderr)")
    assert "skiplock.worker" not in err
    assert out == "level 0 (was 0), handlers 0\n"


def test_a_level_set_on_skiplock_is_kept() -> None:
    out, err = run('logging.getLogger("skiplock").setLevel(logging.WARNING)')
    assert "started" not in err
    assert out == "level 30 (was 30), handlers 0\n"


def test_a_setup_made_while_the_worker_runs_takes_over_without_duplicates() -> None:
    code = textwrap.dedent(
        """
        import logging
        import sys

        from skiplock import Engine
        from skiplock.adapters.memory import InMemoryJobStore

        engine = Engine(InMemoryJobStore())

        @engine.processor("a")
        def handle(payload, ctx):
            pass

        with engine.worker(worker_id="w-late").in_background():
            logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="app %(message)s")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "worker w-late started" in done.stderr  # before the application's setup
    # After it, each line once, through the application's handler only.
    assert done.stdout.count("worker w-late stopped after 0 jobs") == 1
    assert "stopped" not in done.stderr
