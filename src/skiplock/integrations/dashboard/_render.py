"""The dashboard's pages as HTML: what each page shows, computed from the engine's data,
and the Jinja2 templates that render it (autoescaped: every value is HTML-escaped).

Pure functions of their arguments (no I/O but reading the packaged templates and the
stylesheet), shared by the async and the sync dashboard.
"""

from __future__ import annotations

import functools
import hashlib
import json
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import TYPE_CHECKING, Any, TypedDict

import attrs
import jinja2
import markupsafe

from skiplock.core import JobState
from skiplock.core.rules import action_states, format_duration

from . import _charts
from ._browse import BROWSE_STATES, BULK_BATCH, BULK_LIMIT, FILTER_FIELDS, Filter, Walk, one

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skiplock.core import AuditEvent, HealthReport, Job, StateCount
    from skiplock.core.rules import Throughput
    from skiplock.engine import BulkResult, SelectionChangedError


class DashboardOptions(TypedDict, total=False):
    """The options of a dashboard, as its bindings pass them on (see
    :class:`~skiplock.integrations.dashboard.AsyncDashboard`): the overview's
    ``refresh`` (seconds), the dead jobs per page, the throughput chart's ``window`` and
    ``bucket``, the ``csrf_secret`` of the forms' tokens, the shared read ``cache``
    (seconds)."""

    refresh: int | None
    page_size: int
    window: timedelta | float
    bucket: timedelta | float
    csrf_secret: bytes | str | None
    cache: timedelta | float


#: The states of the depth table, in lifecycle order.
STATES = tuple(JobState)
#: The content type of every page.
HTML_TYPE = "text/html; charset=utf-8"
#: Headers of every page: no script runs but the dashboard's own file (no inline one),
#: which may fetch only from the dashboard's origin; nothing is loaded from elsewhere,
#: forms post only to the dashboard, no other site may frame it, nothing is cached.
PAGE_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; "
        "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
#: A dead job's error is cut to its first line, and to this many characters, in the list
#: (the job's page has it all); so are the values of audit details.
SHORT_ERROR = 200

#: What a page shows for a missing value (an en dash).
DASH = "\u2013"

_CHART_WIDTH = 720
_CHART_HALF = 90  # pixels above the axis (succeeded) and below it (failures)


def when(value: datetime | None) -> str:
    """A time as shown on the pages (UTC), or a dash."""
    if value is None:
        return DASH
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def short(value: object) -> str:
    """The first line of ``value`` (as text), cut to :data:`SHORT_ERROR` characters."""
    if value is None or value == "":
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    lines = text.strip().splitlines() or [""]
    line = lines[0]
    if len(line) > SHORT_ERROR or len(lines) > 1:
        return line[: SHORT_ERROR - 1] + "\u2026"
    return line


@functools.cache
def environment() -> jinja2.Environment:
    """The templates, autoescaped (every ``{{ value }}`` is HTML-escaped)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("skiplock.integrations.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["short"] = short
    env.filters["buttons"] = buttons
    env.filters["version"] = version
    return env


def render(template: str, context: Mapping[str, Any]) -> bytes:
    """``template`` rendered with ``context``, as UTF-8."""
    return environment().get_template(template).render(**context).encode()


#: The pages whose reads the dashboard shares between visitors (its cache): each is
#: rendered once per caller's view and shared too, with marks in place of what is the
#: visit's own (its forms' hidden fields, the time), filled in per visit (:func:`fill`).
SHARED_PAGES = frozenset({"overview", "jobs", "dead"})
_MARK = f"skiplock-mark-{secrets.token_hex(16)}"
#: The hidden fields a shared page is rendered with, and the time.
MARK_FIELDS = [(_MARK, _MARK)]
MARK_NOW = f"{_MARK}-now"


def hidden_fields(fields: Sequence[tuple[str, str]]) -> str:
    """The hidden inputs of ``fields``: the ``hidden`` macro of _forms.html, which every
    form renders them with."""
    return str(environment().get_template("_forms.html").module.hidden(fields))  # type: ignore[attr-defined]


@functools.cache
def _marked_fields() -> bytes:
    return hidden_fields(MARK_FIELDS).encode()


def fill(body: bytes, fields: Sequence[tuple[str, str]], now: str) -> bytes:
    """A shared page's ``body`` with the visit's hidden ``fields`` and time."""
    return body.replace(_marked_fields(), hidden_fields(fields).encode()).replace(
        MARK_NOW.encode(), str(markupsafe.escape(now)).encode()
    )


@functools.cache
def stylesheet() -> bytes:
    """The dashboard's stylesheet (shipped in the package)."""
    return _static("dashboard.css")


@functools.cache
def script() -> bytes:
    """The dashboard's one script (shipped in the package): the live regions' refresh
    (docs/dashboard-pages.md, "Live"); every page works without it."""
    return _static("dashboard.js")


def _static(name: str) -> bytes:
    return resources.files("skiplock.integrations.dashboard").joinpath("static", name).read_bytes()


def _age(seconds: float | None) -> str:
    return DASH if seconds is None else format_duration(timedelta(seconds=seconds))


@attrs.frozen
class DepthRow:
    """One kind of the depth table: jobs per state (every tenant), the oldest due age."""

    kind: str
    counts: Mapping[str, int]
    oldest: str


def depths(
    counts: Sequence[StateCount], report: HealthReport
) -> tuple[list[DepthRow], dict[str, int], str]:
    """The depth table by kind, the totals per state, and the age of the oldest due
    pending job (every kind) from ``engine.counts()``. The ages come from the health
    report, which tells "none due" (a dash) from a due job that waited 0 ms (``counts``
    says 0.0 for both)."""
    by_kind: dict[str, dict[JobState, int]] = {}
    oldest = {
        k.kind: k.oldest_due_age.total_seconds()
        for k in report.kinds
        if k.oldest_due_age is not None
    }
    for c in counts:
        row = by_kind.setdefault(c.kind, dict.fromkeys(STATES, 0))
        row[c.state] += c.count
    rows = [
        DepthRow(kind, {s.value: n for s, n in row.items()}, _age(oldest.get(kind)))
        for kind, row in sorted(by_kind.items())
    ]
    totals = {s.value: sum(r.counts[s.value] for r in rows) for s in STATES}
    return rows, totals, _age(max(oldest.values(), default=None))


def chart(throughput: Throughput) -> dict[str, Any]:
    """The throughput chart's geometry: per bucket a bar of succeeded jobs above the
    axis and one of failures below, on one scale of round marks (the same up and down),
    and the window's times under it."""
    buckets = throughput.buckets
    max_up = max((b.succeeded for b in buckets), default=0)
    max_down = max((b.failures for b in buckets), default=0)
    marks = _charts.ticks(max(max_up, max_down), whole=True)
    up = _charts.axis(marks, _CHART_HALF, _charts.count_label, base=_CHART_HALF)
    per_unit = up["per_unit"]
    xs, bar_width = _charts.slots(len(buckets), _CHART_WIDTH)
    bars = [
        {
            "x": x,
            "up": round(_charts.bar(b.succeeded, per_unit)),
            "down": round(_charts.bar(b.failures, per_unit)),
            "succeeded": b.succeeded,
            "failures": b.failures,
            "label": b.start.astimezone(UTC).strftime("%H:%M:%S"),
        }
        for x, b in zip(xs, buckets, strict=True)
    ]
    last = buckets[-1].end if buckets else None
    return {
        "width": _CHART_WIDTH,
        "height": 2 * _CHART_HALF,
        "axis": _CHART_HALF,
        "bar_width": bar_width,
        "bars": bars,
        "max_up": max_up,
        "max_down": max_down,
        # The marks: succeeded up from the axis (0), failures down from it.
        "scale": {
            "labels": [*up["labels"], *up["labels"][-2::-1]],
            "grid": [*up["grid"], *(2 * _CHART_HALF - y for y in up["grid"][-2::-1])],
        },
        "times": _charts.times(buckets[0].start, last, len(buckets), _CHART_WIDTH)
        if last is not None
        else {"labels": [], "grid": []},
        "first": bars[0]["label"] if bars else "",
        "last": last.astimezone(UTC).strftime("%H:%M:%S") if last is not None else "",
    }


def workers(report: HealthReport) -> list[dict[str, Any]]:
    """The registered workers of the health report, live ones first."""
    return [
        {
            "id": w.id,
            "host": w.host,
            "pid": w.pid,
            "kinds": "all" if w.kinds is None else ", ".join(sorted(w.kinds)),
            "running": w.running,
            "heartbeat_age": format_duration(w.heartbeat_age),
            "live": w.live,
        }
        for w in sorted(report.workers, key=lambda w: (not w.live, w.id))
    ]


def overview(
    counts: Sequence[StateCount], report: HealthReport, throughput: Throughput
) -> dict[str, Any]:
    """What the overview page shows."""
    rows, totals, oldest = depths(counts, report)
    return {
        "page": "overview",
        "states": [s.value for s in STATES],
        "depths": rows,
        "totals": totals,
        "oldest_pending": oldest,
        "workers": workers(report),
        "live_workers": sum(1 for w in report.workers if w.live),
        "problems": report.problems,
        "throughput": throughput,
        "window": format_duration(throughput.buckets[-1].end - throughput.buckets[0].start),
        "bucket": format_duration(throughput.bucket),
        "chart": chart(throughput),
        "replica_lag": replica_lag(report),
    }


def replica_lag(report: HealthReport) -> str | None:
    """How far behind the primary the hot standby the page was read from is (None: it
    was read from the primary)."""
    replica = report.replica
    if replica is None:
        return None
    return "unknown" if replica.lag is None else format_duration(replica.lag)


def audit_rows(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """A job's audit events for the job page (each detail's value cut to one line)."""
    return [
        {
            "at": e.at,
            "action": str(e.action.value),
            "actor": e.actor,
            "details": [(key, short(value)) for key, value in sorted((e.details or {}).items())],
        }
        for e in events
    ]


@attrs.frozen
class Button:
    """A button of a job: the operator action, its route under the mount point, its
    label, and the question a destructive one asks before it acts (None: it acts at
    once)."""

    action: str
    route: str
    label: str
    confirm: str | None = None


#: Every button, in the order pages show them.
BUTTONS = (
    Button("retry", "retry", "Retry"),
    Button("cancel", "cancel", "Cancel", "Cancel this job? A running one is asked to stop."),
    Button("fail", "fail", "Mark failed", "Mark this job failed? It is never tried again."),
    Button("discard", "delete", "Discard", "Delete this job for good? It cannot be undone."),
)


def buttons(job: Job, only: Sequence[str] | None = None) -> list[Button]:
    """The buttons a page shows for ``job``: the actions its state allows (those of
    ``only``, when given)."""
    return [
        b
        for b in BUTTONS
        if job.state in action_states(b.action) and (only is None or b.action in only)
    ]


def version(job: Job) -> str:
    """What a button carries of the job it was rendered for: a digest of every field an
    operator or a worker changes (state, claims, attempts, due, claim and finish times).
    A job that changed since the page was rendered has another version, even back in the
    same state (replayed, run and dead again)."""
    fields = (
        job.state.value,
        job.claims,
        job.attempts,
        job.available_at.isoformat(),
        None if job.claimed_at is None else job.claimed_at.isoformat(),
        None if job.completed_at is None else job.completed_at.isoformat(),
    )
    return hashlib.blake2s(repr(fields).encode(), digest_size=8).hexdigest()


def payload_text(job: Job) -> str:
    """A job's payload as indented JSON."""
    return json_text(job.payload)


def json_text(value: object) -> str:
    """A JSON value (a payload, a result) as indented JSON."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


#: The bulk actions of the job browser, in the order its menu lists them.
BULK_ACTIONS = (
    ("retry", "Retry"),
    ("cancel", "Cancel"),
    ("fail", "Mark failed"),
    ("discard", "Discard"),
)


def jobs_page(
    shown: Filter, listed: Mapping[str, Any], counts: Sequence[StateCount]
) -> dict[str, Any]:
    """What the job browser shows: the filter, its page of jobs, the kinds and tenants
    to pick from (the running totals of ``counts()``), the jobs per state."""
    totals = {s.value: 0 for s in STATES}
    for c in counts:
        totals[c.state.value] += c.count
    after = listed["next_cursor"]
    return {
        "page": "jobs",
        "filter": shown.values,
        "states": BROWSE_STATES,
        "totals": totals,
        "kinds": sorted({c.kind for c in counts}),
        "tenants": sorted({c.tenant for c in counts if c.tenant is not None}),
        "jobs": listed["jobs"],
        "next_cursor": after,
        "partial": listed["partial"],
        "next_query": shown.query(after=after),
        "filter_query": shown.query(),
        "bulk_actions": BULK_ACTIONS,
    }


def bulk_page(
    shown: Filter,
    form: Mapping[str, Sequence[str]],
    action: str,
    count: int,
    *,
    walk: Walk | None,
    done: str,
    result: BulkResult | None = None,
    changed: SelectionChangedError | None = None,
    offer: bool = True,
) -> dict[str, Any]:
    """The pages of a bulk action: the confirmation (how many jobs, which, and the form
    that confirms it: the same fields with ``confirm=yes``, the count and, over a filter,
    the search's bound and digest); after it, what changed and what was skipped and why
    (``result``); or, when the jobs changed since the confirmation, how many match now
    (``changed``, a 409) with, when ``offer``, a new confirmation of the filter's
    matches. ``done`` is what the action did, in words ("retried")."""
    kept = [
        (name, value)
        for name in (*FILTER_FIELDS, "action", "scope", "job", "after")
        for value in form.get(name, [])[:BULK_BATCH]
    ]
    # Whether the search stopped before the end of the list (a confirmation carries it
    # to the result page, whose search is held to the bound).
    more = walk is not None and (walk.more or one(form, "more") == "yes")
    if walk is not None:
        kept += [("through", str(walk.through or "")), ("digest", walk.digest)]
        kept += [("more", "yes")] if more else []
    label = dict(BULK_ACTIONS)[action]
    return {
        "page": "bulk",
        "action": action,
        "label": label,
        "scope": one(form, "scope"),
        "count": count,
        "walk": walk,
        "limit": BULK_LIMIT,
        "fields": [*kept, ("count", str(count))],
        # The next search of a filter: after the last id this one covered.
        "next_fields": [(n, v) for n, v in kept if n not in {"after", "through", "digest", "more"}]
        + ([("after", str(walk.through))] if walk is not None and walk.through else []),
        "more": more,
        "result": result,
        "done": done,
        "changed": changed,
        "offer": offer and walk is not None,
        "filter": {k: v for k, v in shown.values.items() if v},
        "filter_query": shown.query(),
    }
