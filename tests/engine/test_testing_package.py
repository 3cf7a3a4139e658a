"""``skiplock.testing`` for applications: FakeClock without pytest installed."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import skiplock.testing
from skiplock.testing import FakeClock
from skiplock.testing.contract import Capabilities

# Run in a fresh interpreter where ``import pytest`` fails, as in an application's
# environment that has skiplock but no pytest.
_WITHOUT_PYTEST = """
import sys
sys.modules["pytest"] = None  # any import of pytest now raises ImportError
from skiplock.testing import FakeClock
clock = FakeClock()
assert "pytest" not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
"""


def test_fake_clock_imports_without_pytest() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYTEST], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_capabilities_is_still_importable_from_the_package() -> None:
    assert skiplock.testing.Capabilities is Capabilities
    assert Capabilities(listen_notify=False).listen_notify is False


def test_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    before = clock.now()
    clock.advance(timedelta(seconds=5))
    assert clock.now() - before == timedelta(seconds=5)
