"""The rules of job search (docs/search.md, "The search filters"): payload containment,
error text across attempts and idempotency keys, and the ``PATH=VALUE`` syntax the CLI,
the REST API and the dashboard share. Every store applies the same rules: PostgreSQL's
``payload @> filter``, ``strpos(lower(...))`` and key equality; the memory store these
functions."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from ._errors import ValidationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ._types import Job

#: The longest search text (an error text, an idempotency key, a ``PATH=VALUE`` term).
MAX_SEARCH_TEXT = 200
#: The largest payload filter, as compact JSON.
MAX_PAYLOAD_FILTER = 4096


def _reject_constant(name: str) -> float:
    # json.loads takes NaN and Infinity, which JSON (and jsonb) does not.
    raise ValueError(name)


def json_value(text: str) -> Any:
    """``text`` as a JSON value when it is one (``42``, ``true``, ``null``, ``"42"``,
    ``[1]``), else as the string itself (``bob``)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return text


def payload_filter(terms: Iterable[str]) -> dict[str, Any]:
    """The payload filter of ``PATH=VALUE`` terms, merged: ``user_id=42`` is
    ``{"user_id": 42}``, ``user.name=bob`` is ``{"user": {"name": "bob"}}`` (a dotted
    path nests; a key holding a dot takes the JSON form). A term that is a JSON object
    (``{"user_id": 42}``) is taken as it is. VALUE is a JSON value where it parses as
    one, else a string: ``id=42`` finds the number, ``id="42"`` the string.
    ValidationError for a term without ``=`` or with an empty key."""
    merged: dict[str, Any] = {}
    for term in terms:
        text = term.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text, parse_constant=_reject_constant)
            except ValueError:
                raise ValidationError(f"payload: not a JSON object: {text[:40]!r}") from None
            if not isinstance(value, dict):
                raise ValidationError(f"payload: not a JSON object: {text[:40]!r}")
            _merge(merged, value)
            continue
        path, sep, raw = text.partition("=")
        keys = path.strip().split(".")
        if not sep or not all(keys):
            raise ValidationError(f"payload: expected PATH=VALUE, got {text[:40]!r}")
        nested: Any = json_value(raw.strip())
        for key in reversed(keys):
            nested = {key: nested}
        _merge(merged, nested)
    return merged


def _merge(into: dict[str, Any], more: Mapping[str, Any]) -> None:
    """``more`` merged into ``into``: objects under one key merge, else the last wins."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def check_payload_filter(value: object) -> dict[str, Any] | None:
    """``value`` as a payload filter: None, or a JSON object (ValidationError
    otherwise, or when it encodes to more than ``MAX_PAYLOAD_FILTER`` characters)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValidationError("payload: expected a JSON object (a dict)")
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"payload: not JSON: {exc}") from None
    if len(text) > MAX_PAYLOAD_FILTER:
        raise ValidationError(f"payload: more than {MAX_PAYLOAD_FILTER} characters as JSON")
    return value


def check_search_text(name: str, value: object) -> str | None:
    """``value`` as a search text: None, or a non-empty string of at most
    ``MAX_SEARCH_TEXT`` characters without NUL (ValidationError otherwise)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_SEARCH_TEXT:
        raise ValidationError(f"{name}: expected 1 to {MAX_SEARCH_TEXT} characters")
    if "\x00" in value:
        raise ValidationError(f"{name}: contains NUL")
    return value


def _same_scalar(doc: Any, pattern: Any) -> bool:
    # JSON distinguishes true from 1 (Python does not); 1 and 1.0 are one number.
    if isinstance(doc, bool) or isinstance(pattern, bool):
        return isinstance(doc, bool) and isinstance(pattern, bool) and doc is pattern
    if isinstance(doc, int | float) and isinstance(pattern, int | float):
        return not (isinstance(doc, float) and math.isnan(doc)) and doc == pattern
    return type(doc) is type(pattern) and doc == pattern


def contains(doc: Any, pattern: Any) -> bool:
    """Whether the JSON value ``doc`` contains ``pattern``, as PostgreSQL's jsonb ``@>``:
    an object contains an object whose every key it holds with a contained value; an array
    contains an array whose every element some element of it contains; scalars are
    equal."""
    if isinstance(pattern, dict):
        return isinstance(doc, dict) and all(
            key in doc and contains(doc[key], value) for key, value in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(doc, list) and all(any(contains(d, p) for d in doc) for p in pattern)
    if isinstance(doc, dict | list):
        return False
    return _same_scalar(doc, pattern)


def error_matches(job: Job, text: str) -> bool:
    """Whether ``text`` is in the job's last error or any recorded attempt's error,
    compared in lower case (PostgreSQL's ``lower``)."""
    needle = text.lower()
    if needle in (job.last_error or "").lower():
        return True
    return any(needle in entry.error.lower() for entry in job.errors)


def key_matches(job: Job, key: str) -> bool:
    """Whether the job's idempotency key (global or tenant-scoped) is ``key``."""
    return job.idempotency_key == key
