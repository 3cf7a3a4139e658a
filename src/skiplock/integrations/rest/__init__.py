"""The REST admin API (R13 / J8), framework-neutral: the FastAPI and Flask bindings
(:func:`skiplock.integrations.fastapi.create_router`,
:func:`skiplock.integrations.flask.create_blueprint`) route requests to it.

It needs ``pydantic`` (the ``fastapi`` and ``flask`` extras have it). Deny by default:
:class:`RestApi` / :class:`AsyncRestApi` refuse to exist without an authorization hook,
which receives every :class:`Request` with the :class:`Permission` it needs and returns
the caller's identity (the audit actor), None (401) or raises :class:`Forbidden` (403).
See docs/rest.md.
"""

from __future__ import annotations

from ._api import RestApi
from ._api_async import AsyncRestApi
from ._auth import AsyncAuthorize, Authorize, Permission
from ._http import JSON_TYPE, PROBLEM_TYPE, Request, Response
from ._problems import TYPE_PREFIX, Forbidden, NotAuthenticated, Problem
from ._spec import API_VERSION, OPENAPI_PATH, OPERATIONS, Operation, openapi_document
from ._support import problem_for

__all__ = [
    "API_VERSION",
    "JSON_TYPE",
    "OPENAPI_PATH",
    "OPERATIONS",
    "PROBLEM_TYPE",
    "TYPE_PREFIX",
    "AsyncAuthorize",
    "AsyncRestApi",
    "Authorize",
    "Forbidden",
    "NotAuthenticated",
    "Operation",
    "Permission",
    "Problem",
    "Request",
    "Response",
    "RestApi",
    "openapi_document",
    "problem_for",
]
