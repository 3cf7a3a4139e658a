"""The routes a web door hands its bindings: what each framework mounts, whatever the
door (the REST API, the dashboard).

A binding turns each route into one of its own (a FastAPI route, a Flask URL rule) whose
view converts the framework's request into a :class:`~._http.Request`, calls
``route.answer`` and sends the :class:`~._http.Response` back: :class:`AsyncRoute`
answers are awaited, :class:`Route` answers are plain calls (an async framework runs them
in its thread pool). The names and paths come from the door, so every binding mounts
the same routes.

They are static data: each door's class holds its route table (``ROUTES``: a
:class:`AsyncRouteRow` / :class:`RouteRow` per route, its handler a function of the door
and the request), which lists the routes without an engine; a door's ``routes()`` binds
the table to the door.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, TypeVar

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


#: The door a route table's handlers take.
D = TypeVar("D")
_T = TypeVar("_T")


@attrs.frozen(kw_only=True)
class RouteSpec:
    """What a binding needs to know of a route, whatever serves it: its name, method and
    path (and the REST operation it serves)."""

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


def allowed_methods(routes: Iterable[RouteSpec], path: str) -> list[str]:
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
#: A call a door cuts at the request's deadline (``Door._cut``), and a sync door's.
AsyncCall = Callable[[], Awaitable[_T]]
Call = Callable[[], _T]


@attrs.frozen(kw_only=True)
class AsyncRoute(RouteSpec):
    """A route of an async door (``AsyncRestApi``, ``AsyncDashboard``)."""

    answer: Callable[[Request], Awaitable[Response]]


@attrs.frozen(kw_only=True)
class Route(RouteSpec):
    """A route of a sync door (``RestApi``, ``Dashboard``)."""

    answer: Callable[[Request], Response]


#: The handler of a route of an async door's table: called with the door and the request.
AsyncRouteHandler = Callable[[D, Request], Awaitable[Response]]
#: The same for a sync door.
RouteHandler = Callable[[D, Request], Response]


@attrs.frozen(kw_only=True)
class AsyncRouteRow(RouteSpec, Generic[D]):
    """A row of an async door's route table: the route, and the ``handler`` answering it,
    called with the door and the request."""

    handler: AsyncRouteHandler[D]

    def bind(self, door: D) -> AsyncRoute:
        """The route as ``door`` answers it."""
        return AsyncRoute(**spec_fields(self), answer=functools.partial(self.handler, door))


@attrs.frozen(kw_only=True)
class RouteRow(RouteSpec, Generic[D]):
    """A row of a sync door's route table (see :class:`AsyncRouteRow`)."""

    handler: RouteHandler[D]

    def bind(self, door: D) -> Route:
        """The route as ``door`` answers it."""
        return Route(**spec_fields(self), answer=functools.partial(self.handler, door))


def spec_fields(route: RouteSpec) -> dict[str, Any]:
    """The fields of :class:`RouteSpec` of ``route`` (to make a route of another kind)."""
    return {
        "name": route.name,
        "method": route.method,
        "path": route.path,
        "operation": route.operation,
    }


def specs(routes: Iterable[RouteSpec]) -> list[tuple[str, str, str]]:
    """The (name, method, path) of each route: what a route table and the routes a door
    hands its bindings have in common."""
    return [(route.name, route.method, route.path) for route in routes]


def unmatched(routes: Iterable[RouteSpec], request: Request) -> Response:
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
