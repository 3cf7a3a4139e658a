"""Every port method is exercised by the contract kit that every store must pass."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

from skiplock.ports import AsyncJobStore, AsyncNotifier
from skiplock.testing import contract


def _kit_source() -> str:
    """Every async module of the contract kit (the topic mixins included)."""
    names = [m.name for m in pkgutil.iter_modules(contract.__path__) if m.name.endswith("_async")]
    assert names, "no async contract modules found"
    modules = [importlib.import_module(f"{contract.__name__}.{name}") for name in names]
    return "\n".join(inspect.getsource(module) for module in modules)


def _port_methods(protocol: type) -> set[str]:
    # The store protocol is the union of its roles: the methods of every role it joins.
    return {
        name
        for klass in protocol.__mro__
        if klass.__module__.startswith("skiplock.")
        for name, value in vars(klass).items()
        if callable(value) and not name.startswith("_")
    }


def test_contract_kit_calls_every_store_method() -> None:
    source = _kit_source()
    methods = _port_methods(AsyncJobStore)
    assert {"enqueue", "claim", "complete", "recover_stale"} <= methods
    missing = {name for name in methods if not re.search(rf"\bstore\.{name}\(", source)}
    assert not missing, f"port methods with no contract test: {sorted(missing)}"


def test_contract_kit_calls_every_notifier_method() -> None:
    source = _kit_source()
    missing = {
        name for name in _port_methods(AsyncNotifier) if not re.search(rf"\.{name}\(", source)
    }
    assert not missing, f"notifier methods with no contract test: {sorted(missing)}"


def test_the_batch_of_columns_test_takes_both_postgresql_write_paths() -> None:
    # The kit cannot import an adapter: its batch sizes are literals that must bracket
    # the PostgreSQL stores' switch from one INSERT to COPY, or one path goes untested.
    from skiplock.adapters._pg._store_async import COPY_THRESHOLD
    from skiplock.testing.contract._enqueue_async import AsyncEnqueueContract

    test = AsyncEnqueueContract.test_enqueue_takes_a_batch_of_columns_as_its_requests
    [mark] = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
    sizes = mark.args[1]
    assert min(sizes) < COPY_THRESHOLD <= max(sizes)
