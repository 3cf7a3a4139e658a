"""The dashboard's buttons, framework- and flavour-neutral (shared by the async and the
sync dashboard): which action each write page applies, what a form must carry (the state
and version of the job it was rendered for), and what the page says afterwards.

A button never acts on a job that changed since its page was rendered: the form carries
the job's state and :func:`~._render.version`; the dashboard compares them with the job
as it is, then applies the action only in that state (``act_on_jobs(states=...)``,
checked again in the statement that changes the job).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from skiplock.core import Job, JobState
from skiplock.core.rules import action_states

from ..rest._problems import BadRequest, Conflict
from . import _render

if TYPE_CHECKING:
    from collections.abc import Mapping


@attrs.frozen
class Write:
    """A write page's row: the operator call it applies, the ``done`` parameter of the
    redirect after it, and what the page then says."""

    call: str
    done: str
    notice: str


#: The job buttons by write page (``call``: the ``AsyncOperator.act_on_jobs`` action).
BY_PAGE: Mapping[str, Write] = {
    "retry": Write("retry", "retried", "retried: it is pending again"),
    "cancel": Write("cancel", "cancelled", "cancelled"),
    "fail": Write("fail", "failed", "marked failed"),
    "delete": Write("discard", "discarded", "discarded"),
}
#: The same rows by action (the bulk page names the action).
BY_ACTION: Mapping[str, Write] = {write.call: write for write in BY_PAGE.values()}
#: What the notice after a redirect says, by the ``done`` query parameter.
DONE: Mapping[str, str] = {write.done: write.notice for write in BY_PAGE.values()}


class Stale(Exception):
    """A button sent for a job that changed since its page was rendered (a 409 page
    showing the job as it is now)."""

    def __init__(self, job: Job, shown: JobState) -> None:
        super().__init__(
            f"Job {job.id} changed since this page was loaded: it is {job.state.value} now "
            f"(the button was for a {shown.value} job). Nothing was done."
        )
        self.job = job


def rendered_for(action: str, state: str | None, version: str | None) -> tuple[JobState, str]:
    """The state and version a button's form says its job had: BadRequest without them,
    Conflict when the action is not offered in that state (a forged form)."""
    try:
        shown = JobState(state or "")
    except ValueError:
        raise BadRequest("the form does not say which state the job was in") from None
    if shown not in action_states(action) or not version:
        raise Conflict(f"{action} is not offered for {shown.value} jobs")
    return shown, version


def check_unchanged(job: Job, shown: JobState, version: str) -> None:
    """Stale unless ``job`` is still as the button's page showed it."""
    if job.state is not shown or _render.version(job) != version:
        raise Stale(job, shown)
