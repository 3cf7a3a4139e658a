"""The framework-neutral request and response of the REST layer, and its JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

#: The media type of every successful response.
JSON_TYPE = "application/json"
#: The media type of an error (RFC 9457 problem details).
PROBLEM_TYPE = "application/problem+json"

_EMPTY: Mapping[str, Any] = MappingProxyType({})
#: Every answer of the API holds data about jobs (or says there is none): no cache, no
#: proxy, keeps it.
NO_STORE: Mapping[str, str] = MappingProxyType({"Cache-Control": "no-store"})


def _lower_keys(headers: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType({name.lower(): value for name, value in headers.items()})


def _frozen(mapping: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(mapping))


def _frozen_query(query: Mapping[str, Any]) -> Mapping[str, tuple[str, ...]]:
    return MappingProxyType(
        {
            name: (values,) if isinstance(values, str) else tuple(values)
            for name, values in query.items()
        }
    )


@attrs.frozen
class Request:
    """An HTTP request as the REST layer sees it, whatever the framework.

    The bindings build it; an authorization hook receives it. ``path`` is the full path
    the client asked for (mount point included), ``query`` every value of each query
    parameter, ``headers`` the header names in lower case (repeated headers joined with
    ``", "``), ``path_params`` the route's parameters as text. ``native`` is the
    framework's own request object (Starlette's ``Request``, Flask's ``request``) for a
    hook that needs more, e.g. the user a session middleware put on it.
    """

    method: str
    path: str
    query: Mapping[str, tuple[str, ...]] = attrs.field(default=_EMPTY, converter=_frozen_query)
    headers: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_lower_keys)
    body: bytes = b""
    path_params: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_frozen)
    native: Any = attrs.field(default=None, eq=False, repr=False)
    scheme: str = "http"

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return self.headers.get(name.lower())

    @property
    def bearer_token(self) -> str | None:
        """The token of an ``Authorization: Bearer <token>`` header, or None."""
        scheme, _, token = (self.header("authorization") or "").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return None
        return token

    @property
    def media_type(self) -> str | None:
        """The media type of the body (``Content-Type`` without parameters, lower
        case), or None."""
        value = self.header("content-type")
        if value is None:
            return None
        return value.partition(";")[0].strip().lower() or None


@attrs.frozen
class Response:
    """What a binding sends back: status, body bytes, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = JSON_TYPE
    headers: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_frozen)

    def json(self) -> Any:
        """The body decoded (for tests and templates)."""
        return json.loads(self.body)


def encode(data: object) -> bytes:
    """``data`` (JSON-ready) as compact UTF-8 JSON."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_response(
    data: object, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """A JSON response."""
    return Response(status, encode(data), JSON_TYPE, {**NO_STORE, **(headers or {})})
