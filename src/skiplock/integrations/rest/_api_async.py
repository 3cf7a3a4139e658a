"""The REST API over an engine (async source; ``_api.py`` is the sync twin).

:class:`AsyncRestApi` turns a framework-neutral :class:`Request` into a
:class:`Response`: it asks the authorization hook first, parses the path, query and body
into the operation's models, calls the operation's handler of :data:`OPERATIONS` with the
engine's operator acting as the caller, and maps its errors to problem details. Its route
table, :attr:`AsyncRestApi.ROUTES` (a route per operation, the OpenAPI document, the
fallback), is what every binding mounts.
"""

from __future__ import annotations

import functools
import time

from ._auth import Permission
from ._door_async import AsyncDoor
from ._http import Request, Response, json_response
from ._operations_async import BY_ID, OPERATIONS, READS, AsyncHandler, openapi_document
from ._routes import AsyncRouteRow
from ._spec import OPENAPI_PATH, Operation
from ._support import parse_call


def _operation_route(op: Operation[AsyncHandler]) -> AsyncRouteRow[AsyncRestApi]:
    """The row of ``op`` in the route table: answered by :meth:`AsyncRestApi.handle`."""

    async def answer(api: AsyncRestApi, request: Request) -> Response:
        return await api.handle(op.id, request)

    return AsyncRouteRow(name=op.id, method=op.method, path=op.path, operation=op, handler=answer)


#: The reads whose concurrent calls share one database read: summaries, the same for
#: every caller (docs/rest-operations.md, "Many callers at once").
SHARED = frozenset({"getCounts", "getHealth"})


class AsyncRestApi(AsyncDoor):
    """The REST admin API of an :class:`~skiplock.AsyncEngine`, framework-neutral.

    ``authorize`` is required (deny by default, see :class:`AsyncAuthorize`): a
    missing hook raises TypeError here, so no binding can mount the API without one.
    The caller's identity the hook returns is the operator's actor (:meth:`operator`):
    the audit trail names it for every change, enqueues included.
    """

    async def handle(self, operation_id: str, request: Request) -> Response:
        """The response to ``request`` for the operation ``operation_id`` (an ``id`` of
        :data:`OPERATIONS`). The hook is asked first, before anything is parsed, read or
        changed; every error is a problem response (an unexpected one a 500, logged on
        ``skiplock.rest``); a database that does not answer within the engine's
        ``request_timeout`` gets a 503 with ``Retry-After`` in time."""
        if operation_id in SHARED:
            return await self._shared(operation_id, request)
        return await self.in_time(
            functools.partial(self._handle, operation_id, request),
            lambda problem: problem.response(request.path),
        )

    async def _shared(self, operation_id: str, request: Request) -> Response:
        """A read of :data:`SHARED`: the caller is authorized, then shares the answer of
        one read with the concurrent calls of the same path and query (each answer from
        a read that started after its caller arrived)."""
        arrived = time.monotonic()
        try:
            identity = await self.authorize_in_time(request, Permission.READ)
        except Exception as exc:
            return self.failure(exc, request).response(request.path)
        query = tuple(sorted((name, tuple(values)) for name, values in request.query.items()))

        async def read() -> Response:
            return await self.in_time(
                functools.partial(self._handle, operation_id, request, identity),
                lambda problem: problem.response(request.path),
                arrived=arrived,
            )

        return await self._flights.share((operation_id, request.path, query), read)

    async def _handle(
        self, operation_id: str, request: Request, identity: str | None = None
    ) -> Response:
        op = BY_ID[operation_id]
        read = READS.get(operation_id)
        try:
            if read is not None:  # a GET: through the door's reads (a standby's, if set)
                if identity is None:
                    identity, reads = await self.reads(request)
                else:  # already authorized (a shared read)
                    reads = self.reads_as(identity)
                answer = functools.partial(read, reads)
            else:
                ops = await self.operator(request, op.permission)
                answer = functools.partial(op.handler, ops)
            return await answer(parse_call(op, request))
        except Exception as exc:  # an engine's error: its problem (failure)
            return self.failure(exc, request).response(request.path)

    async def openapi(self, request: Request) -> Response:
        """The OpenAPI document (read permission), for ``<mount>/openapi.json``: its
        ``servers`` entry is the mount point, taken from the request's path."""
        try:
            await self.authorize(request, Permission.READ)
        except Exception as exc:
            return self.failure(exc, request).response(request.path)
        return json_response(openapi_document(request.path.removesuffix(OPENAPI_PATH)))

    #: A route per operation of :data:`OPERATIONS` (named by its id), then the OpenAPI
    #: document (``openapi``), then the fallback (404 and 405 as problems).
    ROUTES = (
        *[_operation_route(op) for op in OPERATIONS],
        AsyncRouteRow(name="openapi", method="GET", path=OPENAPI_PATH, handler=openapi),
        AsyncDoor.FALLBACK,
    )
