"""The dashboard's pages over an engine (async source; ``_views.py`` is the sync twin).

:class:`AsyncDashboard` turns a framework-neutral request for one of its :data:`PAGES`
into an HTML response: it asks the authorization hook first (``read`` for a page,
``write`` for a button), reads the engine's admin API and renders the page; errors are
HTML pages with the matching status. The FastAPI and Flask bindings route to it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from skiplock.core import JobNotFoundError, JobState, SkiplockError
from skiplock.core._throughput import throughput_window
from skiplock.core._validation import INT8_RANGE, check_duration, check_int, to_duration

from ..rest import AsyncRestApi, Forbidden, Permission, Problem, Request, Response, problem_for
from . import _csrf, _render

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.engine import AsyncEngine

    from ..rest import AsyncAuthorize

logger = logging.getLogger("skiplock.dashboard")

#: Every page: its path under the mount point (a route's parameters in braces), method
#: and the permission it needs (None: none, the stylesheet).
PAGES: Mapping[str, tuple[str, str, Permission | None]] = {
    "overview": ("/", "GET", Permission.READ),
    "dead": ("/dead", "GET", Permission.READ),
    "job": ("/jobs/{job_id}", "GET", Permission.READ),
    "retry": ("/jobs/{job_id}/retry", "POST", Permission.WRITE),
    "delete": ("/jobs/{job_id}/delete", "POST", Permission.WRITE),
    "static": ("/static/dashboard.css", "GET", None),
}
#: The job states whose page offers Retry and Discard.
REPLAYABLE = frozenset({JobState.DEAD, JobState.FAILED, JobState.CANCELLED})
_DONE = {"retried": "retried: it is pending again", "discarded": "discarded"}


def mount_root(page: str, request: Request) -> str:
    """The path of the dashboard's mount point, from the request's path (no trailing
    slash: ``""`` at the root of the site)."""
    suffix = PAGES[page][0].format(**request.path_params)
    path = request.path
    if page == "overview":
        return path.rstrip("/")
    return path[: -len(suffix)] if path.endswith(suffix) else ""


def _job_id(request: Request) -> int:
    text = request.path_params.get("job_id", "")
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= INT8_RANGE[1]:
        raise JobNotFoundError(f"no job with id {text[:40]}")
    return int(text)


def _one(query: Mapping[str, tuple[str, ...]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


class AsyncDashboard:
    """The web dashboard of an :class:`~skiplock.AsyncEngine`, framework-neutral.

    ``authorize`` is required (deny by default; TypeError without it): called with each
    request and the permission it needs, ``read`` for every page and ``write`` for the
    Retry and Discard buttons, it returns the caller's identity (the actor the audit trail
    records for a button's change), None for a 401, or raises ``Forbidden`` for a 403.
    Pages also ask it for ``write`` to decide whether to show the buttons.

    ``refresh`` (seconds) makes the overview reload itself; ``page_size`` is the number of
    dead jobs per page; ``window`` and ``bucket`` are those of the throughput chart
    (:meth:`AsyncEngine.throughput <skiplock.AsyncEngine.throughput>`).
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        authorize: AsyncAuthorize,
        refresh: int | None = None,
        page_size: int = 50,
        window: timedelta | float = timedelta(hours=1),
        bucket: timedelta | float = timedelta(minutes=1),
    ) -> None:
        # The REST API's authorization: the same checks of the engine and the hook, and
        # the same rules for what the hook returns.
        self._api = AsyncRestApi(engine, authorize=authorize)
        self._engine = engine
        self._refresh = None if refresh is None else check_int("refresh", refresh, minimum=1)
        self._page_size = check_int("page_size", page_size, minimum=1, maximum=1000)
        self._window = check_duration("window", to_duration(window))
        self._bucket = check_duration("bucket", to_duration(bucket))
        throughput_window(datetime.now(UTC), self._window, self._bucket)  # refused now

    @property
    def engine(self) -> AsyncEngine:
        """The engine the dashboard shows."""
        return self._engine

    async def handle(self, page: str, request: Request) -> Response:
        """The response to ``request`` for ``page`` (a key of :data:`PAGES`). The hook is
        asked first, before anything is read or changed; every error is an HTML page
        with its status (an unexpected one a 500, logged on ``skiplock.dashboard``)."""
        root = mount_root(page, request)
        if page == "static":
            return Response(200, _render.stylesheet(), "text/css; charset=utf-8")
        permission = PAGES[page][2]
        assert permission is not None
        context: dict[str, Any] = {"root": root, "identity": None, "can_write": False}
        token = _csrf.cookie_token(request)
        try:
            identity = await self._identity(request, permission)
            context["identity"] = identity
            if permission is Permission.WRITE:
                return await self._change(page, request, root, identity)
            context["can_write"] = await self._may_write(request)
            if token is None:
                token = _csrf.new_token()
                cookie = {"Set-Cookie": _csrf.set_cookie(token, root or "/")}
            else:
                cookie = {}
            context |= {"csrf": token, "notice": _notice(request), "refresh": None}
            context["now"] = _render.when(datetime.now(UTC))
            if page == "overview":
                context |= await self._overview()
                context["refresh"] = self._refresh
            elif page == "dead":
                context |= await self._dead(request)
            else:
                context |= await self._job(_job_id(request))
            return _html(200, _render.render(f"{context['page']}.html", context), cookie)
        except Problem as problem:
            return _error(problem.status, problem.title, problem.detail, context, problem.headers)
        except SkiplockError as exc:
            answer = problem_for(exc)
            back = f"{root}/dead" if answer.status == 409 else None
            return _error(answer.status, answer.title, answer.detail, context, back=back)
        except Exception:
            logger.exception("dashboard error on %s %s", request.method, request.path)
            detail = "an unexpected error; see the server's log"
            return _error(500, "Internal server error", detail, context)

    # ---- authorization ----------------------------------------------------------------

    async def _identity(self, request: Request, permission: Permission) -> str:
        return await self._api.authorize(request, permission)

    async def _may_write(self, request: Request) -> bool:
        """Whether the hook grants ``write`` (to show the buttons)."""
        try:
            await self._identity(request, Permission.WRITE)
        except Problem:
            return False
        return True

    # ---- pages --------------------------------------------------------------------------

    async def _overview(self) -> dict[str, Any]:
        counts = await self._engine.counts()
        report = await self._engine.health()
        throughput = await self._engine.throughput(window=self._window, bucket=self._bucket)
        return _render.overview(counts, report, throughput)

    async def _dead(self, request: Request) -> dict[str, Any]:
        kind = _one(request.query, "kind") or None
        cursor = _one(request.query, "after")
        after_id = int(cursor) if cursor and cursor.isascii() and cursor.isdigit() else None
        jobs = await self._engine.dead_jobs(kind=kind, limit=self._page_size + 1, after_id=after_id)
        more = len(jobs) > self._page_size
        jobs = jobs[: self._page_size]
        kinds = sorted({c.kind for c in await self._engine.counts() if c.state is JobState.DEAD})
        query = {"kind": kind} if kind else {}
        return {
            "page": "dead",
            "jobs": jobs,
            "kind": kind,
            "kinds": kinds,
            "next_cursor": jobs[-1].id if more else None,
            "next_query": urlencode(query | ({"after": jobs[-1].id} if more else {})),
        }

    async def _job(self, job_id: int) -> dict[str, Any]:
        job = await self._engine.get_job(job_id)
        events = await self._engine.audit_trail(job_id)
        return {
            "page": "job",
            "job": job,
            "payload": _render.payload_text(job),
            "audit": _render.audit_rows(events),
            "audit_on": self._engine.settings.audit,
            "replayable": job.state in REPLAYABLE,
        }

    # ---- buttons --------------------------------------------------------------------------

    async def _change(self, page: str, request: Request, root: str, identity: str) -> Response:
        """Retry or discard the job, as ``identity``, then redirect (303) to the page
        the form names."""
        _csrf.check_same_origin(request)
        if request.media_type != "application/x-www-form-urlencoded":
            raise Forbidden("send the dashboard's form")
        form = parse_qs(request.body.decode(errors="replace"), max_num_fields=10)
        _csrf.check_token(request, _field(form, _csrf.FIELD))
        job_id = _job_id(request)
        if page == "retry":
            await self._engine.retry_job(job_id, actor=identity)
            done = "retried"
        else:
            await self._engine.delete_job(job_id, actor=identity)
            done = "discarded"
        target = _field(form, "next")
        if target == "job" and page == "retry":
            location = f"{root}/jobs/{job_id}?{urlencode({'done': done})}"
        else:
            location = f"{root}/dead?{urlencode({'done': done, 'job': job_id})}"
        return Response(303, b"", "text/plain; charset=utf-8", {"Location": location})


def _field(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[-1] if values else None


def _notice(request: Request) -> str | None:
    """The message after a button's redirect (fixed texts; the job id is a number)."""
    done = _DONE.get(_one(request.query, "done") or "")
    if done is None:
        return None
    job = _one(request.query, "job") or request.path_params.get("job_id", "")
    return f"Job {job} {done}." if job.isascii() and job.isdigit() else None


def _html(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, body, _render.HTML_TYPE, {**_render.PAGE_HEADERS, **(headers or {})})


def _error(
    status: int,
    title: str,
    detail: str,
    context: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    *,
    back: str | None = None,
) -> Response:
    page = {
        "root": context.get("root", ""),
        "identity": context.get("identity"),
        "can_write": context.get("can_write", False),
        "page": "error",
        "refresh": None,
        "notice": None,
        "now": "",
        "status": status,
        "title": title,
        "detail": detail,
        "back": back,
    }
    return _html(status, _render.render("error.html", page), headers)
