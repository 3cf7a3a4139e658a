"""Rows and parameters of the controls role (``skiplock.ports.ControlsRole``, issue
30): pauses and limits. See ``_rows.py`` for the shared rules."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock.core import (
    RateLimit,
)
from skiplock.core.store import (
    ConcurrencyLimit,
    Controls,
    Limit,
    Pause,
    WorkerRequest,
)

from ._rows import (
    utc,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


def pause_params(
    kind: str | None, tenant: str | None, reason: str | None, actor: str | None
) -> dict[str, Any]:
    """The parameters of ``pause`` and ``resume``."""
    return {"kind": kind, "tenant": tenant, "reason": reason, "actor": actor}


def limit_params(
    kind: str | None,
    tenant: str | None,
    provider: str | None,
    limit: RateLimit | None,
    actor: str | None,
) -> dict[str, Any]:
    """The parameters of ``set_limit`` and ``clear_limit``."""
    return {
        "kind": kind,
        "tenant": tenant,
        "provider": provider,
        "rps": None if limit is None else float(limit.rps),
        "burst": None if limit is None else limit.burst,
        "actor": actor,
    }


def pause_from_row(row: Mapping[str, Any]) -> Pause:
    """A pause from a row of ``pause``, ``resume`` or ``controls``."""
    since = row.get("since", row.get("at"))
    return Pause(
        kind=row["kind"],
        tenant=row["tenant_id"],
        reason=row["reason"],
        actor=row["actor"],
        since=None if since is None else utc(since),
    )


def limit_from_row(row: Mapping[str, Any]) -> Limit:
    """A limit from a row of ``set_limit``, ``clear_limit`` or ``controls``."""
    updated = row.get("updated_at", row.get("at"))
    return Limit(
        limit=RateLimit(rps=float(row["rps"]), burst=int(row["burst"])),
        kind=row["kind"],
        tenant=row["tenant_id"],
        provider=row["provider"],
        actor=row["actor"],
        updated_at=None if updated is None else utc(updated),
    )


def concurrency_params(
    kind: str | None, key: str | None, scope: str, limit: int | None, actor: str | None
) -> dict[str, Any]:
    """The parameters of ``set_concurrency`` and ``clear_concurrency``."""
    return {"kind": kind, "key": key, "scope": scope, "limit": limit, "actor": actor}


def concurrency_from_row(row: Mapping[str, Any]) -> ConcurrencyLimit:
    """A concurrency limit from a row of ``set_concurrency`` or ``clear_concurrency``,
    or a ``controls`` row (the key in ``tenant_id``, the scope in ``provider``, the
    limit in ``burst``)."""
    if "what" in row:
        key, scope, limit = row["tenant_id"], row["provider"], row["burst"]
    else:
        key, scope, limit = row["concurrency_key"], row["scope"], row["max_running"]
    updated = row.get("updated_at", row.get("at"))
    return ConcurrencyLimit(
        limit=int(limit),
        kind=row["kind"],
        key=key,
        scope=scope,
        actor=row["actor"],
        updated_at=None if updated is None else utc(updated),
    )


def controls_from_rows(rows: Sequence[Mapping[str, Any]]) -> Controls:
    """The pauses, rate limits and concurrency limits of the ``controls`` query."""
    return Controls(
        pauses=tuple(pause_from_row(r) for r in rows if r["what"] == "pause"),
        limits=tuple(limit_from_row(r) for r in rows if r["what"] == "limit"),
        concurrency=tuple(concurrency_from_row(r) for r in rows if r["what"] == "concurrency"),
        requests=tuple(
            WorkerRequest(r["tenant_id"], r["provider"], r["actor"], utc(r["at"]))
            for r in rows
            if r["what"] == "request"
        ),
    )


def request_from_row(row: Mapping[str, Any]) -> WorkerRequest:
    """A worker's request from a row of ``request_worker`` or ``health_workers``."""
    return WorkerRequest(row["id"], row["request"], row["requested_by"], utc(row["requested_at"]))
