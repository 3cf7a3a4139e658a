"""The FastAPI side of :mod:`skiplock.integrations.fastapi` (imported on first use, so
the worker lifespan needs no FastAPI): the binding of the web doors' routes (the REST
API's, the dashboard's) and the transaction dependency."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest  # noqa: TC002 (FastAPI reads it)
from starlette.responses import Response as StarletteResponse

from skiplock.engine import AsyncEngine, Engine

from ._mounts import claims, register
from .rest import AsyncRoute, Request, Response, Route
from .rest._routes import FALLBACK_PATH
from .rest._spec import operation_object, operation_openapi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
    from enum import Enum


async def neutral_request(request: StarletteRequest) -> Request:
    """A Starlette request as the REST layer's :class:`~skiplock.integrations.rest.Request`."""
    headers = request.headers
    return Request(
        scheme=request.url.scheme,
        method=request.method,
        path=request.url.path,
        query={key: request.query_params.getlist(key) for key in request.query_params},
        headers={name: ", ".join(headers.getlist(name)) for name in set(headers.keys())},
        body=await request.body(),
        path_params={name: str(value) for name, value in request.path_params.items()},
        native=request,
    )


def starlette_response(response: Response) -> StarletteResponse:
    """The REST layer's response as Starlette's."""
    return StarletteResponse(
        content=response.body,
        status_code=response.status,
        headers=dict(response.headers),
        media_type=response.content_type,
    )


_TOKENS = itertools.count(1)


class DoorRouter(APIRouter):
    """The router of a skiplock door, with what :func:`mount` needs to know of it: the
    door it mounts (named in a MountConflict), a token telling its routes from another
    router's, the path of each route relative to the door's mount point, and the door's
    fallback route until it is mounted under a prefix."""

    def __init__(self, *, door: str, prefix: str, tags: Sequence[str]) -> None:
        self.skiplock_door = door
        self.skiplock_token = next(_TOKENS)
        #: The path of each route relative to the door's mount point, by its full path.
        self.skiplock_paths: dict[str, str] = {}
        #: The door's fallback route, mounted once the router is under a prefix.
        self.skiplock_fallback: tuple[str, Callable[..., Any], list[str]] | None = None
        tag_list: list[str | Enum] = list(tags)
        super().__init__(prefix=prefix, tags=tag_list)

    def add_fallback(self) -> None:
        """Mount the door's fallback route (once): 404 and 405 in the door's form for the
        paths under its prefix. Only under a prefix: at the root of an app it would take
        the app's every unknown path."""
        if self.skiplock_fallback is None:
            return
        name, endpoint, methods = self.skiplock_fallback
        self.skiplock_fallback = None
        self.add_api_route(
            FALLBACK_PATH, endpoint, methods=methods, name=name, include_in_schema=False
        )


def mount(
    parent: FastAPI | APIRouter, router: APIRouter, prefix: str, options: dict[str, Any]
) -> None:
    """See :func:`skiplock.integrations.fastapi.mount`."""
    if not isinstance(router, DoorRouter):
        raise TypeError(f"expected a router of skiplock.integrations.fastapi, got {router!r}")
    # FastAPI's include_router is its router's: the claims are kept there, so an app and
    # its router hold the same ones.
    including = parent.router if isinstance(parent, FastAPI) else parent
    new = claims(router.skiplock_door, router.skiplock_token, prefix, router.skiplock_paths.items())
    register(new, including.__dict__.setdefault("skiplock_mounts", []))
    if prefix:
        # Before the include: FastAPI versions that copy the router's routes there.
        router.add_fallback()
    parent.include_router(router, prefix=prefix, **options)


def _endpoint(route: AsyncRoute | Route) -> Callable[..., Any]:
    """The endpoint answering ``route`` (and ``HEAD`` for a ``GET`` route); a sync door's
    answer runs in Starlette's thread pool."""

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        neutral = await neutral_request(request)
        if isinstance(route, AsyncRoute):
            answer = starlette_response(await route.answer(neutral))
        else:
            answer = starlette_response(await run_in_threadpool(route.answer, neutral))
        if request.method == "HEAD":
            answer.body = b""  # GET's status and headers (Content-Length too), no body
        return answer

    return endpoint


def router(
    routes: Sequence[AsyncRoute | Route],
    *,
    namespace: str,
    door: str,
    prefix: str = "",
    tags: Sequence[str] = (),
    include_in_schema: bool = True,
) -> APIRouter:
    """An ``APIRouter`` mounting a door's ``routes``. A REST operation is named by its id
    and described in the app's OpenAPI document (unless ``include_in_schema`` is
    false); another route is named ``<namespace><name>`` and left out of it. ``door``
    names the router in a :class:`~._mounts.MountConflict`."""
    mounted = DoorRouter(door=door, prefix=prefix, tags=tags)
    for route in routes:
        if route.path == FALLBACK_PATH:
            mounted.skiplock_fallback = (namespace + route.name, _endpoint(route), route.methods)
            continue
        op = route.operation
        options: dict[str, Any] = {"name": namespace + route.name, "include_in_schema": False}
        if op is not None:
            described = operation_object(op)
            options = {
                "name": op.id,
                "include_in_schema": include_in_schema,
                "operation_id": op.id,
                "summary": described["summary"],
                "description": described["description"],
                "status_code": op.status,
                "response_model": None,
                "openapi_extra": operation_openapi(op),
            }
        mounted.skiplock_paths[prefix + route.path] = route.path
        endpoint = _endpoint(route)
        mounted.add_api_route(route.path, endpoint, methods=[route.method], **options)
        if route.method == "GET":
            # HEAD answers as GET without the body, as in Flask and Django (a route of
            # its own: with GET's, the OpenAPI document would list it twice).
            mounted.add_api_route(
                route.path,
                endpoint,
                methods=["HEAD"],
                name=options["name"],
                include_in_schema=False,
            )
    if prefix:
        mounted.add_fallback()
    return mounted


def transaction(engine: AsyncEngine | Engine, *, statement_timeout: float | None = None) -> Any:
    """See :func:`skiplock.integrations.fastapi.transaction`."""
    dependency: Callable[[], AsyncIterator[Any] | Iterator[Any] | Awaitable[Any]]
    if isinstance(engine, AsyncEngine):
        store = engine.store

        async def in_transaction() -> AsyncIterator[Any]:
            async with store.transaction(statement_timeout=statement_timeout) as handle:
                yield handle

        dependency = in_transaction
    elif isinstance(engine, Engine):
        sync_store = engine.store

        def in_sync_transaction() -> Iterator[Any]:
            with sync_store.transaction(statement_timeout=statement_timeout) as handle:
                yield handle

        dependency = in_sync_transaction
    else:
        raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
    # "function": the transaction ends when the endpoint returns, before the response is
    # sent (FastAPI's default ends it after), so a failed commit is the client's 500.
    return Depends(dependency, scope="function")
