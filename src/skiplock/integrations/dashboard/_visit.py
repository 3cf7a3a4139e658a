"""One visit of a dashboard page and the responses it gets: shared by the async
dashboard (``_views_async.py``), its sync twin and their buttons (``_buttons_async.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import attrs

from skiplock.core import JobNotFoundError
from skiplock.core.rules import INT8_RANGE

from ..rest import Problem, Request, Response
from . import _actions, _controls, _render, _workers

if TYPE_CHECKING:
    from collections.abc import Mapping


@attrs.frozen
class Visit:
    """One request for a page: its name, the request, the dashboard's mount point and the
    context of the page (or its error page) so far."""

    page: str
    request: Request
    root: str
    context: dict[str, Any]


def job_id_of(request: Request) -> int:
    text = request.path_params.get("job_id", "")
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= INT8_RANGE[1]:
        raise JobNotFoundError(f"no job with id {text[:40]}")
    return int(text)


def one(query: Mapping[str, tuple[str, ...]], name: str) -> str | None:
    values = query.get(name)
    return values[-1] if values else None


def controlled(visit: Visit) -> Response:
    """Back to the controls page, which says what the control did."""
    done = _controls.BY_PAGE[visit.page].done
    return redirect(f"{visit.root}/controls?{urlencode({'done': done})}")


def redirect(location: str) -> Response:
    return Response(303, b"", "text/plain; charset=utf-8", {"Location": location})


def field(form: Mapping[str, list[str]], name: str) -> str | None:
    values = form.get(name)
    return values[-1] if values else None


def notice(request: Request) -> str | None:
    """The message after a button's redirect (fixed texts; the job id is a number)."""
    done_query = one(request.query, "done") or ""
    control = _controls.DONE.get(done_query) or _workers.DONE.get(done_query)
    if control is not None:
        return control
    done = _actions.DONE.get(one(request.query, "done") or "")
    if done is None:
        return None
    count = one(request.query, "count")
    if count is not None:
        word = done.split(":")[0]
        return f"{count} jobs {word}." if count.isascii() and count.isdigit() else None
    job = one(request.query, "job") or request.path_params.get("job_id", "")
    return f"Job {job} {done}." if job.isascii() and job.isdigit() else None


def html(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Response:
    return Response(status, body, _render.HTML_TYPE, {**_render.PAGE_HEADERS, **(headers or {})})


def error(problem: Problem, context: Mapping[str, Any], *, back: str | None = None) -> Response:
    page = {
        "root": context.get("root", ""),
        "identity": context.get("identity"),
        "can_write": context.get("can_write", False),
        "page": "error",
        "refresh": None,
        "live_every": None,
        "notice": None,
        "now": "",
        "status": problem.status,
        "title": problem.title,
        "detail": problem.detail,
        "back": back,
        "current": context.get("current"),
    }
    return html(problem.status, _render.render("error.html", page), problem.headers)
