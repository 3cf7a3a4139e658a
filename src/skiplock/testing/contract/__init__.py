"""The store contract kit: behaviour tests every job store must pass.

Subclass :class:`AsyncJobStoreContract` (async stores) or :class:`JobStoreContract` (sync
stores) in a ``Test...`` class, override its ``store`` fixture, and set ``capabilities``.
Requires ``pytest_plugins = ["skiplock.testing.plugin"]`` in your ``conftest.py``.
"""

from __future__ import annotations

from .capabilities import Capabilities, InjectedFault
from .store import JobStoreContract
from .store_async import AsyncJobStoreContract

__all__ = ["AsyncJobStoreContract", "Capabilities", "InjectedFault", "JobStoreContract"]
