"""The FastAPI side of :mod:`skiplock.integrations.fastapi` (imported on first use, so
the worker lifespan needs no FastAPI): the REST router and the transaction dependency."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest  # noqa: TC002 (FastAPI reads it)
from starlette.responses import Response as StarletteResponse

from skiplock.engine import AsyncEngine, Engine

from .rest import OPENAPI_PATH, OPERATIONS, AsyncRestApi, Request, Response, RestApi
from .rest._spec import Operation, operation_object, operation_openapi

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence

    from .rest import AsyncAuthorize, Authorize


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


def _answer(api: AsyncRestApi | RestApi, operation_id: str | None) -> Callable[..., Any]:
    """The endpoint answering ``operation_id`` (None: the OpenAPI document); a sync API
    runs in Starlette's thread pool."""
    if isinstance(api, AsyncRestApi):

        async def answer(request: Request) -> Response:
            if operation_id is None:
                return await api.openapi(request)
            return await api.handle(operation_id, request)

    else:

        async def answer(request: Request) -> Response:
            if operation_id is None:
                return await run_in_threadpool(api.openapi, request)
            return await run_in_threadpool(api.handle, operation_id, request)

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        return starlette_response(await answer(await neutral_request(request)))

    return endpoint


def create_router(
    engine: AsyncEngine | Engine,
    *,
    authorize: AsyncAuthorize | Authorize,
    prefix: str = "",
    tags: Sequence[str] = ("skiplock",),
    include_in_schema: bool = True,
) -> APIRouter:
    """See :func:`skiplock.integrations.fastapi.create_router`."""
    api: AsyncRestApi | RestApi
    if isinstance(engine, AsyncEngine):
        api = AsyncRestApi(engine, authorize=authorize)
    elif isinstance(engine, Engine):
        api = RestApi(engine, authorize=authorize)  # type: ignore[arg-type]
    else:
        raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
    router = APIRouter(prefix=prefix, tags=list(tags))
    for op in OPERATIONS:
        _route(router, api, op, include_in_schema=include_in_schema)
    router.add_api_route(
        OPENAPI_PATH,
        _answer(api, None),
        methods=["GET"],
        name="skiplock.openapi",
        include_in_schema=False,
    )
    return router


def _route(router: APIRouter, api: AsyncRestApi | RestApi, op: Operation, **options: Any) -> None:
    described = operation_object(op)
    router.add_api_route(
        op.path,
        _answer(api, op.id),
        methods=[op.method],
        name=op.id,
        operation_id=op.id,
        summary=described["summary"],
        description=described["description"],
        status_code=op.status,
        response_model=None,
        openapi_extra=operation_openapi(op),
        **options,
    )


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
