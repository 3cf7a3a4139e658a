"""The public test kit itself: FakeClock, Capabilities, the plugin's capability skips."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest

from skiplock.testing import Capabilities, FakeClock
from skiplock.testing.contract import AsyncJobStoreContract, JobStoreContract


def test_fake_clock_starts_at_a_fixed_aware_instant() -> None:
    clock = FakeClock()
    assert clock.now() == datetime(2024, 1, 1, tzinfo=UTC)
    assert clock.now().utcoffset() == timedelta(0)
    assert clock.monotonic() == 0.0
    assert clock.now() == clock.now()


def test_fake_clock_advance_moves_both_clocks() -> None:
    clock = FakeClock(datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC))
    assert clock.advance(1.5) == datetime(2030, 5, 6, 7, 8, 10, 500_000, tzinfo=UTC)
    clock.advance(timedelta(minutes=1))
    assert clock.now() == datetime(2030, 5, 6, 7, 9, 10, 500_000, tzinfo=UTC)
    assert clock.monotonic() == 61.5


def test_fake_clock_never_advances_backwards() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)
    assert clock.now() == FakeClock().now()


def test_fake_clock_set_jumps_the_wall_clock_only() -> None:
    clock = FakeClock()
    clock.advance(5)
    clock.set(datetime(2020, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))))
    assert clock.now() == datetime(2020, 1, 1, tzinfo=UTC)
    assert clock.now().tzinfo is UTC
    assert clock.monotonic() == 5.0


def test_fake_clock_rejects_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock(datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        FakeClock().set(datetime(2024, 1, 1))


def test_fake_clock_is_thread_safe() -> None:
    clock = FakeClock()

    def tick() -> None:
        for _ in range(1000):
            clock.advance(timedelta(microseconds=1))

    threads = [threading.Thread(target=tick) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert clock.now() == FakeClock().now() + timedelta(microseconds=8000)


def test_fake_clock_fixture_is_fresh(clock: FakeClock) -> None:
    assert clock.now() == FakeClock().now()


def test_capabilities_defaults_and_frozen() -> None:
    caps = Capabilities()
    assert (caps.listen_notify, caps.controllable_clock, caps.transactions, caps.concurrent) == (
        True,
        False,
        True,
        True,
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        caps.listen_notify = False  # type: ignore[misc]
    assert Capabilities(listen_notify=False).supports("listen_notify") is False
    with pytest.raises(ValueError, match="unknown store capability 'teleport'"):
        caps.supports("teleport")


def test_contract_classes_are_not_collected_by_themselves() -> None:
    for contract in (AsyncJobStoreContract, JobStoreContract):
        assert not contract.__name__.startswith("Test")
        assert contract.capabilities == Capabilities()


_BACKEND = """
import pytest
from skiplock.adapters.memory import {store}
from skiplock.testing import Capabilities
from skiplock.testing.contract import {contract}


class TestStore({contract}):
    capabilities = Capabilities(
        listen_notify=False, controllable_clock=True, statement_timeouts=False
    )

    @pytest.fixture
    def store(self, clock):
        return {store}(clock=clock)


class TestNoStore({contract}):
    pass


@pytest.mark.skiplock_requires("teleport")
class TestUnknownCapability({contract}):
    @pytest.fixture
    def store(self, clock):
        return {store}(clock=clock)
"""


@pytest.mark.parametrize(
    ("contract", "store"),
    [("AsyncJobStoreContract", "AsyncInMemoryJobStore"), ("JobStoreContract", "InMemoryJobStore")],
)
def test_plugin_skips_only_tests_needing_a_missing_capability(
    pytester: pytest.Pytester, contract: str, store: str
) -> None:
    pytester.makeconftest('pytest_plugins = ["skiplock.testing.plugin"]')
    pytester.makepyfile(test_backend=_BACKEND.format(contract=contract, store=store))

    result = pytester.runpytest_inprocess("-k", "TestStore and notifier", "-rs")
    kit = {"AsyncJobStoreContract": AsyncJobStoreContract, "JobStoreContract": JobStoreContract}
    notifier_tests = [n for n in dir(kit[contract]) if n.startswith("test_") and "notifier" in n]
    assert len(notifier_tests) >= 6
    result.assert_outcomes(skipped=len(notifier_tests))
    result.stdout.fnmatch_lines(["*does not support 'listen_notify'*"])

    # Notifier and statement-timeout tests need capabilities turned off above.
    result = pytester.runpytest_inprocess(
        "-k", "TestStore and (claim or transaction) and not (statement_timeout_ or notifier)"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 20
    assert "skipped" not in outcomes
    assert "failed" not in outcomes

    result = pytester.runpytest_inprocess("-k", "TestNoStore and test_get_unknown_id")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*TestNoStore must override the `store` fixture*"])

    result = pytester.runpytest_inprocess("-k", "TestUnknownCapability and test_get_unknown_id")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*unknown store capability 'teleport'*"])
