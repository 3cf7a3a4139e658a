"""Public test helpers: a fake clock and the store contract kit.

``from skiplock.testing import FakeClock`` needs nothing beyond skiplock itself (pytest
is not imported), so application tests with any runner can use it. The contract kit
needs pytest: load the plugin with ``pytest_plugins = ["skiplock.testing.plugin"]`` and
subclass :class:`skiplock.testing.contract.AsyncJobStoreContract` or
``JobStoreContract``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clock import FakeClock

if TYPE_CHECKING:
    from .contract.capabilities import Capabilities

__all__ = ["Capabilities", "FakeClock"]


def __getattr__(name: str) -> Any:
    # Capabilities lives in the contract kit, whose package imports pytest: load it only
    # when asked for, so that importing FakeClock never needs pytest.
    if name == "Capabilities":
        from .contract.capabilities import Capabilities

        return Capabilities
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
