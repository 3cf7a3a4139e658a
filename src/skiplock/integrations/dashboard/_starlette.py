"""The dashboard as a FastAPI router (imported on first use: it needs FastAPI)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request as StarletteRequest  # noqa: TC002 (FastAPI reads it)
from starlette.responses import Response as StarletteResponse

from skiplock.engine import AsyncEngine, Engine

from ._neutral import Request, Response
from ._views import Dashboard
from ._views_async import PAGES, AsyncDashboard

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._neutral import AsyncAuthorize, Authorize


async def neutral_request(request: StarletteRequest) -> Request:
    """A Starlette request as the neutral :class:`Request`."""
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
    """The neutral response as Starlette's."""
    return StarletteResponse(
        content=response.body,
        status_code=response.status,
        headers=dict(response.headers),
        media_type=response.content_type,
    )


def _endpoint(dashboard: AsyncDashboard | Dashboard, page: str) -> Callable[..., Any]:
    """The endpoint of ``page``; a sync dashboard runs in Starlette's thread pool."""

    async def endpoint(request: StarletteRequest) -> StarletteResponse:
        neutral = await neutral_request(request)
        if isinstance(dashboard, AsyncDashboard):
            response = await dashboard.handle(page, neutral)
        else:
            response = await run_in_threadpool(dashboard.handle, page, neutral)
        return starlette_response(response)

    return endpoint


def create_router(
    engine: AsyncEngine | Engine,
    *,
    authorize: AsyncAuthorize | Authorize,
    prefix: str = "",
    **options: Any,
) -> APIRouter:
    """See :func:`skiplock.integrations.fastapi.create_dashboard_router`."""
    dashboard: AsyncDashboard | Dashboard
    if isinstance(engine, AsyncEngine):
        dashboard = AsyncDashboard(engine, authorize=authorize, **options)
    elif isinstance(engine, Engine):
        dashboard = Dashboard(engine, authorize=authorize, **options)  # type: ignore[arg-type]
    else:
        raise TypeError(f"expected a skiplock Engine or AsyncEngine, got {engine!r}")
    router = APIRouter(prefix=prefix)
    for page, (path, method, _) in PAGES.items():
        router.add_api_route(
            path,
            _endpoint(dashboard, page),
            methods=[method],
            name=f"skiplock.dashboard.{page}",
            include_in_schema=False,
        )
    return router
