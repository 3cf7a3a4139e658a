"""What every web door shares (async source; ``_door.py`` is the sync twin): the engine,
the authorization hook asked before anything else, the engine's operator acting as the
caller it names, and the answer to an unexpected error.

The REST API (:class:`~._api_async.AsyncRestApi`) and the dashboard are doors; each holds
its route table in its class (``ROUTES``, static: no engine needed to list it) and hands
its bindings the table bound to the door (:meth:`~AsyncDoor.routes`, ``_routes.py``).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from skiplock._compat import deadline_error, request_deadline
from skiplock._compat_async import Flights, Turns
from skiplock.core import SkiplockError
from skiplock.engine import AsyncEngine, AsyncReader

from ._auth import Permission, check_hook, identity_of
from ._problems import Forbidden, InternalError, NotAuthenticated, Problem
from ._routes import ANY_METHOD, FALLBACK_PATH, AsyncRoute, AsyncRouteRow, unmatched
from ._support import problem_for

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.engine import AsyncOperator

    from ._auth import AsyncAuthorize
    from ._http import Request, Response
    from ._routes import AsyncCall, AsyncWork

T = TypeVar("T")

#: How much earlier than a request's deadline the stores give up waiting for the database
#: (at most a quarter of the timeout): time left to answer 503 before the deadline.
STORE_MARGIN = 0.25


class AsyncDoor:
    """A web door over an :class:`~skiplock.AsyncEngine`, behind an authorization hook.

    ``authorize`` is required (deny by default, see :class:`~._auth.AsyncAuthorize`): a
    missing hook raises TypeError here, so no binding can mount a door without one.
    Every request is answered by :meth:`operator`, the engine's operator acting as the
    caller the hook names: the audit trail records that caller for each change.
    """

    #: Where a door logs an unexpected error, and what the log line calls the door.
    logger: ClassVar[logging.Logger] = logging.getLogger("skiplock.rest")
    label: ClassVar[str] = "REST API"
    #: What the door may work on: an engine; a door that only reads (the dashboard) also
    #: takes a reader (:class:`~skiplock.engine.AsyncReader`, a reads-only store).
    serves: ClassVar[tuple[type, ...]] = (AsyncEngine,)

    def __init__(self, engine: AsyncEngine | AsyncReader, *, authorize: AsyncAuthorize) -> None:
        if not isinstance(engine, self.serves):
            expected = AsyncEngine.__name__
            raise TypeError(f"expected a skiplock {expected}, got {type(engine).__name__}")
        check_hook(authorize)
        if True:  # ASYNC
            pass
        else:
            if inspect.iscoroutinefunction(authorize):
                raise TypeError("a coroutine function as authorize hook needs an AsyncEngine")
        self._source = engine
        self._authorize = authorize
        # Requests take turns (in_time); the last time one was answered by the database.
        self._turns = Turns(engine.settings.request_concurrency)
        self._answered = 0.0
        # Concurrent calls of a shared read (the REST API's summaries) share one.
        self._flights = Flights()

    @property
    def engine(self) -> AsyncEngine:
        """The engine the door works on (TypeError for a door over a reader)."""
        if not isinstance(self._source, AsyncEngine):
            raise TypeError(f"this {self.label} reads through a reader: it has no engine")
        return self._source

    @property
    def source(self) -> AsyncEngine | AsyncReader:
        """What the door works on: its engine, or the reader it only reads through."""
        return self._source

    async def authorize(self, request: Request, permission: Permission) -> str:
        """The caller's identity if the hook grants ``permission``; raises
        :class:`NotAuthenticated` (401) or :class:`Forbidden` (403) otherwise, and
        TypeError for a hook that returned something else."""
        outcome = self._authorize(request, permission)
        if True:  # ASYNC
            if inspect.isawaitable(outcome):
                outcome = await outcome
        identity = identity_of(outcome)
        if identity is None:
            raise NotAuthenticated("missing or invalid credentials")
        return identity

    async def operator(self, request: Request, permission: Permission) -> AsyncOperator:
        """The engine's operator (:meth:`AsyncEngine.operator
        <skiplock.AsyncEngine.operator>`) acting as the caller, once the hook grants
        ``permission``; raises as :meth:`authorize`, and :class:`Forbidden` for a door
        over a reader (it changes nothing)."""
        identity = await self.authorize(request, permission)
        if not isinstance(self._source, AsyncEngine):
            raise Forbidden(f"this {self.label} is read-only")
        return self._source.operator(identity)

    async def reads(self, request: Request) -> tuple[str, AsyncOperator | AsyncReader]:
        """The caller's identity once the hook grants ``read``, and what to read
        through: the engine's reader when the engine reads a standby (its ``reads=``,
        docs/replicas.md), else its operator acting as the caller; or the door's reader."""
        identity = await self.authorize(request, Permission.READ)
        return identity, self.reads_as(identity)

    def reads_as(self, identity: str) -> AsyncOperator | AsyncReader:
        """What :meth:`reads` reads through for a caller the hook granted ``read``."""
        source = self._source
        if isinstance(source, AsyncEngine):
            if source.reads_store is not None:
                return source.reader()
            return source.operator(identity)
        return source

    async def in_time(
        self, work: AsyncWork, late: Callable[[Problem], Response], *, arrived: float | None = None
    ) -> Response:
        """``work()``'s response, or ``late``'s for a 503 (``Retry-After``) if the
        database did not answer within the engine's ``request_timeout``.

        Requests take turns: at most ``request_concurrency`` work at once, the others wait
        in order of arrival, for as long as the database answers the requests at work
        (a busy dashboard queues its visitors, it does not fail them). The deadline
        starts with the turn; a request that waited ``request_timeout`` while no request
        was answered gets its 503 without a turn, so however many requests wait on a
        database that does not answer, each has its 503 within ``request_timeout`` of
        its arrival or of the database's last answer, if that came later (a request at
        work: of its turn). The PostgreSQL stores stop waiting for a pooled connection, the
        schema check or a statement's answer at the deadline
        (``skiplock._compat.request_deadline``) and raise DatabaseUnavailableError, which
        ``work`` answers as any outage. ``arrived``: when the request came (a
        ``time.monotonic()`` time; default now)."""
        seconds = self._source.settings.request_timeout.total_seconds()
        margin = min(STORE_MARGIN, seconds / 4)
        if arrived is None:
            arrived = time.monotonic()

        def since(arrived: float = arrived) -> float:
            # The request's arrival, or the last answer the database gave since.
            return max(arrived, self._answered)

        if not await self._turns.take(lambda: since() + seconds - margin):
            with request_deadline(seconds, since=arrived):
                problem = problem_for(deadline_error("no request was answered meanwhile"))
            self.logger.warning("%s: the database did not answer in time", self.label)
            return late(problem)
        try:
            started = since()
            with request_deadline(seconds, margin=margin, since=started):
                response = await self._timed(work, started + seconds - time.monotonic(), late)
            if response.status != 503:
                # Before the turn is given: the waiter it wakes times itself from this.
                self._answered = time.monotonic()
        finally:
            self._turns.give()
        return response

    async def _timed(
        self, work: AsyncWork, seconds: float, late: Callable[[Problem], Response]
    ) -> Response:
        """``work()`` within the deadline; ``late``'s 503 if it passed."""

        def expired() -> Response:
            self.logger.warning("%s: the database did not answer in time", self.label)
            return late(problem_for(deadline_error()))

        return await self._cut(work, seconds, expired)

    async def authorize_in_time(self, request: Request, permission: Permission) -> str:
        """:meth:`authorize` within the engine's ``request_timeout``, without a turn (a
        caller that then joins a shared read); DatabaseUnavailableError past it."""
        seconds = self._source.settings.request_timeout.total_seconds()

        def expired() -> str:
            raise deadline_error("still asking the authorization hook")

        with request_deadline(seconds, margin=min(STORE_MARGIN, seconds / 4)):
            hook = functools.partial(self.authorize, request, permission)
            return await self._cut(hook, seconds, expired)

    async def _cut(self, call: AsyncCall[T], seconds: float, expired: Callable[[], T]) -> T:
        """``call()``, or ``expired()`` once ``seconds`` passed: a call that does not stop
        at the deadline by itself (asyncpg, SQLAlchemy, a caller's psycopg pool
        mid-statement, a hook) is cancelled at it."""
        if True:  # ASYNC
            limit = asyncio.timeout(seconds)
            try:
                async with limit:
                    return await call()
            except TimeoutError:
                if not limit.expired():
                    raise
            return expired()
        else:
            return call()

    def failure(self, exc: Exception, request: Request) -> Problem:
        """The problem ``exc`` answers ``request`` with: a :class:`Problem` is its own; an
        engine's error (the hook's DatabaseUnavailableError: a 503) its problem
        (``problem_for``); anything else is unexpected, logged on :attr:`logger` and a
        500 that tells the client nothing more."""
        if isinstance(exc, Problem):
            return exc
        if isinstance(exc, SkiplockError):
            return problem_for(exc)
        self.logger.error(
            "%s error on %s %s", self.label, request.method, request.path, exc_info=exc
        )
        return InternalError("an unexpected error; see the server's log")

    #: The door's route table, static data (the fallback last): each route's name, method,
    #: path and handler. Listing it needs no engine; :meth:`routes` binds it to a door.
    ROUTES: ClassVar[tuple[AsyncRouteRow[Any], ...]] = ()

    def routes(self) -> list[AsyncRoute]:
        """What a binding mounts: :attr:`ROUTES`, each answered by this door."""
        return [row.bind(self) for row in self.ROUTES]

    async def fallback(self, request: Request) -> Response:
        """The answer to a path under the mount point that no route takes, or to a method
        its route does not take: the hook is asked first (``read``), then a 404, a 405
        with ``Allow``, or for ``OPTIONS`` a 204 with ``Allow``, in the door's own form
        (:meth:`problem_response`)."""
        try:
            await self.authorize(request, Permission.READ)
            return unmatched(self.ROUTES, request)
        except Exception as exc:
            return self.problem_response(self.failure(exc, request), request)

    def problem_response(self, problem: Problem, request: Request) -> Response:
        """The response of ``problem`` (the REST API's: problem+json)."""
        return problem.response(request.path)

    #: The row of every path under the mount point that no other route takes (the last of
    #: a door's table; the bindings mount it only under a prefix: at the root of a site
    #: it would take every path of the app).
    FALLBACK: ClassVar[AsyncRouteRow[Any]] = AsyncRouteRow(
        name="fallback", method=ANY_METHOD, path=FALLBACK_PATH, handler=fallback
    )
