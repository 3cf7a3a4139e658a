"""Per-kind policy and its resolution: explicit config > processor default > global.

The fields, their defaults and their checks are declared once in
:data:`~skiplock.core._fields.POLICY_FIELDS`; the classes here spell them only for typing (a
drift test keeps both in step), and validate and resolve by iterating the declaration.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import attrs

from ._bucket import RateLimit
from ._errors import ValidationError
from ._fields import (
    POLICY_DEFAULTS,
    POLICY_FIELD_NAMES,
    POLICY_FIELDS,
    SecondsView,
    Setting,
    check_fields,
)
from ._idempotency import IdempotencyConflict, IdempotencyScope
from ._retry import RetryPolicy
from ._validation import optional_duration, optional_rate_limit, to_duration

#: (policy field, RetryPolicy attribute) for the fields that make up the retry policy.
_RETRY_ATTRS = tuple((f.name, f.retry_attr) for f in POLICY_FIELDS if f.retry_attr is not None)
_OWN_FIELDS = tuple(f for f in POLICY_FIELDS if f.retry_attr is None)


def check_connection_mode(transactional: object, autocommit: object) -> None:
    """A job runs inside its transaction or with an autocommit connection, not both."""
    if transactional is True and autocommit is True:
        raise ValidationError(
            "transactional and autocommit are mutually exclusive: a job runs either inside "
            "its transaction or with an autocommit connection (set one of them to False)"
        )


def _default_retry() -> RetryPolicy:
    return RetryPolicy(**{attr: POLICY_DEFAULTS[name] for name, attr in _RETRY_ATTRS})


@attrs.frozen
class KindPolicy:
    """Fully resolved policy of one kind (fields: :data:`~skiplock.core._fields.POLICY_FIELDS`).

    Durations are accepted as seconds or a timedelta and stored as a timedelta;
    ``timeout`` reads back as float seconds. ``node_limit`` counts per worker *process*:
    all workers of one engine in a process share it. Invalid values raise
    :class:`~skiplock.core.ValidationError` at construction.
    """

    retry: RetryPolicy = attrs.field(factory=_default_retry)
    _timeout: timedelta | None = attrs.field(
        default=POLICY_DEFAULTS["timeout"], converter=optional_duration
    )
    stale_ttl: timedelta = attrs.field(default=POLICY_DEFAULTS["stale_ttl"], converter=to_duration)
    node_limit: int | None = POLICY_DEFAULTS["node_limit"]  # per worker process
    cluster_limit: int | None = POLICY_DEFAULTS["cluster_limit"]  # across all workers
    rate_limit: RateLimit | None = attrs.field(
        default=POLICY_DEFAULTS["rate_limit"], converter=optional_rate_limit
    )
    prefetch_limit: int | None = POLICY_DEFAULTS["prefetch_limit"]
    # Connection mode (R10), opt-in: run inside the job's transaction, or with an
    # autocommit connection; neither (the default) acquires no connection for the job.
    transactional: bool = POLICY_DEFAULTS["transactional"]
    autocommit: bool = POLICY_DEFAULTS["autocommit"]
    # Idempotency keys (R16), applied by the enqueuing engine: where a key is unique and
    # what an enqueue whose key exists does.
    idempotency_scope: IdempotencyScope = POLICY_DEFAULTS["idempotency_scope"]
    idempotency_conflict: IdempotencyConflict = POLICY_DEFAULTS["idempotency_conflict"]

    #: Seconds a job may run, or None for no timeout (stored as a timedelta).
    timeout = SecondsView[float | None]()

    def __attrs_post_init__(self) -> None:
        check_fields(self, _OWN_FIELDS)
        check_connection_mode(self.transactional, self.autocommit)

    def value(self, name: str) -> Any:
        """The stored value of the policy field ``name`` (durations as timedelta)."""
        field = _field(name)
        if field.retry_attr is not None:
            return getattr(self.retry, field.retry_attr)
        return field.stored(self)


@attrs.frozen
class PolicyOverrides:
    """A partial policy: ``None`` means "not set at this level".

    Values are checked at construction (positive limits, timeout > 0, sane backoff, not
    both ``transactional`` and ``autocommit``); whether base <= cap holds, and whether the
    merged connection mode is consistent, is checked once the levels are merged.
    Durations may be seconds or a timedelta (stored as a timedelta; ``timeout`` reads
    back as float seconds); a rate limit may be ``(rps, burst)``.
    """

    max_attempts: int | None = None
    backoff_base: timedelta | None = attrs.field(default=None, converter=optional_duration)
    backoff_factor: float | None = None
    backoff_cap: timedelta | None = attrs.field(default=None, converter=optional_duration)
    backoff_jitter: float | None = None
    _timeout: timedelta | None = attrs.field(default=None, converter=optional_duration)
    stale_ttl: timedelta | None = attrs.field(default=None, converter=optional_duration)
    node_limit: int | None = None
    cluster_limit: int | None = None
    rate_limit: RateLimit | None = attrs.field(default=None, converter=optional_rate_limit)
    prefetch_limit: int | None = None
    transactional: bool | None = None
    autocommit: bool | None = None
    idempotency_scope: IdempotencyScope | None = None
    idempotency_conflict: IdempotencyConflict | None = None

    #: Seconds a job may run, or None if not set at this level (stored as a timedelta).
    timeout = SecondsView[float | None]()

    def __attrs_post_init__(self) -> None:
        check_fields(self, POLICY_FIELDS, none_ok=True)
        check_connection_mode(self.transactional, self.autocommit)

    def value(self, name: str) -> Any:
        """The stored value of the policy field ``name``, None if not set here."""
        return _field(name).stored(self)


_BY_NAME: Mapping[str, Setting] = {f.name: f for f in POLICY_FIELDS}


def _field(name: str) -> Setting:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValidationError(f"unknown policy field {name!r}") from None


def overrides_from(value: PolicyOverrides | Mapping[str, Any]) -> PolicyOverrides:
    """A :class:`PolicyOverrides` from itself or a mapping of policy field names.

    Durations may be seconds, rate limits ``(rps, burst)``; unknown names are an error.
    """
    if isinstance(value, PolicyOverrides):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError(f"expected PolicyOverrides or a mapping, got {value!r}")
    unknown = sorted(str(name) for name in set(value) - set(POLICY_FIELD_NAMES))
    if unknown:
        raise ValidationError(
            f"unknown policy field(s) {unknown}; known: {sorted(POLICY_FIELD_NAMES)}"
        )
    return PolicyOverrides(**value)


def policy_from(values: Mapping[str, Any]) -> KindPolicy:
    """A :class:`KindPolicy` from one value per declared policy field."""
    retry = RetryPolicy(**{attr: values[name] for name, attr in _RETRY_ATTRS})
    return KindPolicy(retry=retry, **{f.name: values[f.name] for f in _OWN_FIELDS})


def resolve_policy(
    explicit: PolicyOverrides | None, processor: PolicyOverrides | None, default: KindPolicy
) -> KindPolicy:
    """Merge field by field: the first level that sets a field wins.

    Raises :class:`~skiplock.core.ValidationError` if the merged policy is inconsistent
    (e.g. a backoff base above the cap, or ``transactional`` and ``autocommit`` both True
    because different levels set one each).
    """
    levels = tuple(x for x in (explicit, processor) if x is not None)
    values: dict[str, Any] = {}
    for field in POLICY_FIELDS:
        chosen = (field.stored(level) for level in levels)
        values[field.name] = next((v for v in chosen if v is not None), default.value(field.name))
    return policy_from(values)
