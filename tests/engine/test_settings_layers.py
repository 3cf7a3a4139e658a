"""Settings in layers: ``Settings.from_env(base=...)`` (the environment on top of an
engine's own settings) and ``engine.configure()`` (the new settings really in effect)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from skiplock import AsyncEngine, Engine, JobContext, PolicyOverrides, RateLimit, Settings
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.core import ValidationError


def test_from_env_keeps_the_base_where_the_environment_says_nothing() -> None:
    base = Settings(
        concurrency=2,
        shutdown_timeout=5,
        max_attempts=7,
        kinds={"report": PolicyOverrides(max_attempts=2, timeout=60)},
        caps={"smtp": RateLimit(rps=1, burst=2)},
    )
    assert Settings.from_env({}, base=base) == base


def test_from_env_puts_variables_on_top_of_the_base() -> None:
    base = Settings(
        concurrency=2,
        max_attempts=7,
        kinds={"report": PolicyOverrides(max_attempts=2, timeout=60)},
        caps={"smtp": RateLimit(rps=1, burst=2), "sms": RateLimit(rps=3, burst=3)},
    )
    env = {
        "SKIPLOCK_CONCURRENCY": "8",
        "SKIPLOCK_TIMEOUTS": "report=5m,email=10s",
        "SKIPLOCK_CAPS": "smtp=20/40",
    }
    merged = Settings.from_env(env, base=base)
    assert merged.concurrency == 8  # the variable wins
    assert merged.max_attempts == 7  # the base where no variable is set
    # Per kind, field by field: the base's max_attempts stays beside the variable's timeout.
    assert merged.kinds["report"] == PolicyOverrides(max_attempts=2, timeout=300)
    assert merged.kinds["email"] == PolicyOverrides(timeout=10)
    assert merged.caps == {"smtp": RateLimit(rps=20, burst=40), "sms": RateLimit(rps=3, burst=3)}
    # Keywords still win over both.
    assert Settings.from_env(env, base=base, concurrency=3).concurrency == 3


def test_from_env_with_a_base_names_the_variable_that_breaks_it() -> None:
    base = Settings(stale_ttl=60, heartbeat_interval=10)
    with pytest.raises(ValidationError, match="SKIPLOCK_HEARTBEAT_INTERVAL"):
        Settings.from_env({"SKIPLOCK_HEARTBEAT_INTERVAL": "45s"}, base=base)


def test_configure_resolves_processor_policies_again() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore(), Settings(max_attempts=7, concurrency=2))

    @engine.processor("email", timeout=30)
    async def email(payload: Any, ctx: JobContext) -> None: ...

    assert engine.policy("email").retry.max_attempts == 7
    engine.configure(
        Settings(max_attempts=3, concurrency=5, kinds={"email": PolicyOverrides(timeout=5)})
    )
    policy = engine.policy("email")
    assert policy.retry.max_attempts == 3  # the new global value
    assert policy.timeout == 5.0  # explicit configuration > processor
    assert engine.processors["email"].policy == policy
    assert engine.policy("other").retry.max_attempts == 3  # no stale cached policy
    assert engine.worker().concurrency == 5


def test_configure_is_all_or_nothing() -> None:
    settings = Settings(heartbeat_interval=1)
    engine = Engine(InMemoryJobStore(), settings)

    @engine.processor("quick", stale_ttl=4)
    def quick(payload: Any) -> None: ...

    # stale_ttl 4 s is fine with 1 s heartbeats, not with 3 s ones.
    with pytest.raises(ValidationError, match="'quick'"):
        engine.configure(Settings(heartbeat_interval=3))
    assert engine.settings is settings
    assert engine.processors["quick"].policy.stale_ttl == timedelta(seconds=4)


def test_configure_rejects_what_is_no_settings() -> None:
    engine = Engine(InMemoryJobStore())
    with pytest.raises(TypeError, match=r"skiplock\.Settings"):
        engine.configure({"concurrency": 2})  # type: ignore[arg-type]
