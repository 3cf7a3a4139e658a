"""The dashboard's pages over an engine (async source; ``_views.py`` is the sync twin).

:class:`AsyncDashboard` turns a framework-neutral request for one of its :data:`PAGES`
into an HTML response: it asks the authorization hook first (``read`` for a page,
``write`` for a button), reads through the engine's operator acting as the caller and
renders the page; errors are HTML pages with the matching status. It is a door of the
REST layer's kit: its route table, :attr:`AsyncDashboard.ROUTES` (a row per page, its
handler the page's own), is what the FastAPI, Flask and Django bindings mount.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlencode

from skiplock.core import (
    HealthReport,
    JobNotFoundError,
    JobPage,
    JobState,
    StateCount,
)
from skiplock.core.rules import (
    Throughput,
    check_duration,
    check_int,
    throughput_window,
    to_duration,
)
from skiplock.engine import AsyncEngine, AsyncOperator, AsyncReader

from ..rest import AsyncDoor, Permission, Problem, Request, Response
from ..rest._problems import Conflict
from ..rest._routes import AsyncRouteRow
from ..rest._support import keyset_page
from . import _actions, _browse, _charts, _controls, _csrf, _render, _retention, _workers
from ._buttons_async import AsyncButtons
from ._cache_async import AsyncReadCache
from ._visit import Visit, error, html, job_id_of, notice, one, redirect

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..rest import AsyncAuthorize
    from ..rest._routes import AsyncRouteHandler

    #: What a page shows (its template's context), or a response of its own (a redirect).
    Built = dict[str, Any] | Response

#: Every page: its path under the mount point (a route's parameters in braces), method
#: and the permission it needs (None: none, the stylesheet).
PAGES: Mapping[str, tuple[str, str, Permission | None]] = {
    "overview": ("/", "GET", Permission.READ),
    "jobs": ("/jobs", "GET", Permission.READ),
    "dead": ("/dead", "GET", Permission.READ),
    "charts": ("/charts", "GET", Permission.READ),
    "job": ("/jobs/{job_id}", "GET", Permission.READ),
    "retry": ("/jobs/{job_id}/retry", "POST", Permission.WRITE),
    "cancel": ("/jobs/{job_id}/cancel", "POST", Permission.WRITE),
    "fail": ("/jobs/{job_id}/fail", "POST", Permission.WRITE),
    "delete": ("/jobs/{job_id}/delete", "POST", Permission.WRITE),
    "bulk": ("/bulk", "POST", Permission.WRITE),
    "controls": ("/controls", "GET", Permission.READ),
    "pause": ("/controls/pause", "POST", Permission.WRITE),
    "resume": ("/controls/resume", "POST", Permission.WRITE),
    "limit": ("/controls/limit", "POST", Permission.WRITE),
    "unlimit": ("/controls/unlimit", "POST", Permission.WRITE),
    "concurrency": ("/controls/concurrency", "POST", Permission.WRITE),
    "unconcurrency": ("/controls/concurrency/clear", "POST", Permission.WRITE),
    "workers": ("/workers", "GET", Permission.READ),
    "drain": ("/workers/drain", "POST", Permission.WRITE),
    "stopworker": ("/workers/stop", "POST", Permission.WRITE),
    "retention": ("/retention", "GET", Permission.READ),
    "script": ("/static/dashboard.js", "GET", None),
    "static": ("/static/dashboard.css", "GET", None),
}


def mount_root(page: str, request: Request) -> str:
    """The path of the dashboard's mount point, from the request's path (no trailing
    slash: ``""`` at the root of the site)."""
    suffix = PAGES[page][0].format(**request.path_params)
    path = request.path
    if page == "overview":
        return path.rstrip("/")
    return path[: -len(suffix)] if path.endswith(suffix) else ""


class AsyncBuild(Protocol):
    """A page's handler: what it shows, read through the caller's operator (or the
    dashboard's reader)."""

    async def __call__(
        self, dashboard: AsyncDashboard, reads: AsyncOperator | AsyncReader, visit: Visit, /
    ) -> Built: ...


class AsyncAct(Protocol):
    """A button's handler: it acts through the caller's operator, then answers."""

    async def __call__(
        self, dashboard: AsyncDashboard, ops: AsyncOperator, visit: Visit, /
    ) -> Response: ...


class AsyncView(Protocol):
    """What answers a visit within the frame of every page (:meth:`AsyncDashboard._serve`)."""

    async def __call__(self, visit: Visit, /) -> Response: ...


def _page(page: str, build: AsyncBuild) -> AsyncRouteRow[AsyncDashboard]:
    """The route of a read page of :data:`PAGES`, built by ``build``."""

    async def answer(dashboard: AsyncDashboard, request: Request) -> Response:
        view = functools.partial(dashboard._read, build)
        return await dashboard._serve(page, request, view)

    return _route(page, answer)


def _button(page: str, act: AsyncAct) -> AsyncRouteRow[AsyncDashboard]:
    """The route of a button (a write page of :data:`PAGES`), applied by ``act``."""

    async def answer(dashboard: AsyncDashboard, request: Request) -> Response:
        view = functools.partial(dashboard._write, act)
        return await dashboard._serve(page, request, view)

    return _route(page, answer)


def _route(page: str, handler: AsyncRouteHandler[AsyncDashboard]) -> AsyncRouteRow[AsyncDashboard]:
    path, method, _ = PAGES[page]
    return AsyncRouteRow(name=page, method=method, path=path, handler=handler)


class AsyncDashboard(AsyncButtons):
    """The web dashboard of an :class:`~skiplock.AsyncEngine`, framework-neutral.

    ``authorize`` is required (deny by default; TypeError without it): called with each
    request and the permission it needs, ``read`` for every page and ``write`` for the
    Retry and Discard buttons, it returns the caller's identity (the actor the audit trail
    records for a button's change), None for a 401, or raises ``Forbidden`` for a 403.
    Pages also ask it for ``write`` to decide whether to show the buttons.

    ``refresh`` (seconds, default 10; None: never) is how often the pages' live regions
    refresh in place (the package's script; its bar has a pause switch) and, without
    JavaScript, how often the overview reloads itself (``?live=off`` pauses it);
    ``page_size`` is the number of jobs per list page; ``window`` and ``bucket`` are
    those of the throughput chart
    (:meth:`AsyncEngine.throughput <skiplock.AsyncEngine.throughput>`).
    ``csrf_secret`` keys the forms' tokens (bound to the caller): give every process
    that serves the dashboard the same one (default: a random one per dashboard, so a
    page from one process posts only to that process). ``form_fields`` is the door's:
    given a page's request, the hidden fields every form of the page carries besides the
    dashboard's token (a framework's own CSRF token: the Django binding's).
    ``cache`` (seconds, default 1; 0: off) is how long the summaries every page reads (the
    counts, the health report, the throughput chart) and the list pages (per filter and
    cursor) are shared between visitors: one database read serves every browser of that
    second, and a stale one is served while it is read again (docs/dashboard.md, "Many
    visitors, dead rows"); a button clears it.

    Over an :class:`~skiplock.engine.AsyncReader` (a store that implements only the reads
    role, e.g. over a read replica) it serves the read pages and refuses every button
    (403: read-only).
    """

    logger = logging.getLogger("skiplock.dashboard")
    label = "dashboard"

    serves = (AsyncEngine, AsyncReader)

    def __init__(
        self,
        engine: AsyncEngine | AsyncReader,
        *,
        authorize: AsyncAuthorize,
        refresh: int | None = 10,
        page_size: int = 50,
        window: timedelta | float = timedelta(hours=1),
        bucket: timedelta | float = timedelta(minutes=1),
        csrf_secret: bytes | str | None = None,
        form_fields: Callable[[Request], Mapping[str, str]] | None = None,
        cache: timedelta | float = 1.0,
    ) -> None:
        super().__init__(engine, authorize=authorize)
        self._csrf_secret = _csrf.secret(csrf_secret)
        self._form_fields = form_fields
        self._refresh = None if refresh is None else check_int("refresh", refresh, minimum=1)
        self._page_size = check_int("page_size", page_size, minimum=1, maximum=1000)
        self._window = check_duration("window", to_duration(window))
        self._bucket = check_duration("bucket", to_duration(bucket))
        throughput_window(datetime.now(UTC), self._window, self._bucket)  # refused now
        seconds = check_duration("cache", to_duration(cache), allow_zero=True)
        deadline = engine.settings.request_timeout.total_seconds()
        self._cache = AsyncReadCache(seconds.total_seconds(), deadline=deadline)

    async def handle(self, page: str, request: Request) -> Response:
        """The response to ``request`` for ``page`` (a key of :data:`PAGES`), by its row
        of :attr:`ROUTES`. The hook is asked first, before anything is read or changed;
        every error is an HTML page with its status (an unexpected one a 500, logged on
        ``skiplock.dashboard``); a database that does not answer within the engine's
        ``request_timeout`` gets a 503 page with ``Retry-After`` in time."""
        return await _BY_NAME[page].handler(self, request)

    def problem_response(self, problem: Problem, request: Request) -> Response:
        """A problem of the fallback (404, 405) as an HTML page."""
        rest = request.path_params.get("path", "")
        root = request.path[: len(request.path) - len(rest)].rstrip("/")
        return error(problem, {"root": root})

    # ---- the frame of every page ----------------------------------------------------------

    async def _serve(self, page: str, request: Request, view: AsyncView) -> Response:
        """``view``'s answer to the visit of ``page``, within the request's deadline; its
        errors as HTML pages."""
        root = mount_root(page, request)
        context: dict[str, Any] = {"root": root, "identity": None, "can_write": False}
        return await self.in_time(
            functools.partial(self._guarded, view, Visit(page, request, root, context)),
            lambda problem: error(problem, {"root": root}),
        )

    async def _guarded(self, view: AsyncView, visit: Visit) -> Response:
        try:
            return await view(visit)
        except _actions.Stale as stale:
            visit.context["current"] = stale.job
            job_page = f"{visit.root}/jobs/{stale.job.id}"
            return error(Conflict(str(stale)), visit.context, back=job_page)
        except Exception as exc:
            # The REST API's problems: an engine error's, the hook's, or a logged 500.
            problem = self.failure(exc, visit.request)
            back = f"{visit.root}/dead" if problem.status == 409 else None
            return error(problem, visit.context, back=back)

    async def _write(self, act: AsyncAct, visit: Visit) -> Response:
        """A button: ``act`` through the caller's operator, once the hook grants
        ``write``."""
        ops = await self.operator(visit.request, Permission.WRITE)
        self._cache.clear()  # the page the button redirects to shows its change
        visit.context["identity"] = ops.actor
        # A caller the hook let write: its error pages (403, 409) must not say "read only".
        visit.context["can_write"] = True
        return await act(self, ops, visit)

    async def _read(self, build: AsyncBuild, visit: Visit) -> Response:
        """A page: what ``build`` reads through the caller's operator (or the reader),
        once the hook grants ``read``, rendered."""
        request, context = visit.request, visit.context
        identity, reads = await self.reads(request)
        context["identity"] = identity
        context["can_write"] = await self._may_write(request)
        token = _csrf.cookie_token(request)
        if token is None or not _csrf.valid_for(token, self._csrf_secret, identity):
            token = _csrf.new_token(self._csrf_secret, identity)
            secure = request.scheme == "https"
            cookie = {"Set-Cookie": _csrf.set_cookie(token, visit.root or "/", secure=secure)}
        else:
            cookie = {}
        fields = self._hidden(request, token)
        # The live regions' refresh (dashboard.js), every page's: None turns it off.
        context |= {"notice": notice(request), "refresh": None, "live_every": self._refresh}
        now = _render.when(datetime.now(UTC))
        if visit.page not in _render.SHARED_PAGES:
            built = await self._built(build, reads, visit, fields, now)
        else:
            # Pages of shared reads are rendered once per caller's view (who, whether
            # they may write, the query) for the cache's time; this visit's own form
            # fields and time go in afterwards.
            query = tuple(sorted((k, tuple(v)) for k, v in request.query.items()))
            key = ("page", visit.page, visit.root, identity, context["can_write"], query)
            marks = _render.MARK_FIELDS, _render.MARK_NOW

            async def shared() -> tuple[int, bytes] | Response:
                return await self._built(build, reads, visit, *marks)

            built = await self._cache.get(key, shared)
            if not isinstance(built, Response):
                built = built[0], _render.fill(built[1], fields, now)
        if isinstance(built, Response):
            return built
        return html(*built, cookie)

    async def _built(
        self,
        build: AsyncBuild,
        reads: AsyncOperator | AsyncReader,
        visit: Visit,
        fields: list[tuple[str, str]],
        now: str,
    ) -> tuple[int, bytes] | Response:
        """What ``build`` reads, rendered with the page's ``fields`` and time."""
        built = await build(self, reads, visit)
        if isinstance(built, Response):
            return built
        context = visit.context | {"form_fields": fields, "now": now} | built
        status = 404 if context["page"] == "gone" else 200
        return status, _render.render(f"{context['page']}.html", context)

    async def _may_write(self, request: Request) -> bool:
        """Whether the hook grants ``write`` (to show the buttons)."""
        try:
            await self.authorize(request, Permission.WRITE)
        except Problem:
            return False
        return True

    async def _stylesheet(self, request: Request) -> Response:
        return Response(200, _render.stylesheet(), "text/css; charset=utf-8")

    async def _script(self, request: Request) -> Response:
        return Response(200, _render.script(), "text/javascript; charset=utf-8")

    # ---- pages --------------------------------------------------------------------------

    async def _counts(self, reads: AsyncOperator | AsyncReader) -> list[StateCount]:
        """The counts, shared between visitors (:class:`AsyncReadCache`)."""
        return await self._cache.get("counts", reads.counts)

    async def _health(self, reads: AsyncOperator | AsyncReader) -> HealthReport:
        """The health report with the default thresholds, shared between visitors."""
        return await self._cache.get("health", reads.health)

    async def _overview(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        counts = await self._counts(reads)
        report = await self._health(reads)

        async def throughput_read() -> Throughput:
            return await reads.throughput(window=self._window, bucket=self._bucket)

        throughput = await self._cache.get("throughput", throughput_read)
        live = _browse.one(visit.request.query, "live") != "off"
        return _render.overview(counts, report, throughput) | {
            "refresh": self._refresh if live else None,
            "live": live if self._refresh else None,
        }

    async def _dead(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        query = visit.request.query
        kind = one(query, "kind") or None
        cursor = one(query, "after")
        after_id = int(cursor) if cursor and cursor.isascii() and cursor.isdigit() else None

        async def dead_read() -> JobPage:
            return await reads.dead_jobs(kind=kind, limit=self._page_size + 1, after_id=after_id)

        # A list page is shared between visitors as the summaries are (per kind and cursor).
        read = await self._cache.get(("dead", kind, after_id), dead_read)
        jobs, after = keyset_page(read, self._page_size)
        kinds = sorted({c.kind for c in await self._counts(reads) if c.state is JobState.DEAD})
        kept = {"kind": kind} if kind else {}
        return {
            "page": "dead",
            "jobs": jobs,
            "kind": kind,
            "kinds": kinds,
            "next_cursor": after,
            "partial": read.resume_after is not None,
            "next_query": urlencode(kept | ({} if after is None else {"after": after})),
        }

    async def _jobs(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        query = visit.request.query
        wanted = _browse.job_id(_browse.one(query, "id"))
        if wanted is not None:  # the id field: straight to the job's page
            return redirect(f"{visit.root}/jobs/{wanted}")
        # The database's clock splits due jobs from scheduled ones; other filters need none.
        due = _browse.one(query, "state") in _browse.DUE_STATES
        now = await self.source.store.now() if due else datetime.now(UTC)
        shown = _browse.parse_filter(query, now)
        after = _browse.cursor(_browse.one(query, "after"))
        size = self._page_size

        async def list_read() -> JobPage:
            return await reads.list_jobs(**shown.arguments, limit=size + 1, after_id=after)

        # Shared between visitors per filter (as typed) and cursor, as the summaries are.
        key = ("jobs", tuple(sorted(shown.values.items())), after)
        read = await self._cache.get(key, list_read)
        counts = await self._counts(reads)
        listed = _browse.page(read, size, read.resume_after)
        return _render.jobs_page(shown, listed, counts)

    async def _charts_page(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        name, length, bucket = _charts.window(_browse.one(visit.request.query, "window"))
        history = await reads.history(window=length, bucket=bucket)
        return _charts.page(history, name)

    async def _controls_page(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        counts = await self._counts(reads)
        throttled = (await self._health(reads)).throttled
        controls = await reads.paused(), await reads.limits()
        concurrency = await reads.concurrency_limits()
        return _controls.page(counts, *controls, throttled, concurrency)

    async def _workers_page(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        # Read afresh, not from the shared cache: the page right after a Drain or Stop
        # shows the request.
        report = await reads.health()
        jobs = await reads.worker_jobs() if report.workers else {}
        return _workers.page(report, jobs)

    async def _retention_page(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        return _retention.page(await reads.retention())

    async def _job(self, reads: AsyncOperator | AsyncReader, visit: Visit) -> Built:
        job_id = job_id_of(visit.request)
        try:
            job = await reads.get_job(job_id)
        except JobNotFoundError:
            # A deleted (discarded) job: its audit trail outlives it (404 with the trail).
            trail = await reads.audit_trail(job_id)
            if not trail:
                raise
            audit = _render.audit_rows(trail)
            return {"page": "gone", "job_id": job_id, "audit": audit, "audit_on": True}
        events = await reads.audit_trail(job_id)
        # A pending job says why it has not started (issue 45): the claim's rules.
        wait = await reads.why(job_id) if job.state is JobState.PENDING else None
        return {
            "page": "job",
            "job": job,
            "wait": wait,
            "payload": _render.payload_text(job),
            "result": _render.json_text(job.result),
            "audit": _render.audit_rows(events),
            "audit_on": self.source.settings.audit,
        }

    #: A row per page of :data:`PAGES` (in its order, named by the page), then the
    #: fallback (404 and 405 pages for other paths under the mount point).
    ROUTES = (
        _page("overview", _overview),
        _page("jobs", _jobs),
        _page("dead", _dead),
        _page("charts", _charts_page),
        _page("job", _job),
        _button("retry", AsyncButtons._change),
        _button("cancel", AsyncButtons._change),
        _button("fail", AsyncButtons._change),
        _button("delete", AsyncButtons._change),
        _button("bulk", AsyncButtons._bulk),
        _page("controls", _controls_page),
        *(_button(name, AsyncButtons._set_control) for name in _controls.BY_PAGE),
        _page("workers", _workers_page),
        *(_button(name, AsyncButtons._ask_worker) for name in _workers.BY_PAGE),
        _page("retention", _retention_page),
        _route("script", _script),
        _route("static", _stylesheet),
        AsyncDoor.FALLBACK,
    )


#: The rows of :attr:`AsyncDashboard.ROUTES` by name: what :meth:`~AsyncDashboard.handle`
#: dispatches through.
_BY_NAME: Mapping[str, AsyncRouteRow[AsyncDashboard]] = {
    row.name: row for row in AsyncDashboard.ROUTES
}
