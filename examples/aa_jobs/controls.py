"""Pause/resume and per-tenant limits, as the operators' endpoints use them.

Every change goes through ``engine.operator(who)``, so the audit trail names the
operator; the stored pauses and limits reach every worker within a second
(``Settings.controls_refresh``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock import AsyncEngine, RateLimit


async def pause(engine: AsyncEngine, who: str, *, kind: str | None, tenant: str | None) -> None:
    """Stop claiming ``kind`` (of ``tenant``); running jobs finish, pending ones keep
    their attempts and their place. A blank scope or a kind nobody declared raises
    ``skiplock.ValidationError``."""
    await engine.operator(who).pause(kind=kind, tenant=tenant)


async def resume(engine: AsyncEngine, who: str, *, kind: str | None, tenant: str | None) -> bool:
    """Claim ``kind`` (of ``tenant``) again; False if no such pause was set."""
    return await engine.operator(who).resume(kind=kind, tenant=tenant) is not None


async def paused(engine: AsyncEngine) -> list[dict[str, Any]]:
    """The pauses in force."""
    return [{"kind": p.kind, "tenant": p.tenant, "actor": p.actor} for p in await engine.paused()]


async def apply_tenant_limits(
    engine: AsyncEngine, who: str, tenant: str, limits: Mapping[str, RateLimit]
) -> None:
    """Give ``tenant`` its own rate per kind (its ``metadata.rate_limit``), on every
    worker within a second."""
    operator = engine.operator(who)
    for kind, limit in limits.items():
        await operator.set_limit(kind=kind, tenant=tenant, rps=limit.rps, burst=limit.burst)
