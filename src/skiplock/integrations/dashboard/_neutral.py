"""The framework-neutral request, response and authorization hook the dashboard works with.

Interim: these mirror ``skiplock.integrations.rest`` (the REST layer's ``Request``,
``Response``, ``Permission``, ``Forbidden``, ``NotAuthenticated`` and the hook's rules)
until that layer is merged; then this module re-exports it, so the dashboard and the REST
API share one request model and one hook.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

import attrs

_EMPTY: Mapping[str, Any] = MappingProxyType({})


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
    """An HTTP request as the framework-neutral layer sees it (see the REST layer's)."""

    method: str
    path: str
    query: Mapping[str, tuple[str, ...]] = attrs.field(default=_EMPTY, converter=_frozen_query)
    headers: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_lower_keys)
    body: bytes = b""
    path_params: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_frozen)
    native: Any = attrs.field(default=None, eq=False, repr=False)

    def header(self, name: str) -> str | None:
        """The value of header ``name`` (any case), or None."""
        return self.headers.get(name.lower())

    @property
    def media_type(self) -> str | None:
        """The media type of the body, lower case, or None."""
        value = self.header("content-type")
        if value is None:
            return None
        return value.partition(";")[0].strip().lower() or None


@attrs.frozen
class Response:
    """What a binding sends back: status, body bytes, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: Mapping[str, str] = attrs.field(default=_EMPTY, converter=_frozen)


class Permission(enum.StrEnum):
    """What a page needs: ``read`` (every page) or ``write`` (retry, discard)."""

    READ = "read"
    WRITE = "write"


class Problem(Exception):
    """An error answered with ``status`` (the hook raises the two below)."""

    status = 500
    title = "Internal server error"

    def __init__(self, detail: str | None = None, *, headers: Mapping[str, str] | None = None):
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.headers: Mapping[str, str] = dict(headers or {})


class NotAuthenticated(Problem):
    """401: the caller is not known."""

    status = 401
    title = "Authentication required"

    def __init__(self, detail: str | None = None, *, challenge: str = 'Bearer realm="skiplock"'):
        super().__init__(detail, headers={"WWW-Authenticate": challenge})


class Forbidden(Problem):
    """403: the caller is known but lacks the permission."""

    status = 403
    title = "Permission denied"


class Authorize(Protocol):
    """The hook of a sync dashboard: the caller's identity, None (401), or raise
    :class:`Forbidden` (403)."""

    def __call__(self, request: Request, permission: Permission, /) -> str | None: ...


class AsyncAuthorize(Protocol):
    """The hook of an async dashboard: as :class:`Authorize`, possibly a coroutine
    function."""

    def __call__(
        self, request: Request, permission: Permission, /
    ) -> str | Awaitable[str | None] | None: ...


def check_hook(authorize: object) -> None:
    """TypeError unless ``authorize`` is a callable (deny by default)."""
    if authorize is None:
        raise TypeError(
            "the skiplock dashboard denies by default: pass authorize=, a callable "
            "(request, permission) returning the caller's identity (a str), None for an "
            "unknown caller (401), or raising Forbidden (403); see docs/dashboard.md"
        )
    if not callable(authorize):
        raise TypeError(f"authorize must be a callable, got {type(authorize).__name__}")


def identity_of(outcome: object) -> str | None:
    """The identity a hook returned (None: unknown caller); TypeError for anything else."""
    if outcome is None or (isinstance(outcome, str) and outcome.strip()):
        return outcome
    raise TypeError(
        "the authorize hook must return the caller's identity (a non-blank str) or None, "
        f"got {type(outcome).__name__} {outcome!r:.40}"
    )
