"""The REST API's field types and model bases: bounds, validators and parsing rules
shared by its request and response models (:mod:`skiplock.integrations.rest.models`)."""

from __future__ import annotations

import math
import re
import sys
from typing import Annotated

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    StringConstraints,
)

from skiplock.core.rules import (
    INT8_RANGE,
    KIND_RE,
    MAX_CONCURRENCY_KEY_LENGTH,
    MAX_IDEMPOTENCY_KEY_LENGTH,
    MAX_TENANT_LENGTH,
    PRIORITY_RANGE,
)
from skiplock.core.store import INT4_RANGE, MAX_DELAY

#: The most jobs one page may hold.
MAX_PAGE = 1000
#: The default page size.
DEFAULT_PAGE = 50
#: The longest duration a query parameter takes (seconds): ten years.
MAX_SECONDS = 10 * 365 * 86400


def _integral(value: object) -> object:
    """A float with no fraction as the int it is (JSON Schema's ``integer`` allows 5.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: An integer of a JSON body (parsed strictly: a string is no integer), with its bounds.
#: The bounds come before the validator: after it, pydantic cannot express them in JSON
#: Schema and writes ``ge``/``le`` where the OpenAPI document needs ``minimum``/``maximum``.
BodyPriority = Annotated[
    int, Field(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1]), BeforeValidator(_integral)
]
PositiveInt4 = Annotated[int, Field(ge=1, le=INT4_RANGE[1]), BeforeValidator(_integral)]
PositiveInt8 = Annotated[int, Field(ge=1, le=INT8_RANGE[1]), BeforeValidator(_integral)]


def _finite_numbers(value: JsonValue) -> JsonValue:
    """``value`` unless it holds a number beyond a double's range: valid JSON (``1e400``),
    but it would be read as infinity, which JSON cannot store."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(
                "a number is out of range: JSON numbers here must be within "
                f"±{sys.float_info.max!r} (a double)"
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


#: A payload: any JSON whose numbers are doubles (or integers of any size).
Payload = Annotated[JsonValue, AfterValidator(_finite_numbers)]
Kind = Annotated[str, StringConstraints(pattern=KIND_RE.pattern)]
#: Tenant names: no control characters (the engine's rule, Unicode category Cc).
Tenant = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_TENANT_LENGTH, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$"
    ),
]
Priority = Annotated[int, Field(ge=PRIORITY_RANGE[0], le=PRIORITY_RANGE[1])]
#: A job's keys: an idempotency key (no NUL), a concurrency key (no control characters).
IdempotencyKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_IDEMPOTENCY_KEY_LENGTH, pattern=r"^[^\x00]+$"),
]
ConcurrencyKey = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=MAX_CONCURRENCY_KEY_LENGTH, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$"
    ),
]
#: A job's delay in seconds.
Delay = Annotated[float, Field(ge=0, le=MAX_DELAY.total_seconds(), allow_inf_nan=False)]


def _digits(value: object) -> object:
    """A job id given as text (a path, a query) is digits only: Python's ``int()`` would
    read ``2_0`` as 20 and ``\u0661`` as 1."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("expected a job id (digits only)")
    return value


def _within_ids(value: str) -> str:
    if int(value) > INT8_RANGE[1]:
        raise ValueError("beyond the largest job id: pass a next_cursor back as it came")
    return value


_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}")


def _date_time(value: object) -> object:
    """A date-time given as text must be one (RFC 3339): pydantic would take ``0.5`` as
    seconds since 1970."""
    if isinstance(value, str) and not _DATE_TIME.match(value):
        raise ValueError("expected an RFC 3339 date-time with a UTC offset")
    return value


JobId = Annotated[int, BeforeValidator(_digits), Field(ge=1, le=INT8_RANGE[1])]
Limit = Annotated[int, Field(ge=1, le=MAX_PAGE, description="Jobs per page.")]
Cursor = Annotated[
    str,
    StringConstraints(pattern=r"^[0-9]{1,19}$"),
    AfterValidator(_within_ids),
    Field(description="The `next_cursor` of the previous page (opaque: pass it back as is)."),
]
#: A duration in seconds, at least a millisecond (a shorter one would round to zero).
Seconds = Annotated[float, Field(ge=0.001, le=MAX_SECONDS, allow_inf_nan=False)]
Time = Annotated[AwareDatetime, Field(description="RFC 3339 date-time with a UTC offset.")]
#: A date-time of a query (text, converted: so a number is refused here).
QueryTime = Annotated[Time, BeforeValidator(_date_time)]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")
