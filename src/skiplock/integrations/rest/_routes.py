"""The routes a web door hands its bindings: what each framework mounts, whatever the
door (the REST API, the dashboard).

A binding turns each route into one of its own (a FastAPI route, a Flask URL rule) whose
view converts the framework's request into a :class:`~._http.Request`, calls
``route.answer`` and sends the :class:`~._http.Response` back: :class:`AsyncRoute`
answers are awaited, :class:`Route` answers are plain calls (an async framework runs them
in its thread pool). The names and paths come from the door, so every binding mounts
the same routes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs

from ._http import NO_STORE, Request, Response
from ._problems import MethodNotAllowed, NotFound
from ._spec import Operation

_PARAMETER = re.compile(r"\{(\w+)\}")
#: The path of a door's fallback route: every path under the mount point that no other
#: route takes (``path``: the rest of the path, slashes included).
FALLBACK_PATH = "/{path:path}"
#: The method of the fallback route: it takes every method.
ANY_METHOD = "*"
#: What :data:`ANY_METHOD` stands for in a binding.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@attrs.frozen(kw_only=True)
class _Mount:
    #: The route's name in its door: an operation id, ``openapi``, a dashboard page.
    name: str
    method: str
    #: Relative to the mount point, parameters in braces (``/jobs/{job_id}``).
    path: str
    #: The REST operation it serves (its OpenAPI description), None for another route.
    operation: Operation[Any] | None = None

    def angle_path(self) -> str:
        """The path with ``<name>`` parameters (Flask's and Django's syntax)."""
        if self.path == FALLBACK_PATH:
            return "/<path:path>"
        return _PARAMETER.sub(r"<\1>", self.path)

    @property
    def methods(self) -> list[str]:
        """The methods a binding mounts the route for."""
        return list(METHODS) if self.method == ANY_METHOD else [self.method]

    def matches(self, path: str) -> bool:
        """Whether ``path`` (relative to the mount point) is this route's (a parameter
        is one path segment)."""
        pattern = "".join(
            "[^/]+" if n % 2 else re.escape(part)
            for n, part in enumerate(_PARAMETER.split(self.path))
        )
        return self.path != FALLBACK_PATH and re.fullmatch(pattern, path) is not None


def allowed_methods(routes: Iterable[_Mount], path: str) -> list[str]:
    """The methods the routes take at ``path`` (relative to the mount point); [] for a
    path none of them takes."""
    methods = {route.method for route in routes if route.matches(path)}
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


#: A door's work on one request, run within the request's deadline (``Door.in_time``).
AsyncWork = Callable[[], Awaitable[Response]]
#: The same for a sync door.
Work = Callable[[], Response]


@attrs.frozen(kw_only=True)
class AsyncRoute(_Mount):
    """A route of an async door (``AsyncRestApi``, ``AsyncDashboard``)."""

    answer: Callable[[Request], Awaitable[Response]]


@attrs.frozen(kw_only=True)
class Route(_Mount):
    """A route of a sync door (``RestApi``, ``Dashboard``)."""

    answer: Callable[[Request], Response]


def unmatched(routes: Iterable[_Mount], request: Request) -> Response:
    """The answer of a door's fallback route to ``request`` (its ``path`` parameter: the
    path under the mount point): OPTIONS on a path of ``routes`` is a 204 with ``Allow``;
    raises MethodNotAllowed (405, ``Allow``) for another method there, NotFound (404) for
    a path none of them takes."""
    path = "/" + request.path_params.get("path", "")
    methods = allowed_methods(routes, path)
    if not methods:
        raise NotFound(f"nothing here: {path[:80]}")
    allow = {"Allow": ", ".join([*methods, "OPTIONS"])}
    if request.method == "OPTIONS":
        return Response(204, b"", "text/plain; charset=utf-8", {**NO_STORE, **allow})
    raise MethodNotAllowed(f"{request.method[:10]} is not allowed here", headers=allow)
