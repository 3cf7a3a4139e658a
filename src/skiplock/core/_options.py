"""The job options: what an enqueue sets besides a job's kind and payload, declared once
(:class:`EnqueueFields`), and their checks (X2: everything is checked before anything is
written; README.md, "Enqueue limits")."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import attrs

from ._errors import UnknownKindError, ValidationError
from ._idempotency import (
    IDEMPOTENCY_CONFLICTS,
    IDEMPOTENCY_SCOPES,
    IdempotencyConflict,
    IdempotencyScope,
)
from ._validation import (
    INT4_RANGE,
    MAX_AVAILABLE_AT,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_DELAY,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_PAYLOAD_BYTES,
    MIN_AVAILABLE_AT,
    PRIORITY_RANGE,
    _has_control_chars,
    check_choice,
    check_int,
    check_kind,
    check_tenant,
    check_text,
    encode_payload,
    shown,
    unknown_kind_message,
)

if TYPE_CHECKING:
    from ._types import EnqueueRequest


def _option(doc: str, *, due_time: bool = False) -> dict[str, object]:
    return {"doc": doc, "due_time": due_time}


@attrs.frozen
class EnqueueFields:
    """The job options: what an enqueue may set besides the job's kind and payload, each
    ``None`` by default (the kind's declared default or policy applies, else none).

    The one declaration of them: :class:`~skiplock.Enqueue` is these with a kind and a
    payload; the engine's enqueue methods, the typed task handles, the REST API's
    ``JobCreate`` body and Django's tasks take them by these names or say why one does
    not apply (tests/drift/test_job_options.py). Each field's ``metadata`` holds its
    ``doc`` and whether it is part of the job's ``due_time`` (``enqueue_at`` and
    ``enqueue_after`` set it).
    """

    priority: int | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("higher is claimed first; None: the kind's declared priority, else 0"),
    )
    tenant: str | None = attrs.field(
        default=None, kw_only=True, metadata=_option("the job's tenant; None: no tenant")
    )
    idempotency_key: str | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("an enqueue of an existing key returns its job and creates none"),
    )
    available_at: datetime | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("due at this aware datetime (not with delay)", due_time=True),
    )
    delay: timedelta | float | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option(
            "due this long (a timedelta or seconds) after the store's now (not with available_at)",
            due_time=True,
        ),
    )
    max_attempts: int | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("attempts before the job is dead; None: the running worker's policy"),
    )
    idempotency_scope: IdempotencyScope | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("where the key is unique: global or tenant; None: the kind's policy"),
    )
    idempotency_conflict: IdempotencyConflict | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option(
            "an existing key's pending job: ignore or replace_pending; None: the kind's policy"
        ),
    )
    concurrency_key: str | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option(
            "at most concurrency_limit jobs of the key run at once; None: the "
            "kind's declared key, if any"
        ),
    )
    concurrency_limit: int | None = attrs.field(
        default=None,
        kw_only=True,
        metadata=_option("the key's limit (default 1); needs a concurrency_key"),
    )

    @staticmethod
    def names(*, due_time: bool = True) -> tuple[str, ...]:
        """The options' names in declaration order; without the due time's
        (``available_at``, ``delay``) with ``due_time=False``."""
        return _NAMES if due_time else _TIMELESS_NAMES


_NAMES = tuple(field.name for field in attrs.fields(EnqueueFields))
_TIMELESS_NAMES = tuple(
    field.name for field in attrs.fields(EnqueueFields) if not field.metadata["due_time"]
)


def check_known_kind(kind: object, known_kinds: frozenset[str] | None) -> str:
    """Return ``kind`` if it is a valid kind name and one of ``known_kinds`` (None: any
    kind), else raise ValidationError (UnknownKindError for an unknown one)."""
    name = check_kind(kind)
    if known_kinds is not None and name not in known_kinds:
        raise UnknownKindError(
            unknown_kind_message(
                name,
                known_kinds,
                "declare it where it is enqueued, or set Settings.unknown_kinds to 'warn' "
                "or 'allow'",
            )
        )
    return name


def check_priority(name: str, value: object) -> int:
    """Return ``value`` if it is a priority (an int within :data:`PRIORITY_RANGE`)."""
    low, high = PRIORITY_RANGE
    return check_int(name, value, minimum=low, maximum=high)


def check_max_attempts(value: object) -> int:
    """Return ``value`` if it is a ``max_attempts`` (an int from 1 to ``integer``'s max)."""
    return check_int("max_attempts", value, minimum=1, maximum=INT4_RANGE[1])


def _validate_idempotency_key(key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str):
        raise ValidationError(f"idempotency_key must be a str or None, got {type(key).__name__}")
    if not key:
        raise ValidationError("idempotency_key must not be empty (use None for no key)")
    check_text("idempotency_key", key, max_length=MAX_IDEMPOTENCY_KEY_LENGTH)


def check_concurrency(key: object, limit: object) -> tuple[str | None, int | None]:
    """Return a job's ``(concurrency_key, concurrency_limit)`` if they are valid, the
    limit 1 for a key without one; raise ValidationError otherwise.

    A key is non-empty text of at most :data:`MAX_CONCURRENCY_KEY_LENGTH` characters
    without control characters; its limit an int from 1 to ``integer``'s max. A limit
    without a key is refused: it would limit nothing.
    """
    if key is None:
        if limit is not None:
            raise ValidationError(
                f"concurrency_limit needs a concurrency_key, got limit {shown(limit)} without one"
            )
        return None, None
    if not isinstance(key, str):
        raise ValidationError(f"concurrency_key must be a str or None, got {type(key).__name__}")
    if not key:
        raise ValidationError("concurrency_key must not be empty (use None for no key)")
    check_text("concurrency_key", key, max_length=MAX_CONCURRENCY_KEY_LENGTH)
    if _has_control_chars(key):
        raise ValidationError(f"concurrency_key {shown(key)} contains control characters")
    if limit is None:
        return key, 1
    return key, check_int("concurrency_limit", limit, minimum=1, maximum=INT4_RANGE[1])


def check_available_at(value: object, name: str = "available_at") -> datetime:
    """Return ``value`` in UTC if it is an aware datetime within
    [:data:`MIN_AVAILABLE_AT`, :data:`MAX_AVAILABLE_AT`] (the times a job may have), else
    raise naming it ``name``."""
    if not isinstance(value, datetime):
        raise ValidationError(f"{name} must be a datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise ValidationError(f"{name} must be timezone-aware, got naive {value.isoformat()}")
    try:
        # OverflowError: the offset moves it outside Python's years 1..9999.
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_AVAILABLE_AT <= utc <= MAX_AVAILABLE_AT:
        raise ValidationError(
            f"{name} out of range: {value.isoformat()}, must be within "
            f"[{MIN_AVAILABLE_AT.isoformat()}, {MAX_AVAILABLE_AT.isoformat()}]"
        )
    return utc


def check_delay(value: object) -> timedelta:
    """Return ``value`` if it is a timedelta within [0, :data:`MAX_DELAY`], else raise."""
    if not isinstance(value, timedelta):
        raise ValidationError(f"delay must be a timedelta, got {type(value).__name__}")
    if not timedelta(0) <= value <= MAX_DELAY:
        raise ValidationError(
            f"delay out of range: {value}, must be within [0, {MAX_DELAY.days} days]"
        )
    return value


def _validate_schedule(available_at: object, delay: object) -> None:
    if available_at is not None and delay is not None:
        raise ValidationError("available_at and delay are mutually exclusive; set at most one")
    if available_at is not None:
        check_available_at(available_at)
    if delay is not None:
        check_delay(delay)


def check_trace_context(trace_context: object) -> None:
    """Raise ValidationError unless ``trace_context`` is None or a mapping of str to str
    PostgreSQL can store."""
    if trace_context is None:
        return
    if not isinstance(trace_context, Mapping):
        raise ValidationError(
            f"trace_context must be a mapping of str to str, got {type(trace_context).__name__}"
        )
    for key, value in trace_context.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValidationError(
                "trace_context must be a mapping of str to str, got entry "
                f"{shown(key)}: {type(value).__name__}"
            )
        check_text("trace_context key", key)
        check_text(f"trace_context[{shown(key)}]", value)


def check_job_fields(
    priority: object,
    tenant: object,
    max_attempts: object,
    idempotency_key: object,
    available_at: object,
    delay: object,
) -> None:
    """Raise ValidationError on the first problem among these job options, in
    :func:`validate_request`'s order; ``None`` is an option not given, with nothing to
    check (the engine resolves a kind's defaults, checked once per kind)."""
    if priority is not None:
        check_priority("priority", priority)
    if tenant is not None:
        check_tenant("tenant", tenant)
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    if idempotency_key is not None:
        _validate_idempotency_key(idempotency_key)
    if available_at is not None or delay is not None:
        _validate_schedule(available_at, delay)


def check_idempotency_policy(scope: object, conflict: object) -> None:
    """Raise ValidationError unless ``scope`` and ``conflict`` are an idempotency key's
    scope and conflict policy (:mod:`~skiplock.core._idempotency`)."""
    check_choice("idempotency_scope", scope, choices=IDEMPOTENCY_SCOPES)
    check_choice("idempotency_conflict", conflict, choices=IDEMPOTENCY_CONFLICTS)


def validate_request(
    request: EnqueueRequest,
    *,
    known_kinds: frozenset[str] | None = None,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
) -> None:
    """Raise ValidationError (or UnknownKindError) on the first problem in ``request``.

    A request that passes can be written by every store and read back from it (every
    column's bounds hold; README.md, "Enqueue limits").
    """
    check_known_kind(request.kind, known_kinds)
    check_job_fields(
        request.priority,
        request.tenant,
        request.max_attempts,
        request.idempotency_key,
        request.available_at,
        request.delay,
    )
    # A request takes no defaults: the two options it must set, even where None slipped in.
    check_priority("priority", request.priority)
    check_max_attempts(request.max_attempts)
    check_trace_context(request.trace_context)
    check_idempotency_policy(request.idempotency_scope, request.idempotency_conflict)
    check_concurrency(request.concurrency_key, request.concurrency_limit)
    if request.payload_json is None:
        encode_payload(request.payload, max_bytes=max_payload_bytes)
    elif len(request.payload_json.encode("utf-8")) > max_payload_bytes:
        raise ValidationError(f"payload too large: the limit is {max_payload_bytes} bytes")
