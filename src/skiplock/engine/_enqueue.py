"""Building validated enqueue requests (X2: everything is checked before the store)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.core import (
    EnqueueRequest,
    JobState,
    ValidationError,
    check_available_at,
    check_text,
    encode_payload,
    shown,
    validate_request,
)

from ._codec import encode

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


@attrs.frozen
class Enqueue:
    """One job for :meth:`AsyncEngine.enqueue_many` (fields as for ``enqueue``).

    ``available_at`` (an aware datetime) and ``delay`` (a timedelta or seconds, counted
    from the store's clock) are mutually exclusive; neither means "due now".
    ``priority`` ``None`` takes the kind's declared default priority (0 if it has none).
    ``max_attempts`` ``None`` leaves it to the policy of the processor that runs the job
    (the enqueuing engine's resolved policy is stored until a worker claims it).
    """

    kind: str
    payload: Any = None
    priority: int | None = attrs.field(default=None, kw_only=True)
    tenant: str | None = attrs.field(default=None, kw_only=True)
    idempotency_key: str | None = attrs.field(default=None, kw_only=True)
    available_at: datetime | None = attrs.field(default=None, kw_only=True)
    delay: timedelta | float | None = attrs.field(default=None, kw_only=True)
    max_attempts: int | None = attrs.field(default=None, kw_only=True)


def as_delay(value: object) -> timedelta | None:
    """``delay`` as a timedelta (numbers are seconds); validation of the sign comes later."""
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"delay must be a timedelta or seconds, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(f"delay must be a finite number of seconds, got {value!r}")
    try:
        return timedelta(seconds=value)
    except OverflowError:
        raise ValidationError(f"delay out of range: {value!r}") from None


def build_request(
    item: Enqueue,
    *,
    default_max_attempts: int,
    default_priority: int = 0,
    trace_context: Mapping[str, str] | None,
    known_kinds: frozenset[str] | None,
    max_payload_bytes: int,
) -> EnqueueRequest:
    """Encode the payload and validate; raises ValidationError/UnknownKindError.

    ``default_max_attempts`` and ``default_priority`` are the kind's defaults, for an
    item that sets neither (the engine resolves them per kind, in one place).
    """
    if not isinstance(item, Enqueue):
        raise TypeError(f"expected skiplock.Enqueue, got {type(item).__name__}")
    try:
        payload = encode(item.payload)
    except ValidationError:
        raise
    except Exception as exc:  # a converter choking on a typed payload
        raise ValidationError(f"payload could not be encoded: {exc}") from None
    # Encoded once here (validating it) and handed to the store, which would otherwise
    # encode it again.
    text = encode_payload(payload, max_bytes=max_payload_bytes)
    # In UTC: any offset Python allows (a fraction of a second, nearly a day) reaches the
    # store as a plain instant.
    available_at = None if item.available_at is None else check_available_at(item.available_at)
    request = EnqueueRequest(
        kind=item.kind,
        payload=payload,
        payload_json=text,
        priority=default_priority if item.priority is None else item.priority,
        tenant=item.tenant,
        available_at=available_at,
        delay=as_delay(item.delay),
        max_attempts=default_max_attempts if item.max_attempts is None else item.max_attempts,
        # Only the caller's own choice binds the worker; the default is the enqueuing
        # node's, and the worker that runs the job applies its processor's policy.
        explicit_max_attempts=item.max_attempts is not None,
        idempotency_key=item.idempotency_key,
        trace_context=trace_context,
    )
    validate_request(request, known_kinds=known_kinds, max_payload_bytes=max_payload_bytes)
    return request


def as_states(
    value: JobState | str | Iterable[JobState | str] | None,
) -> frozenset[JobState] | None:
    """A state filter from one state, a state name, or several."""
    if value is None:
        return None
    items = [value] if isinstance(value, JobState | str) else list(value)
    try:
        return frozenset(JobState(v) for v in items)
    except ValueError:
        known = ", ".join(state.value for state in JobState)
        bad = next(v for v in items if v not in JobState.__members__.values())
        raise ValidationError(f"unknown job state {shown(bad)}: one of {known}") from None


def as_names(name: str, value: str | Iterable[str] | None) -> frozenset[str] | None:
    """A kind/tenant filter from one name or several (each text a store can compare)."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    for item in items:
        if not isinstance(item, str):
            raise ValidationError(f"{name} filter must hold str, got {shown(item)}")
        check_text(f"{name} filter", item)
    return frozenset(items)
