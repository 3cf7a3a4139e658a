"""Everything of the example that waits for issue 30: pause/resume, and limits per
(tenant, kind) changed at run time.

On main the engine has neither; these functions raise ``NotImplementedError`` and the API
answers 501. Until then every tenant gets the per-kind defaults of ``jobs.TENANT_DEFAULTS``
in a bucket of its own, which is also what onboarding writes into its metadata. When
issue 30 lands, delete the ``_require`` calls (and the ``type: ignore`` comments, which
mypy then reports as unused) and check the calls below against its final signatures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skiplock import AsyncEngine, RateLimit

if TYPE_CHECKING:
    from collections.abc import Mapping

PAUSE = hasattr(AsyncEngine, "pause")
LIMITS = hasattr(AsyncEngine, "set_limit")


def _require(supported: bool, what: str) -> None:
    if not supported:
        raise NotImplementedError(f"{what} needs engine support from skiplock issue 30")


async def pause(engine: AsyncEngine, *, kind: str | None, tenant: str | None) -> None:
    """Stop claiming ``kind`` (of ``tenant``); running jobs finish, pending ones keep
    their attempts and their place."""
    _require(PAUSE, "pause")
    await engine.pause(kind=kind, tenant=tenant)  # type: ignore[attr-defined]


async def resume(engine: AsyncEngine, *, kind: str | None, tenant: str | None) -> None:
    """Claim ``kind`` (of ``tenant``) again."""
    _require(PAUSE, "resume")
    await engine.resume(kind=kind, tenant=tenant)  # type: ignore[attr-defined]


async def paused(engine: AsyncEngine) -> list[Any]:
    """The paused (kind, tenant) pairs."""
    _require(PAUSE, "paused")
    return list(await engine.paused())  # type: ignore[attr-defined]


async def apply_tenant_limits(
    engine: AsyncEngine, tenant: str, limits: Mapping[str, RateLimit]
) -> None:
    """Give ``tenant`` its own rate per kind (its ``metadata.rate_limit``), on every
    worker within a second."""
    _require(LIMITS, "per-tenant limits")
    for kind, limit in limits.items():
        await engine.set_limit(kind=kind, tenant=tenant, rate_limit=limit)  # type: ignore[attr-defined]
