"""The job browser's filters and bulk actions, framework- and flavour-neutral (shared by
the async and the sync dashboard): what a query string asks for, as the arguments of
``list_jobs``, and what a bulk form names.

Every list is a keyset page of ``list_jobs``, whose reads are bounded (docs/admin.md,
"Lists at any size"); the search box (``q``) is ``list_jobs``' search over the whole
table (docs/dashboard.md, "Search"): a page that stopped at its budget says how far it
searched and offers to continue.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import attrs

from skiplock.core import Job, JobState, ValidationError
from skiplock.core.rules import INT8_RANGE, OPERATOR_ACTIONS, action_states, payload_filter
from skiplock.engine.admin._bulk import MAX_CONFIRMED

from ..rest._problems import InvalidRequest

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The states the browser filters by: the job states, with ``pending`` split into the
#: jobs due now (``pending``) and those due later (``scheduled``).
BROWSE_STATES = (
    "pending",
    "scheduled",
    "running",
    "succeeded",
    "failed",
    "dead",
    "cancelled",
)
#: The states whose filter needs the database's clock (due now, or later).
DUE_STATES = ("pending", "scheduled")
#: The query parameters of a filter (and the hidden fields of a bulk form).
FILTER_FIELDS = ("state", "kind", "tenant", "since", "before", "q")
#: The longest text a filter field takes.
MAX_FIELD = 200
#: The search box's prefixes: the rest is an idempotency key, an error text, payload terms.
SEARCH_PREFIXES = {"key:": "idempotency_key", "error:": "error", "payload:": "payload"}
#: A ``PATH=VALUE`` word of the search box (a dotted path of keys without spaces).
_TERM_RE = re.compile(r"^[^\s=.]+(\.[^\s=.]+)*=\S*$")
#: Jobs per read of a bulk action's search (a page of ``list_jobs``, bounded as a list
#: page's), and the most jobs one search reads and one confirmation changes: a larger set
#: takes several (the page says where it stopped and offers to continue).
BULK_BATCH = 500
BULK_LIMIT = MAX_CONFIRMED
_TIME_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d")


def one(query: Mapping[str, Sequence[str]], name: str) -> str:
    """The last value of a query or form parameter, stripped ("" when absent)."""
    values = query.get(name)
    return values[-1].strip()[:MAX_FIELD] if values else ""


def _time(name: str, text: str) -> datetime | None:
    if not text:
        return None
    for layout in _TIME_FORMATS:
        try:
            return datetime.strptime(text, layout).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise InvalidRequest(f"{name}: expected a UTC time as YYYY-MM-DDTHH:MM, got {text[:40]!r}")


def job_id(text: str) -> int | None:
    """A job id typed in the filter (digits only), or None."""
    if not text:
        return None
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= INT8_RANGE[1]:
        raise InvalidRequest(f"id: expected a job id, got {text[:40]!r}")
    return int(text)


def cursor(text: str) -> int | None:
    """The ``after`` cursor of a page (a job id), or None."""
    return job_id(text) if text else None


@attrs.frozen
class Filter:
    """A filter of the browser: the query's values as typed, and ``list_jobs``'s
    arguments for them (``now`` splits pending from scheduled)."""

    values: Mapping[str, str]
    arguments: Mapping[str, Any]

    @property
    def states(self) -> frozenset[JobState] | None:
        """The job states the filter selects (None: every one)."""
        state = self.arguments.get("state")
        return None if state is None else frozenset({JobState(state)})

    def query(self, **more: object) -> str:
        """The filter as a query string (empty values left out), with ``more``."""
        pairs = {k: v for k, v in self.values.items() if v}
        pairs |= {k: str(v) for k, v in more.items() if v is not None}
        return urlencode(pairs)


def parse_filter(query: Mapping[str, Sequence[str]], now: datetime) -> Filter:
    """The filter of a query string (InvalidRequest, a 422 page, for a bad value)."""
    values = {name: one(query, name) for name in FILTER_FIELDS}
    arguments: dict[str, Any] = {}
    state = values["state"]
    if state and state not in BROWSE_STATES:
        raise InvalidRequest(f"state: one of {', '.join(BROWSE_STATES)}, got {state[:40]!r}")
    # Due now: available_at <= now (the ranges are half-open); scheduled: after now.
    later = now + timedelta(microseconds=1)
    if state == "pending":
        arguments |= {"state": "pending", "available_before": later}
    elif state == "scheduled":
        arguments |= {"state": "pending", "available_since": later}
    elif state:
        arguments["state"] = state
    for name in ("kind", "tenant"):
        if values[name]:
            arguments[name] = values[name]
    arguments["created_since"] = _time("since", values["since"])
    arguments["created_before"] = _time("before", values["before"])
    if values["q"]:
        arguments |= search(values["q"])
    return Filter(values, arguments)


def search(text: str) -> dict[str, Any]:
    """The ``list_jobs`` search of the search box: ``key:K`` the jobs of idempotency key
    K, ``error:T`` those whose errors hold T, ``payload:`` then terms, or terms alone
    (every word ``PATH=VALUE``, or a JSON object) their payload containment; any other
    text an error text (InvalidRequest for a bad term)."""
    prefix = next((p for p in SEARCH_PREFIXES if text.startswith(p)), None)
    if prefix is not None:
        name, rest = SEARCH_PREFIXES[prefix], text.removeprefix(prefix).strip()
    else:
        terms = text.startswith("{") or all(_TERM_RE.match(w) for w in text.split())
        name, rest = ("payload", text) if terms else ("error", text)
    if not rest:
        raise InvalidRequest(f"search: nothing after {text!r}")
    if name != "payload":
        return {name: rest}
    try:
        return {"payload": payload_filter([rest] if rest.startswith("{") else rest.split())}
    except ValidationError as exc:
        raise InvalidRequest(f"search: {exc}") from None


def bulk_states(action: str, shown: frozenset[JobState] | None) -> frozenset[JobState]:
    """The states a bulk action changes: those it applies to, within the filter's."""
    if action not in OPERATOR_ACTIONS:
        raise InvalidRequest(f"action: one of {', '.join(OPERATOR_ACTIONS)}")
    allowed = action_states(action)
    return allowed if shown is None else allowed & shown


def selected(form: Mapping[str, Sequence[str]]) -> dict[JobState, list[int]]:
    """The jobs ticked in a list, by the state each was shown in (a box's value is
    ``<id>.<state>``: a bulk action changes each only in that state)."""
    chosen: dict[JobState, list[int]] = {}
    for value in form.get("job", [])[:BULK_BATCH]:
        text, _, state = value.partition(".")
        try:
            chosen.setdefault(JobState(state), []).append(job_id(text) or 0)
        except (ValueError, InvalidRequest):
            continue
    return {state: [i for i in ids if i] for state, ids in chosen.items()}


def page(read: list[Job], size: int, resume_after: int | None) -> dict[str, Any]:
    """What a list page shows of ``read`` (a page of ``list_jobs``, ``size + 1`` jobs):
    its jobs, the cursor of the next page and whether the search stopped early (the page
    may show fewer jobs, even none)."""
    jobs = read[:size]
    more = len(read) > size or resume_after is not None
    after = (resume_after or (jobs[-1].id if jobs else None)) if more else None
    return {"jobs": jobs, "next_cursor": after, "partial": resume_after is not None}


@attrs.frozen
class Walk:
    """What a bulk action's search over a filter found: the jobs it matches, with the
    state each is in (what the operator confirms), the last id it covered (``through``:
    the bound a confirmation is held to; None: it read nothing) and whether it stopped
    before the end of the list (``more``: run it again after ``through`` for the rest)."""

    jobs: Mapping[int, JobState]
    through: int | None
    more: bool

    @property
    def digest(self) -> str:
        """A digest of the jobs and their states: a confirmation carries it, so a set
        that changed in place (one job out, another in) is noticed too."""
        text = ",".join(f"{i}.{state.value}" for i, state in sorted(self.jobs.items()))
        return hashlib.blake2s(text.encode(), digest_size=8).hexdigest()


def confirmed(form: Mapping[str, Sequence[str]]) -> tuple[int, str]:
    """How many jobs a confirmation form says were shown, and their digest (InvalidRequest
    for a form without them)."""
    count = one(form, "count")
    if not (count.isascii() and count.isdigit()):
        raise InvalidRequest("the form does not say how many jobs were confirmed")
    return int(count), one(form, "digest")
