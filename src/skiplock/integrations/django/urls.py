"""The operator surface in a URLconf: the REST admin API, the dashboard and the probes
of a skiplock backend's engine, each a list of URL patterns for ``include()``
(docs/django-admin.md, "The REST API, the dashboard and probes")::

    from skiplock.integrations.django import urls as skiplock_urls

    urlpatterns = [
        path("ops/jobs/api/", include(skiplock_urls.rest_api())),
        path("ops/jobs/", include(skiplock_urls.dashboard())),
        path("ops/", include(skiplock_urls.probes())),
    ]

They mount the framework-neutral doors of :mod:`skiplock.integrations.rest` and
:mod:`skiplock.integrations.dashboard`, as the FastAPI and Flask bindings do. Authorization
goes through Django's auth (:func:`staff_authorize` unless you pass your own hook): deny
by default, staff users only, ``read`` and ``write`` mapped to the ``skiplock`` app's
permissions on jobs, the user's username as the operator's actor (the audit trail's).
CSRF is Django's middleware's (unsafe methods need Django's token), and the dashboard's
own check on top. As in the other bindings, every other path and method under the API's
and the dashboard's prefixes goes to the door's fallback (after the hook: 404, 405 with
``Allow``, 204 for ``OPTIONS``) and ``HEAD`` answers as ``GET``; Django's database down
while the hook reads the user is a 503 with ``Retry-After``. Doors included on paths
another answers first are ``manage.py check``'s ``skiplock.E006``.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Unpack

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.http.request import RawPostDataException
from django.middleware.csrf import get_token
from django.urls import URLPattern, path

from skiplock.core import DatabaseUnavailableError
from skiplock.integrations.rest import Forbidden, Permission, Request, RestApi, problem_for
from skiplock.integrations.rest._routes import ANY_METHOD, FALLBACK_PATH, allowed_methods

from .checks import DoorView
from .management._common import backend_named

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from skiplock.engine import Engine
    from skiplock.integrations.dashboard import DashboardOptions
    from skiplock.integrations.rest import Authorize, Response, Route
    from skiplock.integrations.rest._routes import RouteSpec

__all__ = ["PERMISSIONS", "dashboard", "probes", "rest_api", "staff_authorize"]

logger = logging.getLogger("skiplock.integrations.django")

#: The Django permission each skiplock permission needs (the ``skiplock`` app's job model).
PERMISSIONS = {Permission.READ: "skiplock.view_job", Permission.WRITE: "skiplock.change_job"}


def staff_authorize(request: Request, permission: Permission) -> str | None:
    """The default hook: the request's Django user (``AuthenticationMiddleware``) if it
    is an active staff user with :data:`PERMISSIONS`' permission (a superuser has every
    one). Anonymous: None (401). Else Forbidden (403). Returns the username: the actor of
    the engine's operator, and so of the audit trail."""
    user = getattr(request.native, "user", None)
    if user is None or not user.is_authenticated:
        return None
    if not user.is_active or not user.is_staff:
        raise Forbidden("staff users only")
    needed = PERMISSIONS[permission]
    if not user.has_perm(needed):
        raise Forbidden(f"the {needed!r} permission is needed")
    return str(user.get_username())


def rest_api(
    *, backend: str = "default", authorize: Authorize = staff_authorize
) -> list[URLPattern]:
    """The REST admin API of backend ``backend``'s engine (docs/rest.md): URL patterns
    named by operation id (``listJobs``, ``getJob``, ..., ``openapi``)."""
    hook = _unavailable_as_503(authorize)
    return _patterns(
        backend,
        lambda engine: RestApi(engine, authorize=hook).routes(),
        RestApi.ROUTES,
        door="REST API",
    )


def dashboard(
    *,
    backend: str = "default",
    authorize: Authorize = staff_authorize,
    **options: Unpack[DashboardOptions],
) -> list[URLPattern]:
    """The web dashboard of backend ``backend``'s engine (docs/dashboard.md): URL patterns
    named by page (``overview``, ``dead``, ``job``, ``retry``, ``delete``, ``static``).
    Needs ``jinja2`` (``pip install 'skiplock[dashboard]'``). Its forms carry Django's
    CSRF token too, so Django's middleware checks the buttons."""
    from skiplock.integrations.dashboard import Dashboard

    hook = _unavailable_as_503(authorize)
    return _patterns(
        backend,
        lambda engine: Dashboard(
            engine, authorize=hook, form_fields=_django_csrf_field, **options
        ).routes(),
        Dashboard.ROUTES,
        door="dashboard",
    )


def probes(*, backend: str = "default", timeout: float | None = None) -> list[URLPattern]:
    """``livez`` and ``readyz`` for Kubernetes probes: 200 ``ok`` while Django serves
    (readiness: while the backend's database answers within ``timeout`` seconds; default:
    the engine's ``Settings.request_timeout``), else 503 ``unavailable``. No
    authorization by design: they reveal nothing (no version, host or error; why
    readiness failed is logged on ``skiplock.probes``)."""
    from skiplock.integrations._monitor import PROBES, probe_routes

    return _patterns(
        backend, lambda engine: probe_routes(engine, timeout=timeout), PROBES, door="probes"
    )


# ---- the binding ------------------------------------------------------------------------


def _unavailable_as_503(authorize: Authorize) -> Authorize:
    """``authorize``, with Django's errors of an unreachable database (the default hook
    reads the session and the user there) answered as the doors answer an unreachable job
    store: 503 with ``Retry-After``, not a 500."""

    @functools.wraps(authorize)
    def hook(request: Request, permission: Permission, /) -> str | None:
        try:
            return authorize(request, permission)
        except (OperationalError, InterfaceError) as exc:
            logger.warning("authorization: Django's database is unavailable (%s)", exc)
            unavailable = DatabaseUnavailableError("the database is unavailable; retry later")
            raise problem_for(unavailable) from None

    return hook


class _Routes:
    """A door's routes on the backend's current engine, made again when the engine
    changes (new settings in tests: ``override_settings(TASKS=...)``)."""

    def __init__(self, backend: str, make: Callable[[Engine], Sequence[Route]]) -> None:
        self._backend = backend
        self._make = make
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._routes: dict[tuple[str, str], Route] = {}

    def current(self) -> dict[tuple[str, str], Route]:
        """The routes by (method, path) on the backend's engine now."""
        engine = backend_named(self._backend).engine
        with self._lock:
            if engine is not self._engine:
                self._routes = {(r.method, r.path): r for r in self._make(engine)}
                self._engine = engine
            return self._routes


def _patterns(
    backend: str,
    make: Callable[[Engine], Sequence[Route]],
    table: Sequence[RouteSpec],
    *,
    door: str,
) -> list[URLPattern]:
    routes = _Routes(backend, make)
    patterns: list[URLPattern] = []
    views: dict[str, Callable[..., HttpResponse]] = {}
    # The door's names and paths, from its route table (static: no engine needed, for
    # the URLconf is loaded before the backend may be used, by `check` with invalid
    # OPTIONS even); its routes on the backend's engine are made at the first request.
    for route in table:
        view = views.get(route.path)
        if view is None:
            view = views[route.path] = _view(routes, route.path)
            # What the mount check (skiplock.E006, checks.py) reads of the URLconf.
            view.skiplock_mount = DoorView(door, id(routes), route.path == FALLBACK_PATH)  # type: ignore[attr-defined]
        # One pattern per route, for reverse() by name; the first of a path answers
        # every method.
        patterns.append(path(route.angle_path().lstrip("/"), view, name=route.name))
    if FALLBACK_PATH in views and "/" not in views:
        # The mount point itself, which Django's <path:path> does not match (a door
        # without a page there: the REST API's 404 after the hook, as elsewhere).
        patterns.append(path("", views[FALLBACK_PATH]))
    return patterns


def _view(routes: _Routes, route_path: str) -> Callable[..., HttpResponse]:
    def view(request: HttpRequest, **params: str) -> HttpResponse:
        current = routes.current()
        method = request.method or "GET"
        route = current.get((method, route_path))
        if route is None and method == "HEAD":
            # HEAD is GET without the body (the server, or Django's test client, drops it).
            route = current.get(("GET", route_path))
        if route is None:
            route, params = _unmatched(current, route_path, params)
            if route is None:  # a door without a fallback (the probes)
                return _not_allowed(current, route_path, method)
        response = route.answer(_neutral(request, params))
        return _django_response(response)

    return view


def _unmatched(
    current: dict[tuple[str, str], Route], route_path: str, params: dict[str, str]
) -> tuple[Route | None, dict[str, str]]:
    """The door's fallback route, which answers a path no route takes and a method the
    path's routes do not take, after the door's hook (404; 405 with ``Allow``; 204 with
    ``Allow`` for ``OPTIONS``) as in the other bindings; and its ``path`` parameter: the
    request's path under the mount point."""
    if route_path != FALLBACK_PATH:
        relative = _PARAMETER.sub(lambda found: params.get(found.group(1), ""), route_path)
        params = {"path": relative.lstrip("/")}
    return current.get((ANY_METHOD, FALLBACK_PATH)), params


def _not_allowed(
    current: dict[tuple[str, str], Route], route_path: str, method: str
) -> HttpResponse:
    """A method the routes of a door without a fallback (the probes) do not take: 405,
    or 204 for ``OPTIONS``, with ``Allow`` and no body (the probes reveal nothing)."""
    methods = allowed_methods([r for (_, at), r in current.items() if at == route_path], route_path)
    answer = HttpResponse(
        status=204 if method == "OPTIONS" else 405, content_type="text/plain; charset=utf-8"
    )
    answer["Allow"] = ", ".join([*methods, "OPTIONS"])
    return answer


#: A route path's parameters (``/jobs/{job_id}``).
_PARAMETER = re.compile(r"\{(\w+)\}")


def _neutral(request: HttpRequest, params: dict[str, str]) -> Request:
    try:
        body = request.body
    except RawPostDataException:  # a multipart form Django parsed: no door takes one
        body = b""
    return Request(
        method=request.method or "GET",
        path=request.path,
        query={name: request.GET.getlist(name) for name in request.GET},
        headers=dict(request.headers),
        body=body,
        path_params=params,
        scheme=request.scheme or "http",
        native=request,
    )


def _django_csrf_field(request: Request) -> dict[str, str]:
    """The dashboard's ``form_fields``: Django's CSRF token (the request's, which
    Django's middleware checks when a form posts) in every form of a page."""
    return {"csrfmiddlewaretoken": get_token(request.native)}


def _django_response(response: Response) -> HttpResponse:
    answer = HttpResponse(response.body, status=response.status, content_type=response.content_type)
    for name, value in response.headers.items():
        if name.lower() == "set-cookie":
            cookie: SimpleCookie = SimpleCookie()
            cookie.load(value)
            answer.cookies.update(cookie)  # where Django (and its test client) keep them
        else:
            answer[name] = value
    return answer
