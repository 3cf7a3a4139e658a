"""The REST admin API (R13 / J8), framework-neutral: the FastAPI and Flask bindings
(:func:`skiplock.integrations.fastapi.create_router`,
:func:`skiplock.integrations.flask.create_blueprint`) mount its routes.

It needs ``pydantic`` (the ``fastapi`` and ``flask`` extras have it). Deny by default:
:class:`RestApi` / :class:`AsyncRestApi` refuse to exist without an authorization hook,
which receives every :class:`Request` with the :class:`Permission` it needs and returns
the caller's identity (the actor of the engine's operator that answers the request),
None (401) or raises :class:`Forbidden` (403). One table, :data:`OPERATIONS`, gives each
operation's route, models and handler; the dispatch, the routes of every binding
(:class:`AsyncRoute` / :class:`Route`, the binding kit) and the OpenAPI document come
from it. See docs/rest.md.
"""

from __future__ import annotations

from ._api import RestApi
from ._api_async import AsyncRestApi
from ._auth import AsyncAuthorize, Authorize, Permission
from ._door import Door
from ._door_async import AsyncDoor
from ._http import JSON_TYPE, PROBLEM_TYPE, Request, Response
from ._operations_async import OPERATIONS, AsyncHandler, openapi_document
from ._problems import TYPE_PREFIX, Forbidden, NotAuthenticated, Problem
from ._routes import AsyncRoute, Route
from ._spec import API_VERSION, OPENAPI_PATH, Operation
from ._support import problem_for

__all__ = [
    "API_VERSION",
    "JSON_TYPE",
    "OPENAPI_PATH",
    "OPERATIONS",
    "PROBLEM_TYPE",
    "TYPE_PREFIX",
    "AsyncAuthorize",
    "AsyncDoor",
    "AsyncHandler",
    "AsyncRestApi",
    "AsyncRoute",
    "Authorize",
    "Door",
    "Forbidden",
    "NotAuthenticated",
    "Operation",
    "Permission",
    "Problem",
    "Request",
    "Response",
    "RestApi",
    "Route",
    "openapi_document",
    "problem_for",
]
