"""Input validation (X2): everything is checked before anything is written."""

from __future__ import annotations

import difflib
import itertools
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeGuard

from ._bucket import RateLimit
from ._errors import ValidationError

if TYPE_CHECKING:
    from ._types import Job

#: PostgreSQL identifiers we create or accept (schema names): lower case, <= 63 bytes.
IDENTIFIER_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
#: Job kinds: dotted/dashed names, <= 200 chars.
KIND_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,199}$")
MAX_PAYLOAD_BYTES = 1024 * 1024
#: The default largest stored result of a processor (``Settings.max_result_bytes``).
MAX_RESULT_BYTES = 1024 * 1024
#: PostgreSQL's own limit of a jsonb value (stores mirror it; the engine's are lower).
JSONB_MAX_BYTES = 255 * 1024 * 1024
MAX_TENANT_LENGTH = 200
#: Longest actor name the audit trail records (J10).
MAX_ACTOR_LENGTH = 255
MAX_IDEMPOTENCY_KEY_LENGTH = 255
#: Longest concurrency key (``concurrency_key`` of an enqueue).
MAX_CONCURRENCY_KEY_LENGTH = 255
#: PostgreSQL ``smallint``, the ``priority`` column.
PRIORITY_RANGE = (-32768, 32767)
#: PostgreSQL ``integer`` (``max_attempts``, ``attempts``, ``claims``).
INT4_RANGE = (-(2**31), 2**31 - 1)
#: PostgreSQL ``bigint`` (job ids).
INT8_RANGE = (-(2**63), 2**63 - 1)
#: The earliest and latest due time (``available_at``) a job may have. PostgreSQL's
#: ``timestamptz`` stores far more than Python's ``datetime`` (years 1 to 9999) can read;
#: two days inside Python's range keep every stored instant readable in any session
#: time zone (no UTC offset reaches a day), so a job can always be read back. A stored
#: timestamp outside them (written around enqueue, by plain SQL) makes its row undecodable.
MIN_AVAILABLE_AT = datetime(1, 1, 3, tzinfo=UTC)
MAX_AVAILABLE_AT = datetime(9999, 12, 29, tzinfo=UTC)
#: The longest ``delay``: about a century, so the store's now + delay stays far inside
#: :data:`MAX_AVAILABLE_AT` (and below every timer's limit).
MAX_DELAY = timedelta(days=36_500)
#: The deepest nesting of arrays and objects in a payload: decoding (Python's ``json``,
#: typed converters) recurses once per level and must stay well inside the recursion
#: limit wherever a worker reads it back.
MAX_PAYLOAD_DEPTH = 100
#: How much of a rejected value an error message shows.
MAX_SHOWN_LENGTH = 80
#: How many known kinds an unknown-kind message names before "and N more".
MAX_KINDS_SHOWN = 20

# A JSON text escape for NUL (an odd number of backslashes before "u0000"): PostgreSQL's
# jsonb cannot store it, so it is rejected here with a clear message instead.
_JSON_NUL_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A JSON string literal (escapes included), and the brackets left once they are removed.
_JSON_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKETS_RE = re.compile(r"[\[\]{}]")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut to :data:`MAX_SHOWN_LENGTH` characters."""
    text = repr(value)
    if len(text) <= MAX_SHOWN_LENGTH:
        return text
    return f"{text[: MAX_SHOWN_LENGTH - 3]}... ({len(text)} characters)"


# ---- the value checks shared by policies, Settings and the processor registry ------------
# Each takes the setting's name for its message, raises ValidationError, and returns the
# value it accepted.


def check_int(
    name: str, value: object, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` if it is an int (not a bool) within ``[minimum, maximum]``, else raise."""
    if not _is_int(value):
        raise ValidationError(f"{name} must be an int, got {type(value).__name__}")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        if maximum is None:
            bound = f">= {minimum}"
        elif minimum is None:
            bound = f"<= {maximum}"
        else:
            bound = f"within [{minimum}, {maximum}]"
        raise ValidationError(f"{name} must be {bound}, got {shown(value)}")
    return value


def check_job_id(name: str, value: object) -> int:
    """Return ``value`` if it can name a job (an int within PostgreSQL's ``bigint``)."""
    low, high = INT8_RANGE
    return check_int(name, value, minimum=low, maximum=high)


def check_text(name: str, value: object, *, max_length: int | None = None) -> str:
    """Return ``value`` if it is a str PostgreSQL's ``text`` can store, else raise.

    That is: encodable as UTF-8 (no lone surrogates), no NUL character, and at most
    ``max_length`` characters when given.
    """
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be a str, got {type(value).__name__}")
    if max_length is not None and len(value) > max_length:
        raise ValidationError(f"{name} too long: {len(value)} characters, at most {max_length}")
    if "\x00" in value:
        raise ValidationError(f"{name} must not contain NUL characters, got {shown(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(
                f"{name} is not valid text: it contains a lone surrogate character, "
                f"got {shown(value)}"
            ) from None
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
    raise ValidationError(f"{name} must be a number {bound}, got {shown(value)}")


def check_choice(name: str, value: object, *, choices: Iterable[str]) -> str:
    """Return ``value`` if it is one of the str ``choices``, else raise."""
    options = tuple(choices)
    if not isinstance(value, str) or value not in options:
        listed = ", ".join(repr(option) for option in options)
        raise ValidationError(f"{name} must be one of {listed}, got {shown(value)}")
    return value


def check_bool(name: str, value: object) -> bool:
    """Return ``value`` if it is a bool, else raise."""
    if not isinstance(value, bool):
        raise ValidationError(f"{name} must be a bool, got {shown(value)}")
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
            f"{name} must be a timedelta or a finite number of seconds, got {shown(value)}"
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
        raise ValidationError(f"{name} must be a RateLimit or (rps, burst), got {shown(value)}")
    return value


def check_kind(kind: object) -> str:
    """Return ``kind`` if it is a valid kind name, else raise ValidationError."""
    if not isinstance(kind, str):
        raise ValidationError(f"kind must be a str, got {type(kind).__name__}")
    if KIND_RE.fullmatch(kind) is None:
        raise ValidationError(f"invalid kind {shown(kind)}: must match {KIND_RE.pattern}")
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
            f"invalid identifier {shown(name)}: must match {IDENTIFIER_RE.pattern} "
            "(lower case letters, digits and '_', at most 63 characters)"
        )
    if name.startswith("pg_") or name == "information_schema":
        raise ValidationError(
            f"invalid identifier {name!r}: names starting with 'pg_' and "
            "'information_schema' belong to PostgreSQL's system catalogs"
        )
    return name


def _rejecter(what: str) -> Callable[[object], NoReturn]:
    def reject(value: object) -> NoReturn:
        raise ValidationError(
            f"{what} is not JSON-serialisable: object of type {type(value).__name__!r}"
        )

    return reject


def _json_encoder(what: str) -> Callable[[object], str]:
    """Compact JSON text of a value, as ``json.dumps`` with our options makes it (key
    order kept, NaN and Infinity refused; ``default`` is called for a value it cannot
    encode).

    ``json.dumps`` with options builds an encoder per call and runs its one-shot C
    encoder through Python wrappers, which costs as much as encoding a small payload:
    this builds the options once and calls the same C encoder directly (with new
    circular-reference markers each call), or the pure-Python encoder without it.
    """
    default = _rejecter(what)
    encoder = json.JSONEncoder(
        separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=default
    )
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator (some other Python implementation)
        return encoder.encode
    strings = json.encoder.encode_basestring  # what ensure_ascii=False encodes text with

    def encode(value: object) -> str:
        return "".join(make({}, default, strings, None, ":", ",", False, False, False)(value, 0))

    return encode


_ENCODERS = {what: _json_encoder(what) for what in ("payload", "result")}


def _json_depth(text: str) -> int:
    """How deep arrays and objects nest in the JSON ``text`` (scanned: see the caller)."""
    brackets = _JSON_BRACKETS_RE.findall(_JSON_STRING_RE.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def encode_payload(payload: object, *, max_bytes: int = MAX_PAYLOAD_BYTES) -> str:
    """Serialise to compact JSON; raise ValidationError if not JSON or too large.

    Key order is kept; NaN/Infinity, NUL characters and lone surrogates are rejected
    because PostgreSQL's jsonb cannot store them, and nesting deeper than
    :data:`MAX_PAYLOAD_DEPTH` because it could not be decoded again. The size limit
    counts UTF-8 bytes.
    """
    return _encode_json(payload, "payload", max_bytes)


def encode_result(result: object, *, max_bytes: int = MAX_RESULT_BYTES) -> str:
    """A processor's return value as compact JSON, by the rules of
    :func:`encode_payload` (the same JSON is storable, the same errors name ``result``);
    ``max_bytes`` is ``Settings.max_result_bytes`` (X5)."""
    return _encode_json(result, "result", max_bytes)


def result_json(result: object, result_json: str | None) -> str | None:
    """The JSON text a store writes for a ``Succeeded`` outcome's result: its
    ``result_json`` if given, else ``result`` encoded (jsonb's own size limit only; the
    engine enforced its configured one), None for no result."""
    if result_json is not None:
        return result_json
    if result is None:
        return None
    return encode_result(result, max_bytes=JSONB_MAX_BYTES)


def _encode_json(value: object, what: str, max_bytes: int) -> str:
    try:
        text = _ENCODERS[what](value)
    except ValidationError:
        raise
    except TypeError as exc:  # e.g. a dict key of an unsupported type
        raise ValidationError(f"{what} is not JSON-serialisable: {exc}") from None
    except ValueError as exc:  # NaN/Infinity, circular reference
        raise ValidationError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValidationError(f"{what} is not valid JSON: nested too deeply") from None
    try:
        # ASCII text (the common case) is as long in UTF-8 bytes: no copy to count them.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValidationError(
            f"{what} is not valid JSON: it contains a lone surrogate character"
        ) from None
    # The plain substring test first: the regex only decides about the text that has it.
    if "\\u0000" in text and _JSON_NUL_RE.search(text):
        raise ValidationError(f"{what} is not valid JSON for storage: it contains a NUL character")
    # It cannot nest deeper than it opens (the common case: no scan).
    opened = text.count("[") + text.count("{")
    if opened > MAX_PAYLOAD_DEPTH and _json_depth(text) > MAX_PAYLOAD_DEPTH:
        raise ValidationError(
            f"{what} nested too deeply: more than {MAX_PAYLOAD_DEPTH} levels of arrays and objects"
        )
    if size > max_bytes:
        raise ValidationError(
            f"{what} too large: {size} bytes encoded, the limit is {max_bytes} bytes"
        )
    return text


def unknown_kind_message(kind: str, known_kinds: Iterable[str], advice: str = "") -> str:
    """Why ``kind`` is unknown, naming the known kinds (at most :data:`MAX_KINDS_SHOWN`),
    then ``advice`` (what to do), then the closest known kind ("did you mean"), if one is
    close. The one wording of every refusal of an unknown kind: enqueue's and the
    run-time controls' (pause, limits)."""
    names = sorted(known_kinds)
    listed = ", ".join(repr(name) for name in names[:MAX_KINDS_SHOWN]) or "none"
    if len(names) > MAX_KINDS_SHOWN:
        listed += f" and {len(names) - MAX_KINDS_SHOWN} more"
    message = (
        f"unknown kind {shown(kind)}: no processor or declaration for it here "
        f"(known kinds: {listed})"
    )
    if advice:
        message += f"; {advice}"
    close = difflib.get_close_matches(kind, names, n=1)
    return f"{message}. Did you mean {close[0]!r}?" if close else message


def check_tenant(name: str, tenant: object) -> str:
    """Return ``tenant`` if it is a tenant name: non-empty text of at most
    :data:`MAX_TENANT_LENGTH` characters without control characters."""
    if not isinstance(tenant, str):
        raise ValidationError(f"{name} must be a str or None, got {type(tenant).__name__}")
    if not tenant:
        raise ValidationError(f"{name} must not be empty (use None for no tenant)")
    check_text(name, tenant, max_length=MAX_TENANT_LENGTH)
    if _has_control_chars(tenant):
        raise ValidationError(f"{name} {shown(tenant)} contains control characters")
    return tenant


def check_actor(name: str, actor: object) -> str:
    """Return ``actor`` if it names who made a change for the audit trail (J10):
    non-empty text of at most :data:`MAX_ACTOR_LENGTH` characters without control
    characters."""
    if not isinstance(actor, str):
        raise ValidationError(f"{name} must be a str or None, got {type(actor).__name__}")
    if not actor.strip():
        raise ValidationError(f"{name} must not be blank (use None for no actor)")
    check_text(name, actor, max_length=MAX_ACTOR_LENGTH)
    if _has_control_chars(actor):
        raise ValidationError(f"{name} {shown(actor)} contains control characters")
    return actor


def counter_problem(job: Job) -> tuple[str, str] | None:
    """The counter of a claimed ``job`` that cannot count on, as (column, problem), or None.

    ``attempts`` and ``claims`` are PostgreSQL ``integer`` columns: at their maximum no
    further attempt or claim can be counted (a claim saturates instead of failing), so
    such a job must not run; its claim moves it to ``dead`` like an undecodable row.
    """
    high = INT4_RANGE[1]
    if job.attempts >= high:
        return "attempts", f"{job.attempts} is the column's maximum: no attempt can be counted"
    if job.claims >= high:
        return "claims", f"{job.claims} is the column's maximum: no claim can be counted"
    return None
