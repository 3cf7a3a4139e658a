"""Policy resolution: explicit > processor > default, field by field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from skiplock.core import (
    KindPolicy,
    PolicyOverrides,
    RateLimit,
    RetryPolicy,
    ValidationError,
    resolve_policy,
)

DEFAULT = KindPolicy(
    retry=RetryPolicy(
        max_attempts=3,
        base=timedelta(seconds=10),
        factor=3.0,
        cap=timedelta(hours=1),
        jitter=0.2,
    ),
    timeout=60.0,
    stale_ttl=timedelta(minutes=5),
    node_limit=8,
    cluster_limit=20,
    rate_limit=RateLimit(rps=1, burst=1),
)

# override field -> (processor value, explicit value, getter on KindPolicy, default value)
FIELDS: dict[str, tuple[Any, Any, Any]] = {
    "max_attempts": (7, 9, lambda p: p.retry.max_attempts),
    "backoff_base": (timedelta(seconds=1), timedelta(seconds=2), lambda p: p.retry.base),
    "backoff_factor": (1.5, 4.0, lambda p: p.retry.factor),
    "backoff_cap": (timedelta(hours=2), timedelta(hours=3), lambda p: p.retry.cap),
    "backoff_jitter": (0.0, 0.5, lambda p: p.retry.jitter),
    "timeout": (5.0, 2.5, lambda p: p.timeout),
    "stale_ttl": (timedelta(minutes=1), timedelta(minutes=2), lambda p: p.stale_ttl),
    "node_limit": (2, 1, lambda p: p.node_limit),
    "cluster_limit": (4, 3, lambda p: p.cluster_limit),
    "rate_limit": (RateLimit(rps=5, burst=2), RateLimit(rps=9, burst=3), lambda p: p.rate_limit),
    # The defaults are False: the explicit level switching a processor's choice off.
    "transactional": (True, False, lambda p: p.transactional),
    "autocommit": (True, False, lambda p: p.autocommit),
}


@pytest.mark.parametrize("name", list(FIELDS))
def test_resolve_policy_precedence_per_field(name: str) -> None:
    processor_value, explicit_value, get = FIELDS[name]
    default_value = get(DEFAULT)
    proc = PolicyOverrides(**{name: processor_value})
    expl = PolicyOverrides(**{name: explicit_value})

    assert get(resolve_policy(None, None, DEFAULT)) == default_value
    assert get(resolve_policy(PolicyOverrides(), PolicyOverrides(), DEFAULT)) == default_value
    assert get(resolve_policy(None, proc, DEFAULT)) == processor_value
    assert get(resolve_policy(expl, None, DEFAULT)) == explicit_value
    assert get(resolve_policy(expl, proc, DEFAULT)) == explicit_value


@pytest.mark.parametrize("name", list(FIELDS))
def test_resolve_policy_other_fields_untouched(name: str) -> None:
    _, explicit_value, _ = FIELDS[name]
    resolved = resolve_policy(PolicyOverrides(**{name: explicit_value}), None, DEFAULT)
    for other, (_, _, get) in FIELDS.items():
        if other != name:
            assert get(resolved) == get(DEFAULT), other


def test_resolve_policy_mixes_levels() -> None:
    resolved = resolve_policy(
        PolicyOverrides(timeout=1.0),
        PolicyOverrides(timeout=9.0, max_attempts=2, autocommit=True),
        DEFAULT,
    )
    assert resolved == attrs.evolve(
        DEFAULT,
        timeout=1.0,
        autocommit=True,
        retry=attrs.evolve(DEFAULT.retry, max_attempts=2),
    )


def test_resolve_policy_false_is_a_setting_not_absence() -> None:
    default = KindPolicy(transactional=True)
    resolved = resolve_policy(PolicyOverrides(transactional=False), None, default)
    assert resolved.transactional is False


def test_resolve_policy_connection_modes_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="mutually exclusive"):
        PolicyOverrides(transactional=True, autocommit=True)
    with pytest.raises(ValidationError, match="mutually exclusive"):
        KindPolicy(transactional=True, autocommit=True)
    # Each level alone is fine; merged field by field the job would need both modes.
    with pytest.raises(ValidationError, match="mutually exclusive"):
        resolve_policy(
            PolicyOverrides(autocommit=True), PolicyOverrides(transactional=True), KindPolicy()
        )
    # Switching the processor's mode explicitly resolves it.
    resolved = resolve_policy(
        PolicyOverrides(autocommit=True, transactional=False),
        PolicyOverrides(transactional=True),
        KindPolicy(),
    )
    assert (resolved.transactional, resolved.autocommit) == (False, True)


def test_resolve_policy_inconsistent_merge_rejected() -> None:
    # Each level is fine alone; together the base exceeds the cap.
    with pytest.raises(ValidationError, match="cap must be >= base"):
        resolve_policy(
            PolicyOverrides(backoff_base=timedelta(hours=5)),
            PolicyOverrides(backoff_cap=timedelta(hours=1)),
            DEFAULT,
        )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_attempts": 0}, "max_attempts must be a positive int"),
        ({"max_attempts": True}, "max_attempts must be a positive int"),
        ({"node_limit": 0}, "node_limit must be a positive int"),
        ({"cluster_limit": -2}, "cluster_limit must be a positive int"),
        ({"timeout": 0.0}, "timeout must be > 0"),
        ({"timeout": -1.0}, "timeout must be > 0"),
        ({"timeout": float("nan")}, "timeout must be > 0"),
        ({"stale_ttl": timedelta(0)}, "stale_ttl must be > 0"),
        ({"backoff_base": timedelta(seconds=-1)}, "backoff_base must be >= 0"),
        ({"backoff_cap": timedelta(seconds=-1)}, "backoff_cap must be >= 0"),
        ({"backoff_factor": 0.9}, "backoff_factor must be >= 1"),
        ({"backoff_jitter": 2.0}, "backoff_jitter must be within"),
        ({"transactional": "yes"}, "transactional must be a bool"),
        ({"autocommit": 1}, "autocommit must be a bool"),
    ],
)
def test_policy_overrides_reject_invalid(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        PolicyOverrides(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"timeout": 0.0}, "timeout must be > 0"),
        ({"node_limit": 0}, "node_limit must be a positive int"),
        ({"stale_ttl": timedelta(seconds=-1)}, "stale_ttl must be > 0"),
    ],
)
def test_kind_policy_rejects_invalid(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        KindPolicy(**kwargs)


def test_kind_policy_defaults() -> None:
    policy = KindPolicy()
    assert policy.retry == RetryPolicy()
    assert policy.timeout is None
    assert policy.stale_ttl == timedelta(minutes=15)
    # No connection unless the processor asks for one (R10).
    assert policy.transactional is False
    assert policy.autocommit is False
