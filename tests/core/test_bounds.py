"""Column bounds at enqueue (issue 9): what validation accepts can be stored and read
back in any time zone; what it refuses is refused with a short message naming the field."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings

from skiplock.core import (
    MAX_AVAILABLE_AT,
    MIN_AVAILABLE_AT,
    EnqueueRequest,
    Job,
    JobState,
    ValidationError,
    encode_payload,
    validate_identifier,
)
from skiplock.core._options import check_available_at, validate_request
from skiplock.core._validation import (
    INT4_RANGE,
    MAX_DELAY,
    MAX_PAYLOAD_DEPTH,
    MAX_SHOWN_LENGTH,
    PRIORITY_RANGE,
    check_kind,
    counter_problem,
    shown,
)
from skiplock.engine._inputs import Enqueue
from skiplock.engine.enqueue._intake import build_request
from tests.hostile import MAX_MESSAGE_LENGTH, ZONES, Args, enqueue_args
from tests.jobs import make_job


def _build(args: Args) -> EnqueueRequest:
    item = Enqueue(args.kind, args.payload, **args.fields)
    return build_request(
        item,
        default_max_attempts=5,
        trace_context=None,
        known_kinds=None,
        max_payload_bytes=1024 * 1024,
    )


def _build_or_error(args: Args) -> EnqueueRequest | ValidationError:
    try:
        return _build(args)
    except ValidationError as exc:
        return exc


def _storable_text(value: str | None) -> bool:
    if value is None:
        return True
    value.encode("utf-8")  # raises on a lone surrogate
    return "\x00" not in value


@settings(max_examples=500, deadline=None)
@given(args=enqueue_args())
def test_accepted_requests_fit_every_column_and_read_back_in_any_zone(args: Args) -> None:
    request = _build_or_error(args)
    if isinstance(request, ValidationError):
        assert len(str(request)) <= MAX_MESSAGE_LENGTH, str(request)
        return
    low, high = PRIORITY_RANGE
    assert low <= request.priority <= high
    assert 1 <= request.max_attempts <= INT4_RANGE[1]
    assert _storable_text(request.kind)
    assert _storable_text(request.tenant)
    assert _storable_text(request.idempotency_key)
    assert request.payload_json is not None
    json.loads(request.payload_json)  # decodes (no recursion limit hit)
    if request.available_at is not None:
        assert request.available_at.utcoffset() == timedelta(0)
        for zone in ZONES:
            request.available_at.astimezone(ZoneInfo(zone))  # no OverflowError
    if request.delay is not None:
        for zone in ZONES:  # the store's now (the latest sane clock) plus the delay
            (datetime(2200, 1, 1, tzinfo=UTC) + request.delay).astimezone(ZoneInfo(zone))


def test_the_bounds_themselves_are_accepted() -> None:
    for when in (MIN_AVAILABLE_AT, MAX_AVAILABLE_AT):
        validate_request(EnqueueRequest("k", available_at=when))
    validate_request(EnqueueRequest("k", delay=MAX_DELAY, max_attempts=INT4_RANGE[1]))
    tz = timezone(timedelta(hours=23, minutes=59))
    assert check_available_at(MIN_AVAILABLE_AT.astimezone(tz)) == MIN_AVAILABLE_AT
    deepest: Any = []
    for _ in range(MAX_PAYLOAD_DEPTH - 1):
        deepest = [deepest]
    assert encode_payload(deepest).count("[") == MAX_PAYLOAD_DEPTH
    # Brackets inside strings are text, not nesting.
    encode_payload(["[" * 500, {"k": '\\"{' * 500}])


def test_long_values_are_not_echoed_whole() -> None:
    with pytest.raises(ValidationError) as info:
        check_kind("k" * 10_000)
    assert len(str(info.value)) < 2 * MAX_SHOWN_LENGTH + 100
    assert "10002 characters" in str(info.value)
    assert shown("short") == "'short'"


@pytest.mark.parametrize("name", ["information_schema", "pg_catalog", "pg_temp", "pg_x"])
def test_system_schema_names_are_not_identifiers_we_use(name: str) -> None:
    with pytest.raises(ValidationError, match="belong to PostgreSQL's system catalogs"):
        validate_identifier(name)


def test_available_at_is_normalised_to_utc_by_the_engine() -> None:
    odd = timezone(timedelta(hours=20, microseconds=7))
    request = _build(Args("k", None, {"available_at": datetime(2030, 1, 2, tzinfo=odd)}))
    assert request.available_at == datetime(2030, 1, 2, tzinfo=odd)
    assert request.available_at is not None
    assert request.available_at.tzinfo is UTC


def test_a_counter_at_the_integer_maximum_cannot_count_on() -> None:
    high = INT4_RANGE[1]

    def job(attempts: int, claims: int) -> Job:
        when = MIN_AVAILABLE_AT
        return make_job(
            id=1,
            state=JobState.RUNNING,
            available_at=when,
            created_at=when,
            attempts=attempts,
            max_attempts=1,
            claims=claims,
        )

    assert counter_problem(job(high - 1, high - 1)) is None
    assert counter_problem(job(high, 0)) == (
        "attempts",
        f"{high} is the column's maximum: no attempt can be counted",
    )
    assert counter_problem(job(0, high)) == (
        "claims",
        f"{high} is the column's maximum: no claim can be counted",
    )
