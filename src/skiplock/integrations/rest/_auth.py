"""Deny by default: the authorization hook every binding needs, and the permissions it
is asked about."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Protocol

from skiplock.core import ValidationError
from skiplock.core.rules import check_actor

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ._http import Request

#: Why a binding refuses to mount without a hook.
NO_HOOK = (
    "the skiplock REST API denies by default: pass authorize=, a callable "
    "(request, permission) returning the caller's identity (a str), None for an unknown "
    "caller (401), or raising Forbidden (403); see docs/rest.md"
)


class Permission(enum.StrEnum):
    """What an operation needs: ``read`` (list, get, counts, workers, health, the
    OpenAPI document) or ``write`` (create, retry, cancel, mark failed, delete)."""

    READ = "read"
    WRITE = "write"


class Authorize(Protocol):
    """The authorization hook of the sync API (Flask, or FastAPI with a sync engine).

    Called with the request and the :class:`Permission` the operation needs, before
    anything is read or changed. Return the caller's identity: a non-blank str, which
    the audit trail records as the actor of every change the request makes. Return None
    for a caller without (valid) credentials: 401. Raise :class:`Forbidden` for a known
    caller without the permission: 403 (or :class:`NotAuthenticated` for a 401 with
    your own ``WWW-Authenticate`` challenge). Anything else it returns or raises is a
    500, and the request is refused.
    """

    def __call__(self, request: Request, permission: Permission, /) -> str | None: ...


class AsyncAuthorize(Protocol):
    """The authorization hook of the async API (FastAPI with an ``AsyncEngine``): as
    :class:`Authorize`, and it may be a coroutine function."""

    def __call__(
        self, request: Request, permission: Permission, /
    ) -> str | Awaitable[str | None] | None: ...


def check_hook(authorize: object) -> None:
    """TypeError unless ``authorize`` is a callable (the API denies by default)."""
    if authorize is None:
        raise TypeError(NO_HOOK)
    if not callable(authorize):
        raise TypeError(f"authorize must be a callable, got {type(authorize).__name__}")


def identity_of(outcome: object) -> str | None:
    """The identity a hook returned (None: unknown caller); TypeError for anything but
    None or an actor the audit trail accepts (non-blank text, at most 255 characters,
    no control characters), so a mistaken hook refuses the request instead of letting
    it through."""
    if outcome is None:
        return None
    try:
        return check_actor("the caller's identity", outcome)
    except ValidationError as exc:
        raise TypeError(
            "the authorize hook must return the caller's identity or None: "
            f"{exc} ({type(outcome).__name__} {outcome!r:.40})"
        ) from None
