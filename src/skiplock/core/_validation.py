"""Input validation (X2): everything is checked before anything is written."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from ._bucket import RateLimit
from ._errors import UnknownKindError, ValidationError

if TYPE_CHECKING:
    from ._types import EnqueueRequest

#: PostgreSQL identifiers we create or accept (schema names): lower case, <= 63 bytes.
IDENTIFIER_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Job kinds: dotted/dashed names, <= 200 chars.
KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")
MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_TENANT_LENGTH = 200
MAX_IDEMPOTENCY_KEY_LENGTH = 255
PRIORITY_RANGE = (-32768, 32767)

# A JSON text escape for NUL (an odd number of backslashes before "u0000"): PostgreSQL's
# jsonb cannot store it, so it is rejected here with a clear message instead.
_JSON_NUL_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


# ---- the value checks shared by policies, Settings and the processor registry ------------
# Each takes the setting's name for its message, raises ValidationError, and returns the
# value it accepted.


def check_int(name: str, value: object, *, minimum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) >= ``minimum``, else raise."""
    if not _is_int(value):
        raise ValidationError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValidationError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_number(
    name: str, value: object, *, minimum: float, maximum: float | None = None
) -> float:
    """Return ``value`` if it is a finite number within ``[minimum, maximum]``, else raise."""
    if (
        _is_real(value)
        and math.isfinite(value)
        and minimum <= value
        and (maximum is None or value <= maximum)
    ):
        return value
    bound = f">= {minimum}" if maximum is None else f"within [{minimum}, {maximum}]"
    raise ValidationError(f"{name} must be a number {bound}, got {value!r}")


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be a bool, got {value!r}")
    return value


def to_duration(value: timedelta | float) -> timedelta:
    """Seconds (int or float) or a timedelta, as a timedelta: the one stored duration type.

    Anything else is returned unchanged for :func:`check_duration` to reject by name.
    """
    if _is_real(value) and math.isfinite(value):
        try:
            return timedelta(seconds=value)
        except OverflowError:
            pass
    return value  # type: ignore[return-value]


def optional_duration(value: timedelta | float | None) -> timedelta | None:
    """:func:`to_duration`, keeping ``None``."""
    return None if value is None else to_duration(value)


def check_duration(name: str, value: object, *, allow_zero: bool = False) -> timedelta:
    """Return ``value`` if it is a timedelta > 0 (>= 0 with ``allow_zero``), else raise."""
    if not isinstance(value, timedelta):
        raise ValidationError(
            f"{name} must be a timedelta or a finite number of seconds, got {value!r}"
        )
    if value < timedelta(0) or (value == timedelta(0) and not allow_zero):
        raise ValidationError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def to_rate_limit(value: RateLimit | tuple[float, int] | Mapping[str, Any]) -> RateLimit:
    """A RateLimit from itself, ``(rps, burst)`` or ``{"rps": ..., "burst": ...}``.

    Other values are returned unchanged for :func:`check_rate_limit` to reject by name.
    """
    checked: object = value
    if isinstance(checked, tuple) and len(checked) == 2:
        return RateLimit(rps=checked[0], burst=checked[1])
    if isinstance(checked, Mapping) and set(checked) == {"rps", "burst"}:
        return RateLimit(rps=checked["rps"], burst=checked["burst"])
    return value  # type: ignore[return-value]


def optional_rate_limit(
    value: RateLimit | tuple[float, int] | Mapping[str, Any] | None,
) -> RateLimit | None:
    """:func:`to_rate_limit`, keeping ``None``."""
    return None if value is None else to_rate_limit(value)


def check_rate_limit(name: str, value: object) -> RateLimit:
    """Return ``value`` if it is a RateLimit, else raise."""
    if not isinstance(value, RateLimit):
        raise ValidationError(f"{name} must be a RateLimit or (rps, burst), got {value!r}")
    return value


def check_kind(kind: object) -> str:
    """Return ``kind`` if it is a valid kind name, else raise ValidationError."""
    if not isinstance(kind, str):
        raise ValidationError(f"kind must be a str, got {type(kind).__name__}")
    if KIND_RE.fullmatch(kind) is None:
        raise ValidationError(f"invalid kind {kind!r}: must match {KIND_RE.pattern}")
    return kind


def _has_control_chars(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" for c in text)


def validate_identifier(name: str) -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise ValidationError."""
    if not isinstance(name, str):
        raise ValidationError(f"identifier must be a str, got {type(name).__name__}")
    # fullmatch: "$" alone would also accept a trailing newline.
    if IDENTIFIER_RE.fullmatch(name) is None:
        raise ValidationError(
            f"invalid identifier {name!r}: must match {IDENTIFIER_RE.pattern} "
            "(lower case letters, digits and '_', at most 63 characters)"
        )
    return name


def _reject_type(value: object) -> NoReturn:
    raise ValidationError(
        f"payload is not JSON-serialisable: object of type {type(value).__name__!r}"
    )


def encode_payload(payload: object, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Serialise to compact JSON; raise ValidationError if not JSON or too large.

    Key order is kept; NaN/Infinity, NUL characters and lone surrogates are rejected
    because PostgreSQL's jsonb cannot store them. The size limit counts UTF-8 bytes.
    """
    try:
        text = json.dumps(
            payload,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            sort_keys=False,
            default=_reject_type,
        )
    except ValidationError:
        raise
    except TypeError as exc:  # e.g. a dict key of an unsupported type
        raise ValidationError(f"payload is not JSON-serialisable: {exc}") from None
    except ValueError as exc:  # NaN/Infinity, circular reference
        raise ValidationError(f"payload is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValidationError("payload is not valid JSON: nested too deeply") from None
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            "payload is not valid JSON: it contains a lone surrogate character"
        ) from None
    if _JSON_NUL_RE.search(text):
        raise ValidationError("payload is not valid JSON for storage: it contains a NUL character")
    if size > max_bytes:
        raise ValidationError(
            f"payload too large: {size} bytes encoded, the limit is {max_bytes} bytes"
        )
    return text


def _validate_kind(kind: object, known_kinds: frozenset[str] | None) -> None:
    check_kind(kind)
    if known_kinds is not None and kind not in known_kinds:
        raise UnknownKindError(f"unknown kind {kind!r}: no processor is registered for it")


def _validate_priority(priority: object) -> None:
    low, high = PRIORITY_RANGE
    if not low <= check_int("priority", priority) <= high:
        raise ValidationError(f"priority {priority} out of range [{low}, {high}]")


def _validate_tenant(tenant: object) -> None:
    if tenant is None:
        return
    if not isinstance(tenant, str):
        raise ValidationError(f"tenant must be a str or None, got {type(tenant).__name__}")
    if not tenant:
        raise ValidationError("tenant must not be empty (use None for no tenant)")
    if len(tenant) > MAX_TENANT_LENGTH:
        raise ValidationError(
            f"tenant too long: {len(tenant)} characters, at most {MAX_TENANT_LENGTH}"
        )
    if _has_control_chars(tenant):
        raise ValidationError(f"tenant {tenant!r} contains control characters")


def _validate_idempotency_key(key: object) -> None:
    if key is None:
        return
    if not isinstance(key, str):
        raise ValidationError(f"idempotency_key must be a str or None, got {type(key).__name__}")
    if not key:
        raise ValidationError("idempotency_key must not be empty (use None for no key)")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise ValidationError(
            f"idempotency_key too long: {len(key)} characters, at most {MAX_IDEMPOTENCY_KEY_LENGTH}"
        )
    if "\x00" in key:
        raise ValidationError("idempotency_key must not contain NUL characters")


def _validate_schedule(available_at: object, delay: object) -> None:
    if available_at is not None and delay is not None:
        raise ValidationError("available_at and delay are mutually exclusive; set at most one")
    if available_at is not None:
        if not isinstance(available_at, datetime):
            raise ValidationError(
                f"available_at must be a datetime, got {type(available_at).__name__}"
            )
        if available_at.utcoffset() is None:
            raise ValidationError(
                f"available_at must be timezone-aware, got naive {available_at.isoformat()}"
            )
    if delay is not None:
        if not isinstance(delay, timedelta):
            raise ValidationError(f"delay must be a timedelta, got {type(delay).__name__}")
        if delay < timedelta(0):
            raise ValidationError(f"delay must be >= 0, got {delay}")


def _validate_trace_context(trace_context: object) -> None:
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
                f"{key!r}: {type(value).__name__}"
            )


def validate_request(
    request: EnqueueRequest,
    *,
    known_kinds: frozenset[str] | None = None,
    max_payload_bytes: int = MAX_PAYLOAD_BYTES,
) -> None:
    """Raise ValidationError (or UnknownKindError) on the first problem in ``request``."""
    _validate_kind(request.kind, known_kinds)
    _validate_priority(request.priority)
    _validate_tenant(request.tenant)
    check_int("max_attempts", request.max_attempts, minimum=1)
    _validate_idempotency_key(request.idempotency_key)
    _validate_schedule(request.available_at, request.delay)
    _validate_trace_context(request.trace_context)
    if request.payload_json is None:
        encode_payload(request.payload, max_bytes=max_payload_bytes)
    elif len(request.payload_json.encode("utf-8")) > max_payload_bytes:
        raise ValidationError(f"payload too large: the limit is {max_payload_bytes} bytes")
