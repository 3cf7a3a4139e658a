"""Public test helpers: a fake clock and the store contract kit.

Load the pytest plugin with ``pytest_plugins = ["skiplock.testing.plugin"]`` and subclass
:class:`skiplock.testing.contract.AsyncJobStoreContract` or ``JobStoreContract``.
"""

from __future__ import annotations

from ._clock import FakeClock
from .contract.capabilities import Capabilities

__all__ = ["Capabilities", "FakeClock"]
