"""Input validation (X2): one case per error, exception type and message."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from skiplock.core import (
    EnqueueRequest,
    UnknownKindError,
    ValidationError,
    encode_payload,
    result_json,
    validate_identifier,
)
from skiplock.core._options import validate_request
from skiplock.core._validation import (
    IDENTIFIER_RE,
    KIND_RE,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_PAYLOAD_DEPTH,
    MAX_RESULT_BYTES,
    MAX_TENANT_LENGTH,
    encode_result,
)

# ---- identifiers ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["skiplock", "_x", "a1_b2", "a" * 63])
def test_validate_identifier_accepts(name: str) -> None:
    assert validate_identifier(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "1abc", "Skiplock", "a-b", "a b", "a;drop", "a" * 64, 'a"b', "abc\n", "ä"],
)
def test_validate_identifier_rejects(name: str) -> None:
    with pytest.raises(ValidationError, match="invalid identifier") as info:
        validate_identifier(name)
    assert IDENTIFIER_RE.pattern in str(info.value)


@pytest.mark.parametrize("name", [None, 1, b"abc"])
def test_validate_identifier_rejects_non_str(name: object) -> None:
    with pytest.raises(ValidationError, match="identifier must be a str"):
        validate_identifier(name)  # type: ignore[arg-type]


# ---- payloads ------------------------------------------------------------------------


def test_encode_payload_compact_and_ordered() -> None:
    payload = OrderedDict([("b", 1), ("a", [1, 2, {"z": None}])])
    assert encode_payload(payload) == '{"b":1,"a":[1,2,{"z":null}]}'


def test_encode_payload_round_trips_unicode() -> None:
    payload = {"name": "Zoë ✓", "n": 1.5, "ok": True}
    assert json.loads(encode_payload(payload)) == payload


@pytest.mark.parametrize(
    ("payload", "type_name"),
    [
        ({"when": datetime(2024, 1, 1)}, "datetime"),
        ({1, 2}, "set"),
        (b"bytes", "bytes"),
        (Decimal("1.5"), "Decimal"),
        ([object()], "object"),
    ],
)
def test_encode_payload_rejects_non_json_types(payload: object, type_name: str) -> None:
    with pytest.raises(ValidationError, match="not JSON-serialisable") as info:
        encode_payload(payload)
    assert repr(type_name) in str(info.value)


def test_encode_payload_rejects_bad_keys() -> None:
    with pytest.raises(ValidationError, match="not JSON-serialisable"):
        encode_payload({(1, 2): "tuple key"})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_encode_payload_rejects_nan_and_infinity(value: float) -> None:
    with pytest.raises(ValidationError, match="not valid JSON"):
        encode_payload({"x": value})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({1, 2}, "result is not JSON-serialisable: object of type 'set'"),
        ({"x": float("nan")}, "result is not valid JSON"),
        ({(1,): 2}, "result is not JSON-serialisable"),
        ("x" * 30, "result too large: 32 bytes encoded, the limit is 20 bytes"),
        ("\x00", "result is not valid JSON for storage: it contains a NUL character"),
    ],
)
def test_encode_result_applies_the_payload_rules_naming_the_result(
    value: object, problem: str
) -> None:
    with pytest.raises(ValidationError) as info:
        encode_result(value, max_bytes=20)
    assert str(info.value).startswith(problem)


def test_encode_result_and_the_stores_text() -> None:
    assert encode_result({"b": (1, 2), "a": None}) == '{"b":[1,2],"a":null}'
    assert result_json({"a": 1}, None) == '{"a":1}'
    assert result_json({"a": 1}, "cached") == "cached"
    assert result_json(None, None) is None
    # A store applies only jsonb's own limit: the engine enforced its configured one.
    assert result_json("x" * (MAX_RESULT_BYTES + 10), None) is not None


def test_encode_payload_rejects_circular() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValidationError, match="not valid JSON"):
        encode_payload(loop)


def test_encode_payload_rejects_too_deep() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValidationError, match="nested too deeply"):
        encode_payload(deep)


def test_encode_payload_rejects_nul_and_lone_surrogate() -> None:
    with pytest.raises(ValidationError, match="NUL character"):
        encode_payload({"s": "a\x00b"})
    with pytest.raises(ValidationError, match="lone surrogate"):
        encode_payload({"s": "\ud800"})


def test_encode_payload_escaped_backslash_before_u0000_is_fine() -> None:
    # The text "\u0000" (backslash, u, 0...) is not a NUL character.
    assert encode_payload("\\u0000") == '"\\\\u0000"'


def test_encode_payload_size_limit_counts_utf8_bytes() -> None:
    # "é" is 2 bytes in UTF-8: 5 chars + 2 quotes = 12 bytes.
    assert encode_payload("ééééé", max_bytes=12) == '"ééééé"'
    with pytest.raises(ValidationError, match=r"13 bytes encoded, the limit is 12 bytes"):
        encode_payload("éééééa", max_bytes=12)


def test_encode_payload_default_limit_one_mib() -> None:
    encode_payload("x" * (1024 * 1024 - 2))
    with pytest.raises(ValidationError, match="payload too large: 1048577 bytes"):
        encode_payload("x" * (1024 * 1024 - 1))


# ---- requests ------------------------------------------------------------------------

AWARE = datetime(2030, 1, 1, tzinfo=UTC)


def test_validate_request_accepts_full_request() -> None:
    request = EnqueueRequest(
        kind="email.send:v2-x_y",
        payload={"to": "a@example.com"},
        priority=-32768,
        tenant="acme",
        available_at=AWARE.astimezone(timezone(timedelta(hours=2))),
        max_attempts=1,
        idempotency_key="k" * MAX_IDEMPOTENCY_KEY_LENGTH,
        trace_context={"traceparent": "00-abc-def-01"},
    )
    validate_request(request, known_kinds=frozenset({"email.send:v2-x_y"}))
    validate_request(EnqueueRequest(kind="k", priority=32767, delay=timedelta(0)))
    validate_request(EnqueueRequest(kind="k", tenant="t" * MAX_TENANT_LENGTH))


#: Arrays nested one level deeper than a payload may be.
DEEP: Any = json.loads("[" * (MAX_PAYLOAD_DEPTH + 1) + "]" * (MAX_PAYLOAD_DEPTH + 1))

CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    # kind
    ({"kind": ""}, ValidationError, "invalid kind ''"),
    ({"kind": "1abc"}, ValidationError, "invalid kind '1abc'"),
    ({"kind": "a b"}, ValidationError, "invalid kind 'a b'"),
    ({"kind": "a/b"}, ValidationError, "invalid kind"),
    ({"kind": "a" * 201}, ValidationError, "invalid kind"),
    ({"kind": "abc\n"}, ValidationError, "invalid kind"),
    ({"kind": 5}, ValidationError, "kind must be a str, got int"),
    ({"kind": "other"}, UnknownKindError, "unknown kind 'other'"),
    # priority
    ({"priority": 32768}, ValidationError, "priority must be within [-32768, 32767], got 32768"),
    ({"priority": -32769}, ValidationError, "got -32769"),
    ({"priority": 2**40}, ValidationError, "priority must be within"),
    ({"priority": True}, ValidationError, "priority must be an int, got bool"),
    ({"priority": 1.0}, ValidationError, "priority must be an int, got float"),
    ({"priority": "1"}, ValidationError, "priority must be an int, got str"),
    # tenant
    ({"tenant": ""}, ValidationError, "tenant must not be empty"),
    ({"tenant": "t" * 201}, ValidationError, "tenant too long: 201 characters, at most 200"),
    ({"tenant": "a\nb"}, ValidationError, "contains control characters"),
    ({"tenant": "a\x00b"}, ValidationError, "tenant must not contain NUL"),
    ({"tenant": "a\ud800"}, ValidationError, "tenant is not valid text: it contains a lone"),
    ({"tenant": "a\x7fb"}, ValidationError, "contains control characters"),
    ({"tenant": 7}, ValidationError, "tenant must be a str or None, got int"),
    # max_attempts
    ({"max_attempts": 0}, ValidationError, "max_attempts must be within [1, 2147483647], got 0"),
    ({"max_attempts": -3}, ValidationError, "got -3"),
    ({"max_attempts": 2**31}, ValidationError, "max_attempts must be within [1, 2147483647]"),
    ({"max_attempts": False}, ValidationError, "max_attempts must be an int, got bool"),
    ({"max_attempts": 2.0}, ValidationError, "max_attempts must be an int, got float"),
    # idempotency key
    ({"idempotency_key": ""}, ValidationError, "idempotency_key must not be empty"),
    (
        {"idempotency_key": "k" * 256},
        ValidationError,
        "idempotency_key too long: 256 characters, at most 255",
    ),
    ({"idempotency_key": 12}, ValidationError, "idempotency_key must be a str or None"),
    ({"idempotency_key": "a\x00"}, ValidationError, "must not contain NUL"),
    ({"idempotency_key": "\udfff"}, ValidationError, "idempotency_key is not valid text"),
    # schedule
    (
        {"available_at": datetime(2030, 1, 1)},
        ValidationError,
        "available_at must be timezone-aware",
    ),
    ({"available_at": "2030-01-01"}, ValidationError, "available_at must be a datetime"),
    (
        {"available_at": AWARE, "delay": timedelta(seconds=1)},
        ValidationError,
        "available_at and delay are mutually exclusive",
    ),
    ({"delay": timedelta(seconds=-1)}, ValidationError, "delay out of range: -1 day"),
    ({"delay": timedelta.max}, ValidationError, "must be within [0, 36500 days]"),
    ({"delay": timedelta(seconds=1e13)}, ValidationError, "delay out of range"),
    (
        {"available_at": datetime.min.replace(tzinfo=timezone(timedelta(hours=1)))},
        ValidationError,
        "available_at out of range: 0001-01-01T00:00:00+01:00, must be within "
        "[0001-01-03T00:00:00+00:00, 9999-12-29T00:00:00+00:00]",
    ),
    ({"available_at": datetime(1, 1, 1, tzinfo=UTC)}, ValidationError, "out of range"),
    ({"available_at": datetime(1, 1, 2, 23, 59, tzinfo=UTC)}, ValidationError, "out of range"),
    ({"available_at": datetime(9999, 12, 29, 0, 0, 1, tzinfo=UTC)}, ValidationError, "range"),
    ({"available_at": datetime.max.replace(tzinfo=UTC)}, ValidationError, "out of range"),
    (
        {"available_at": datetime.max.replace(tzinfo=timezone(-timedelta(hours=1)))},
        ValidationError,
        "out of range",
    ),
    ({"delay": 5}, ValidationError, "delay must be a timedelta, got int"),
    # trace context
    ({"trace_context": "traceparent"}, ValidationError, "trace_context must be a mapping"),
    ({"trace_context": {"a": 1}}, ValidationError, "trace_context must be a mapping of str"),
    ({"trace_context": {1: "a"}}, ValidationError, "trace_context must be a mapping of str"),
    ({"trace_context": {"a": "\x00"}}, ValidationError, "trace_context['a'] must not contain"),
    ({"trace_context": {"\ud800": "a"}}, ValidationError, "trace_context key is not valid text"),
    # payload
    ({"payload": {"x": {1, 2}}}, ValidationError, "not JSON-serialisable: object of type 'set'"),
    ({"payload": float("nan")}, ValidationError, "not valid JSON"),
    ({"payload": "x" * 100}, ValidationError, "payload too large: 102 bytes encoded"),
    ({"payload": DEEP}, ValidationError, "payload nested too deeply: more than 100"),
]


@pytest.mark.parametrize(("fields", "exc_type", "fragment"), CASES)
def test_validate_request_rejects(
    fields: dict[str, Any], exc_type: type[Exception], fragment: str
) -> None:
    request = EnqueueRequest(**{"kind": "known", **fields})
    with pytest.raises(exc_type, match=re.escape(fragment)) as info:
        validate_request(request, known_kinds=frozenset({"known"}), max_payload_bytes=50)
    assert type(info.value) is exc_type


def test_validate_request_kind_message_shows_pattern() -> None:
    with pytest.raises(ValidationError) as info:
        validate_request(EnqueueRequest(kind="no spaces"))
    assert KIND_RE.pattern in str(info.value)


def test_validate_request_unknown_kind_is_validation_error() -> None:
    with pytest.raises(ValidationError):
        validate_request(EnqueueRequest(kind="x"), known_kinds=frozenset())


def test_validate_request_any_kind_without_known_kinds() -> None:
    validate_request(EnqueueRequest(kind="whatever"))


def test_validate_request_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="priority"):
        validate_request(EnqueueRequest(kind="k", priority=10**6))
