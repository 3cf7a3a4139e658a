"""The dashboard's buttons (async source; ``_buttons.py`` is the sync twin): a job's
Retry, Cancel, Fail and Discard, the controls (pause, resume, set or clear a limit) and
the bulk actions, each through the caller's operator once its form passed the CSRF checks.
:class:`AsyncButtons` is a part of :class:`~._views_async.AsyncDashboard`, which routes
to them.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlencode

from skiplock.engine import AsyncOperator, SelectionChangedError

from ..rest import AsyncDoor, Forbidden, Request, Response
from ..rest._problems import InvalidRequest, NotFound
from . import _actions, _browse, _controls, _csrf, _render, _workers
from ._visit import Visit, controlled, field, html, job_id_of, redirect

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from skiplock.core import JobState


class AsyncButtons(AsyncDoor):
    """The buttons of :class:`~._views_async.AsyncDashboard`, and the hidden fields of
    every form (the dashboard's constructor sets the secret and the door's fields)."""

    _csrf_secret: bytes
    _form_fields: Callable[[Request], Mapping[str, str]] | None

    def _hidden(self, request: Request, token: str) -> list[tuple[str, str]]:
        """The hidden fields of the page's forms: the dashboard's CSRF token, then the
        door's (``form_fields``)."""
        door = self._form_fields(request) if self._form_fields is not None else {}
        return [(_csrf.FIELD, token), *door.items()]

    # ---- buttons --------------------------------------------------------------------------

    async def _change(self, ops: AsyncOperator, visit: Visit) -> Response:
        """Apply the button's action to the job through ``ops`` (the caller's operator),
        then redirect (303) to the page the form names.

        The form carries the state and version the job had when the button was rendered:
        a job that changed since is left alone (409, and the page says what it is now),
        and the action applies only in that state (checked again in the statement that
        changes the job), so a stale Discard never deletes a job replayed meanwhile."""
        form, root = self._form(visit.request, ops), visit.root
        job_id = job_id_of(visit.request)
        action = _actions.BY_PAGE[visit.page].call
        state, seen = _actions.rendered_for(action, field(form, "state"), field(form, "version"))
        _actions.check_unchanged(await ops.get_job(job_id), state, seen)
        if not await ops.act_on_jobs(action, [job_id], states=[state]):
            raise _actions.Stale(await ops.get_job(job_id), state)  # changed in between
        done = _actions.BY_ACTION[action].done
        target = field(form, "next")
        if target == "job" and action != "discard":
            location = f"{root}/jobs/{job_id}?{urlencode({'done': done})}"
        else:
            location = f"{root}/dead?{urlencode({'done': done, 'job': job_id})}"
        return redirect(location)

    # The controls: pause, resume, set or clear a limit or a concurrency limit through
    # ``ops`` (the caller's operator: the caller is the change's actor, audited), then back
    # to the controls page.

    async def _set_control(self, ops: AsyncOperator, visit: Visit) -> Response:
        """A control's button: the operator call of its page (``_controls.BY_PAGE``)."""
        change = getattr(ops, _controls.BY_PAGE[visit.page].call)
        await change(**self._control(ops, visit))
        return controlled(visit)

    async def _ask_worker(self, ops: AsyncOperator, visit: Visit) -> Response:
        """A worker's Drain or Stop button (``_workers.BY_PAGE``): the request through the
        caller's operator, then back to the workers page; a worker gone is a 404."""
        write = _workers.BY_PAGE[visit.page]
        arguments = _workers.arguments(self._form(visit.request, ops))
        if await getattr(ops, write.call)(**arguments) is None:
            raise NotFound(f"no worker {arguments['worker_id']!r} is registered")
        return redirect(f"{visit.root}/workers?{urlencode({'done': write.done})}")

    def _control(self, ops: AsyncOperator, visit: Visit) -> dict[str, Any]:
        """The arguments of a control's operator call, from its form."""
        return _controls.arguments(visit.page, self._form(visit.request, ops))

    def _form(self, request: Request, ops: AsyncOperator) -> dict[str, list[str]]:
        """The fields of a button's form, once it passed the CSRF checks."""
        _csrf.check_same_origin(request)
        if request.media_type != "application/x-www-form-urlencoded":
            raise Forbidden("send the dashboard's form")
        fields = _browse.BULK_BATCH + 20
        form = parse_qs(request.body.decode(errors="replace"), max_num_fields=fields)
        _csrf.check_token(request, field(form, _csrf.FIELD), self._csrf_secret, ops.actor or "")
        return form

    async def _bulk(self, ops: AsyncOperator, visit: Visit) -> Response:
        """A bulk action on the ticked jobs, or on the jobs the filter matches: first a
        page that says how many and asks to confirm, then the action on exactly those
        (each job audited) and a page that says which changed and which were skipped.

        A confirmation is bound to what it showed: the ticked jobs in the states they were
        listed in, or the filter's matches up to the last id the search covered, their
        number and digest. If that set changed meanwhile, a 409 page says how many match
        now and nothing changes. The search reads at most ``BULK_LIMIT`` jobs per request
        (as a list page, it may stop early and offers to continue)."""
        context = visit.context
        form = self._form(visit.request, ops)
        shown = _browse.parse_filter(form, await self.source.store.now())
        action = _browse.one(form, "action")
        states = _browse.bulk_states(action, shown.states)
        act = _browse.one(form, "confirm") == "yes"
        walk: _browse.Walk | None = None
        if _browse.one(form, "scope") == "selected":
            chosen = {
                job_id: state
                for state, ids in _browse.selected(form).items()
                if state in states
                for job_id in ids
            }
        else:
            after = _browse.cursor(_browse.one(form, "after"))
            through = _browse.cursor(_browse.one(form, "through")) if act else None
            if act and through is None:
                raise InvalidRequest("the form does not say which jobs were confirmed")
            walk = await self._walk(ops, shown, states, after, through)
            chosen = dict(walk.jobs)
        done = _actions.BY_ACTION[action].notice.split(":")[0]
        page = functools.partial(_render.bulk_page, shown, form, action, walk=walk, done=done)
        status, result, changed = 200, None, None
        if act:
            count, digest = _browse.confirmed(form)
            if walk is not None and (len(chosen) != count or walk.digest != digest):
                # The search found other jobs: offer to confirm those it found.
                changed = SelectionChangedError("", count=len(chosen), confirmed=count)
                context |= page(len(chosen), changed=changed, offer=True)
            else:
                try:
                    result = await ops.act_as_confirmed(action, chosen)
                except SelectionChangedError as refused:
                    # A job changed after the search: search again from the list.
                    changed = refused
                    context |= page(refused.count, changed=refused, offer=False)
        if changed is not None:
            status = 409
        else:
            context |= page(len(chosen), result=result)
        context["form_fields"] = self._hidden(visit.request, field(form, _csrf.FIELD) or "")
        context |= {"refresh": None, "notice": None}
        context |= {"now": _render.when(datetime.now(UTC)), "can_write": True}
        return html(status, _render.render("bulk.html", context))

    async def _walk(
        self,
        ops: AsyncOperator,
        shown: _browse.Filter,
        states: frozenset[JobState],
        after: int | None,
        through: int | None,
    ) -> _browse.Walk:
        """The jobs after ``after`` the filter matches in ``states``, a page of
        ``list_jobs`` at a time. Up to ``through`` when given (a confirmation's bound);
        else a bounded search, as a list page's: it stops where a page of ``list_jobs``
        stopped early (the store's read budget), after ``BULK_LIMIT`` jobs read or
        matched, and says so (``more``)."""
        found: dict[int, JobState] = {}
        last, read_count = after, 0
        while True:
            read = await ops.list_jobs(**shown.arguments, limit=_browse.BULK_BATCH, after_id=last)
            for job in read:
                if through is not None and job.id > through:
                    return _browse.Walk(found, through, more=False)
                if job.state in states:
                    found[job.id] = job.state
                last, read_count = job.id, read_count + 1
                if len(found) >= _browse.BULK_LIMIT:  # a confirmation's most
                    return _browse.Walk(found, last, more=through is None)
            following = read.next_after(_browse.BULK_BATCH)
            if following is None:
                return _browse.Walk(found, through or last, more=False)
            last = following
            if through is not None:
                if last >= through:
                    return _browse.Walk(found, through, more=False)
            elif read.resume_after is not None or read_count >= _browse.BULK_LIMIT:
                return _browse.Walk(found, last, more=True)
