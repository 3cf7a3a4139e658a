"""Errors of the REST layer as RFC 9457 problem details (``application/problem+json``).

Every error response has ``type`` (a stable URN naming the problem), ``title``,
``status``, ``detail`` and ``instance`` (the request's path); an invalid request adds
``errors`` (where and what). Authorization hooks raise :class:`NotAuthenticated` and
:class:`Forbidden`; the handlers raise the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from ._http import NO_STORE, PROBLEM_TYPE, Response, encode

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: The prefix of every problem ``type``: ``urn:skiplock:problem:not-found``, ...
TYPE_PREFIX = "urn:skiplock:problem:"
#: What a 401 asks for unless the hook says otherwise (RFC 9110 requires the header).
DEFAULT_CHALLENGE = 'Bearer realm="skiplock"'


class Problem(Exception):
    """An error response: raise a subclass (or this with ``status=``) from a handler or
    an authorization hook. ``detail`` is shown to the client: say what went wrong, never
    a secret. A subclass names its ``status``, ``slug`` and ``title`` as class keywords
    (``class Gone(Problem, status=410, slug="gone", title="Gone")``)."""

    status: ClassVar[int] = 500
    slug: ClassVar[str] = "internal-error"
    title: ClassVar[str] = "Internal server error"

    def __init__(
        self,
        detail: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        errors: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.headers: Mapping[str, str] = dict(headers or {})
        self.errors = None if errors is None else [dict(e) for e in errors]

    def __init_subclass__(
        cls, *, status: int | None = None, slug: str | None = None, title: str | None = None
    ) -> None:
        super().__init_subclass__()
        if status is not None:
            cls.status = status
        if slug is not None:
            cls.slug = slug
        if title is not None:
            cls.title = title

    @property
    def type(self) -> str:
        """The problem type: a URN, stable across releases."""
        return TYPE_PREFIX + self.slug

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        """The problem details object."""
        data: dict[str, Any] = {
            "type": self.type,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
        }
        if self.errors is not None:
            data["errors"] = self.errors
        return data

    def response(self, instance: str | None = None) -> Response:
        """This problem as an ``application/problem+json`` response."""
        headers = {**NO_STORE, **self.headers}
        return Response(self.status, encode(self.to_dict(instance)), PROBLEM_TYPE, headers)


class NotAuthenticated(
    Problem, status=401, slug="unauthenticated", title="Authentication required"
):
    """401: the caller is not known (no or bad credentials). An authorization hook
    raises it (or returns None). ``challenge`` is the ``WWW-Authenticate`` header."""

    def __init__(self, detail: str | None = None, *, challenge: str = DEFAULT_CHALLENGE) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": challenge})


class Forbidden(Problem, status=403, slug="forbidden", title="Permission denied"):
    """403: the caller is known but lacks the permission. An authorization hook raises it."""


class BadRequest(Problem, status=400, slug="malformed-request", title="Malformed request"):
    """400: the body is not JSON."""


class NotFound(Problem, status=404, slug="not-found", title="Not found"):
    """404: no job with that id."""


class MethodNotAllowed(Problem, status=405, slug="method-not-allowed", title="Method not allowed"):
    """405: a path of the API that does not take this method (``Allow`` says which do)."""


class Conflict(Problem, status=409, slug="invalid-transition", title="Invalid state transition"):
    """409: the job's state does not allow the action (nothing changed)."""


class SelectionChanged(
    Conflict, slug="selection-changed", title="The jobs changed since they were confirmed"
):
    """409: a bulk action's jobs are no longer those confirmed (nothing changed):
    ``count`` is how many match now, ``confirmed`` how many were confirmed."""

    def __init__(self, detail: str, *, count: int, confirmed: int) -> None:
        super().__init__(detail)
        self.count = count
        self.confirmed = confirmed

    def to_dict(self, instance: str | None = None) -> dict[str, Any]:
        """The problem details object, with ``count`` and ``confirmed``."""
        return super().to_dict(instance) | {"count": self.count, "confirmed": self.confirmed}


class UnsupportedMediaType(
    Problem, status=415, slug="unsupported-media-type", title="Unsupported media type"
):
    """415: a body or ``Content-Type`` that is not JSON."""


class InvalidRequest(Problem, status=422, slug="invalid-request", title="Invalid request"):
    """422: a parameter or a body field is invalid (``errors`` says which)."""


class InternalError(Problem):
    """500: an unexpected failure (logged on ``skiplock.rest``; the client is told
    nothing more)."""


class Unavailable(Problem, status=503, slug="unavailable", title="Job store unavailable"):
    """503: the job store failed (database down, schema missing or too old)."""


#: Every problem type the API answers with, by status (for the OpenAPI document).
PROBLEMS: Mapping[int, type[Problem]] = {
    cls.status: cls
    for cls in (
        BadRequest,
        NotAuthenticated,
        Forbidden,
        NotFound,
        Conflict,
        UnsupportedMediaType,
        InvalidRequest,
        InternalError,
        Unavailable,
    )
}
