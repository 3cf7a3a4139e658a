"""The FastAPI side of :mod:`skiplock.integrations.fastapi` (imported on first use, so
the worker lifespan needs no FastAPI): the binding of the web doors' routes (the REST
API's, the dashboard's) and the transaction dependency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest  # noqa: TC002 (FastAPI reads it)
from starlette.responses import Response as StarletteResponse

from skiplock.engine import AsyncEngine, Engine

from .rest import AsyncRoute, Request, Response, Route
from .rest._spec import operation_object, operation_openapi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence


async def neutral_request(request: StarletteRequest) -> Request:
    """A Starlette request as the REST layer's :class:`~skiplock.integrations.rest.Request`."""
    headers = request.headers
    return Request(
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


def _endpoint(route: AsyncRoute | Route) -> Callable[..., Any]:
    """The endpoint answering ``route``; a sync door's answer runs in Starlette's thread
    pool."""

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        neutral = await neutral_request(request)
        if isinstance(route, AsyncRoute):
            return starlette_response(await route.answer(neutral))
        return starlette_response(await run_in_threadpool(route.answer, neutral))

    return endpoint


def router(
    routes: Sequence[AsyncRoute | Route],
    *,
    namespace: str,
    prefix: str = "",
    tags: Sequence[str] = (),
    include_in_schema: bool = True,
) -> APIRouter:
    """An ``APIRouter`` mounting a door's ``routes``. A REST operation is named by its id
    and described in the app's OpenAPI document (unless ``include_in_schema`` is
    false); another route is named ``<namespace><name>`` and left out of it."""
    mounted = APIRouter(prefix=prefix, tags=list(tags))
    for route in routes:
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
        mounted.add_api_route(route.path, _endpoint(route), methods=[route.method], **options)
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
