"""The dashboard's "Pauses and limits" page, framework- and flavour-neutral (shared by the
async and the sync dashboard): what its forms carry, the operator call each applies
(``pause``, ``resume``, ``set_limit``, ``clear_limit``, docs/controls.md "Tenants,
limits and pause"; ``set_concurrency``, ``clear_concurrency``, "Concurrency at run
time") and what the page shows.

The forms name the scope in plain fields (``kind``, ``tenant``, ``provider``); an empty
field is "any" (None). The engine checks the values (ValidationError: a 400 page).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from skiplock.core import JobState

from ..rest._problems import BadRequest
from ._actions import Write

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from skiplock.core import StateCount
    from skiplock.core.rules import ThrottledPair
    from skiplock.core.store import ConcurrencyLimit, Limit, Pause

#: The write pages of the controls page (``call``: the operator method each calls).
BY_PAGE: Mapping[str, Write] = {
    "pause": Write("pause", "paused", "Paused: its pending jobs are not claimed until resumed."),
    "resume": Write("resume", "resumed", "Resumed."),
    "limit": Write("set_limit", "limit-set", "Limit set."),
    "unlimit": Write("clear_limit", "limit-cleared", "Limit cleared."),
    "concurrency": Write("set_concurrency", "concurrency-set", "Concurrency limit set."),
    "unconcurrency": Write(
        "clear_concurrency", "concurrency-cleared", "Concurrency limit cleared."
    ),
}
#: What the notice after a redirect says, by the ``done`` query parameter (fixed texts).
DONE: Mapping[str, str] = {write.done: write.notice for write in BY_PAGE.values()}


def _text(form: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = form.get(name)
    value = values[-1].strip() if values else ""
    return value or None


def arguments(page: str, form: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The keyword arguments of the operator call of write page ``page`` from its form
    (the actor is the operator's own). BadRequest for a rate or burst that is not a
    number. The pause and limit forms' box ``allow_unknown_kind`` is the engine's opt-in
    for a kind another service declares (unticked: an unknown kind is refused, naming
    the known kinds)."""
    opt_in = {"allow_unknown_kind": _text(form, "allow_unknown_kind") is not None}
    if page in ("concurrency", "unconcurrency"):
        return _concurrency_arguments(page, form, opt_in)
    scope: dict[str, Any] = {"kind": _text(form, "kind"), "tenant": _text(form, "tenant")}
    if page == "pause":
        return scope | {"reason": _text(form, "reason")} | opt_in
    if page == "resume":
        return scope
    scope["provider"] = _text(form, "provider")
    if page == "unlimit":
        return scope
    try:
        rps = float(_text(form, "rps") or "")
        burst = int(_text(form, "burst") or "")
    except ValueError:
        raise BadRequest(
            "a limit needs a rate (jobs per second) and a burst (a whole number)"
        ) from None
    if not math.isfinite(rps):
        raise BadRequest("the rate must be a finite number")
    return scope | {"rps": rps, "burst": burst} | opt_in


def _concurrency_arguments(
    page: str, form: Mapping[str, Sequence[str]], opt_in: dict[str, Any]
) -> dict[str, Any]:
    """The arguments of ``set_concurrency`` (page ``concurrency``) or
    ``clear_concurrency`` (``unconcurrency``): a kind or a key, the scope (cluster
    unless given), and the limit (BadRequest unless a whole number)."""
    target: dict[str, Any] = {
        "kind": _text(form, "kind"),
        "key": _text(form, "key"),
        "scope": _text(form, "scope") or "cluster",
    }
    if page == "unconcurrency":
        return target
    try:
        limit = int(_text(form, "limit") or "")
    except ValueError:
        raise BadRequest("a concurrency limit is a whole number of jobs") from None
    return target | {"limit": limit} | opt_in


def _rows(
    names: set[str], pending: Mapping[str, int], wide: Mapping[str, Pause], partly: set[str]
) -> list[dict[str, Any]]:
    return [
        {
            "name": name,
            "pending": pending.get(name, 0),
            "pause": wide.get(name),
            "partly": name in partly and name not in wide,
        }
        for name in sorted(names)
    ]


#: What holds a throttled pair back, in the page's words (``ThrottledPair.limit``).
HELD_BY: Mapping[str, str] = {
    "paused": "a pause",
    "rate_limit": "its rate limit (no token left)",
    "provider": "its provider's cap (no token left)",
    "cluster_limit": "its cluster limit (as many running as allowed)",
}


def page(
    counts: Sequence[StateCount],
    pauses: Sequence[Pause],
    limits: Sequence[Limit],
    throttled: Sequence[ThrottledPair] = (),
    concurrency: Sequence[ConcurrencyLimit] = (),
) -> dict[str, Any]:
    """What the controls page shows: every pause and limit in force, and a row per kind
    and per tenant (those with jobs and those a control names) with its pause, if any
    (``partly``: paused only with another kind or tenant); and the (kind, tenant) pairs
    whose due jobs a pause or a limit holds back now (``engine.health().throttled``),
    most held first; and the concurrency limits set at run time (issue 45)."""
    by_kind: dict[str, int] = {}
    by_tenant: dict[str, int] = {}
    for c in counts:
        pending = c.count if c.state is JobState.PENDING else 0
        by_kind[c.kind] = by_kind.get(c.kind, 0) + pending
        if c.tenant is not None:
            by_tenant[c.tenant] = by_tenant.get(c.tenant, 0) + pending
    kinds = set(by_kind) | {p.kind for p in pauses if p.kind} | {x.kind for x in limits if x.kind}
    tenants = set(by_tenant) | {p.tenant for p in pauses if p.tenant}
    tenants |= {x.tenant for x in limits if x.tenant}
    return {
        "page": "controls",
        "kinds": _rows(
            kinds,
            by_kind,
            {p.kind: p for p in pauses if p.kind and p.tenant is None},
            {p.kind for p in pauses if p.kind},
        ),
        "tenants": _rows(
            tenants,
            by_tenant,
            {p.tenant: p for p in pauses if p.tenant and p.kind is None},
            {p.tenant for p in pauses if p.tenant},
        ),
        "pauses": list(pauses),
        "limits": list(limits),
        "concurrency": list(concurrency),
        "throttled": [
            {"pair": t, "held_by": HELD_BY.get(t.limit, t.limit)}
            for t in sorted(throttled, key=lambda t: (-t.due, t.kind, t.tenant or ""))
        ],
    }
