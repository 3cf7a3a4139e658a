"""Every port method is exercised by the contract kit that every store must pass."""

from __future__ import annotations

import inspect
import re

from skiplock.ports import AsyncJobStore, AsyncNotifier
from skiplock.testing.contract import store_async


def _port_methods(protocol: type) -> set[str]:
    return {
        name
        for name, value in vars(protocol).items()
        if callable(value) and not name.startswith("_")
    }


def test_contract_kit_calls_every_store_method() -> None:
    source = inspect.getsource(store_async)
    methods = _port_methods(AsyncJobStore)
    assert {"enqueue", "claim", "complete", "recover_stale"} <= methods
    missing = {name for name in methods if not re.search(rf"\bstore\.{name}\(", source)}
    assert not missing, f"port methods with no contract test: {sorted(missing)}"


def test_contract_kit_calls_every_notifier_method() -> None:
    source = inspect.getsource(store_async)
    missing = {
        name for name in _port_methods(AsyncNotifier) if not re.search(rf"\.{name}\(", source)
    }
    assert not missing, f"notifier methods with no contract test: {sorted(missing)}"
