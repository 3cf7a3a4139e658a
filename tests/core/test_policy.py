"""Policy fields declared once; resolution explicit > processor > default, field by field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from skiplock.core import KindPolicy, PolicyOverrides, RateLimit, RetryPolicy, ValidationError
from skiplock.core._fields import (
    NON_NEGATIVE_DURATION,
    POLICY_FIELD_NAMES,
    POLICY_FIELDS,
    POSITIVE_DURATION,
    SecondsView,
)
from skiplock.core._policy import overrides_from, resolve_policy

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

# policy field -> (processor value, explicit value), both differing from DEFAULT's.
SAMPLES: dict[str, tuple[Any, Any]] = {
    "max_attempts": (7, 9),
    "backoff_base": (timedelta(seconds=1), timedelta(seconds=2)),
    "backoff_factor": (1.5, 4.0),
    "backoff_cap": (timedelta(hours=2), timedelta(hours=3)),
    "backoff_jitter": (0.0, 0.5),
    "timeout": (timedelta(seconds=5), timedelta(seconds=2.5)),
    "stale_ttl": (timedelta(minutes=1), timedelta(minutes=2)),
    "node_limit": (2, 1),
    "cluster_limit": (4, 3),
    "rate_limit": (RateLimit(rps=5, burst=2), RateLimit(rps=9, burst=3)),
    "prefetch_limit": (0, 5),
    # The defaults are False: the explicit level switching a processor's choice off.
    "transactional": (True, False),
    "autocommit": (True, False),
    # Likewise: the explicit level putting a processor's choice back to the default.
    "idempotency_scope": ("tenant", "global"),
    "idempotency_conflict": ("replace_pending", "ignore"),
}
DURATIONS = [f.name for f in POLICY_FIELDS if f.type in (POSITIVE_DURATION, NON_NEGATIVE_DURATION)]


def _init_names(cls: type) -> list[str]:
    return [a.alias for a in attrs.fields(cls)]


# ---- the declaration ------------------------------------------------------------------


def test_every_declared_field_has_samples_here() -> None:
    assert list(SAMPLES) == list(POLICY_FIELD_NAMES)


def test_policy_classes_spell_exactly_the_declared_fields() -> None:
    assert _init_names(PolicyOverrides) == list(POLICY_FIELD_NAMES)
    retry_attrs = [f.retry_attr for f in POLICY_FIELDS if f.retry_attr is not None]
    assert _init_names(RetryPolicy) == retry_attrs
    own = [f.name for f in POLICY_FIELDS if f.retry_attr is None]
    assert _init_names(KindPolicy) == ["retry", *own]


def test_kind_policy_defaults_are_the_declared_defaults() -> None:
    policy = KindPolicy()
    for field in POLICY_FIELDS:
        assert policy.value(field.name) == field.default, field.name
    # RetryPolicy keeps defaults of its own: they must agree with the declaration.
    assert policy.retry == RetryPolicy()
    assert policy.timeout is None
    assert policy.stale_ttl == timedelta(minutes=15)
    # No connection unless the processor asks for one (R10).
    assert (policy.transactional, policy.autocommit) == (False, False)


def test_declared_names_and_environment_variables() -> None:
    assert len(set(POLICY_FIELD_NAMES)) == len(POLICY_FIELDS)
    for field in POLICY_FIELDS:
        assert field.env == f"SKIPLOCK_{field.name.upper()}"
        assert field.kind_env is not None
        assert field.kind_env.startswith("SKIPLOCK_")
        assert field.doc.endswith(".")
    kind_envs = [f.kind_env for f in POLICY_FIELDS]
    assert len(set(kind_envs)) == len(kind_envs)
    # The per-kind variable names users already have keep working.
    assert {"SKIPLOCK_NODE_LIMITS", "SKIPLOCK_TIMEOUTS", "SKIPLOCK_RATE_LIMITS"} <= set(kind_envs)


@pytest.mark.parametrize("field", POLICY_FIELDS, ids=POLICY_FIELD_NAMES)
def test_declared_default_passes_the_declared_check(field: Any) -> None:
    field.check(field.default)


# ---- resolution -----------------------------------------------------------------------


@pytest.mark.parametrize("name", POLICY_FIELD_NAMES)
def test_resolve_policy_precedence_per_field(name: str) -> None:
    processor_value, explicit_value = SAMPLES[name]
    default_value = DEFAULT.value(name)
    assert processor_value != default_value
    proc = PolicyOverrides(**{name: processor_value})
    expl = PolicyOverrides(**{name: explicit_value})

    assert resolve_policy(None, None, DEFAULT).value(name) == default_value
    assert resolve_policy(PolicyOverrides(), PolicyOverrides(), DEFAULT) == DEFAULT
    assert resolve_policy(None, proc, DEFAULT).value(name) == processor_value
    assert resolve_policy(expl, None, DEFAULT).value(name) == explicit_value
    assert resolve_policy(expl, proc, DEFAULT).value(name) == explicit_value


@pytest.mark.parametrize("name", POLICY_FIELD_NAMES)
def test_resolve_policy_other_fields_untouched(name: str) -> None:
    _, explicit_value = SAMPLES[name]
    resolved = resolve_policy(PolicyOverrides(**{name: explicit_value}), None, DEFAULT)
    for other in POLICY_FIELD_NAMES:
        if other != name:
            assert resolved.value(other) == DEFAULT.value(other), other


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


# ---- one duration type ----------------------------------------------------------------


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("seconds", [90, 1.5])
def test_policy_durations_accept_seconds_or_timedelta(name: str, seconds: float) -> None:
    delta = timedelta(seconds=seconds)
    by_seconds: dict[str, Any] = {name: seconds}
    by_delta: dict[str, Any] = {name: delta}
    overrides = PolicyOverrides(**by_seconds)
    assert overrides == PolicyOverrides(**by_delta)
    assert overrides.value(name) == delta  # stored as a timedelta
    # KindPolicy too (for its own fields; the backoff ones live in the RetryPolicy).
    default = KindPolicy(retry=RetryPolicy(base=timedelta(0)), stale_ttl=3600)
    resolved = resolve_policy(overrides, None, default)
    assert resolved.value(name) == delta


def test_timeout_is_stored_as_timedelta_and_reads_back_as_seconds() -> None:
    assert DURATIONS == ["backoff_base", "backoff_cap", "timeout", "stale_ttl"]
    for value in (2.5, timedelta(seconds=2.5)):
        policy = KindPolicy(timeout=value)
        assert policy.timeout == 2.5
        assert policy.value("timeout") == timedelta(seconds=2.5)
        overrides = PolicyOverrides(timeout=value)
        assert overrides.timeout == 2.5
        assert overrides.value("timeout") == timedelta(seconds=2.5)
    assert PolicyOverrides().timeout is None


def test_seconds_view_fields_have_their_view_on_both_classes() -> None:
    views = [f.name for f in POLICY_FIELDS if f.seconds_view]
    assert views == ["timeout"]
    for cls in (KindPolicy, PolicyOverrides):
        for name in views:
            assert isinstance(getattr(cls, name), SecondsView), (cls, name)


def test_rate_limits_accept_a_pair_or_a_mapping() -> None:
    expected = RateLimit(rps=5, burst=10)
    assert PolicyOverrides(rate_limit=(5, 10)).rate_limit == expected
    assert KindPolicy(rate_limit={"rps": 5, "burst": 10}).rate_limit == expected


def test_overrides_from_a_mapping() -> None:
    overrides = overrides_from({"stale_ttl": 30, "rate_limit": (1, 2), "max_attempts": 3})
    assert overrides == PolicyOverrides(
        stale_ttl=timedelta(seconds=30), rate_limit=RateLimit(rps=1, burst=2), max_attempts=3
    )
    assert overrides_from(overrides) is overrides
    with pytest.raises(ValidationError, match=r"unknown policy field\(s\) \['nope'\]"):
        overrides_from({"nope": 1})
    with pytest.raises(ValidationError, match="expected PolicyOverrides or a mapping"):
        overrides_from(3)  # type: ignore[arg-type]


# ---- validation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"max_attempts": True}, "max_attempts must be an int, got bool"),
        ({"max_attempts": 2.0}, "max_attempts must be an int, got float"),
        ({"node_limit": 0}, "node_limit must be >= 1"),
        ({"cluster_limit": -2}, "cluster_limit must be >= 1"),
        ({"timeout": 0.0}, "timeout must be > 0"),
        ({"timeout": -1.0}, "timeout must be > 0"),
        ({"timeout": float("nan")}, "timeout must be a timedelta or a finite number"),
        ({"timeout": "5"}, "timeout must be a timedelta or a finite number"),
        ({"timeout": True}, "timeout must be a timedelta or a finite number"),
        ({"stale_ttl": timedelta(0)}, "stale_ttl must be > 0"),
        ({"stale_ttl": 1e300}, "stale_ttl must be a timedelta or a finite number"),
        ({"backoff_base": timedelta(seconds=-1)}, "backoff_base must be >= 0"),
        ({"backoff_cap": -1}, "backoff_cap must be >= 0"),
        ({"backoff_factor": 0.9}, r"backoff_factor must be a number >= 1"),
        ({"backoff_factor": float("inf")}, r"backoff_factor must be a number >= 1"),
        ({"backoff_jitter": 2.0}, r"backoff_jitter must be a number within \[0, 1\]"),
        ({"rate_limit": 5}, r"rate_limit must be a RateLimit or \(rps, burst\)"),
        ({"rate_limit": (0, 1)}, "rps must be > 0"),
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
        ({"node_limit": 0}, "node_limit must be >= 1"),
        ({"stale_ttl": timedelta(seconds=-1)}, "stale_ttl must be > 0"),
        ({"stale_ttl": None}, "stale_ttl must be a timedelta"),  # not nullable
        ({"transactional": None}, "transactional must be a bool"),
    ],
)
def test_kind_policy_rejects_invalid(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValidationError, match=fragment):
        KindPolicy(**kwargs)


def test_kind_policy_value_rejects_unknown_names() -> None:
    with pytest.raises(ValidationError, match="unknown policy field 'nope'"):
        KindPolicy().value("nope")
