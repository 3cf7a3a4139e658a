"""Run-time controls an operator sets in the store (issue 30): pauses and rate limits
per (kind, tenant), provider caps. Pure values and the one lookup of the limits in
force (:class:`EffectiveLimits`).

A :class:`Pause` or a kind's :class:`Limit` names a kind and a tenant, either of which
may be None: "any". A pause of ``(kind, None)`` stops every tenant's jobs of the kind, one
of ``(None, tenant)`` every kind of the tenant, one of ``(kind, tenant)`` that pair.
A limit of ``(kind, None)`` is the kind's default: every tenant without a limit of its
own gets it (a bucket per tenant, as for a kind's ``rate_limit`` policy).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs

from ._audit import AuditAction, AuditEvent
from ._bucket import RateLimit, RateTable
from ._concurrency import ConcurrencyLimit, concurrency_details
from ._errors import ValidationError
from ._validation import check_actor
from ._worker_requests import WorkerRequest

Pair = tuple[str, str | None]

#: Longest kind, tenant, provider name and reason a control takes.
MAX_NAME = 255
MAX_REASON = 1000


def _name(what: str, value: object, *, nullable: bool = True) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise ValidationError(
            f"{what} must be a non-blank string of at most {MAX_NAME} characters, got {value!r}"
        )
    return value


def check_reason(reason: object) -> str | None:
    """A pause's reason: None or a string of at most :data:`MAX_REASON` characters."""
    if reason is None:
        return None
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise ValidationError(
            f"reason must be a string of at most {MAX_REASON} characters, got {reason!r}"
        )
    return reason


def pause_scope(kind: object, tenant: object) -> tuple[str | None, str | None]:
    """A checked ``(kind, tenant)`` of a pause; at least one of them must be given."""
    checked = (_name("kind", kind), _name("tenant", tenant))
    if checked == (None, None):
        raise ValidationError("a pause names a kind, a tenant or both")
    return checked


def describe(kind: str | None, tenant: str | None) -> str:
    """``kind=K tenant=T`` with ``*`` for "any" (logs, errors, the CLI)."""
    return f"kind={kind or '*'} tenant={tenant or '*'}"


@attrs.frozen
class Pause:
    """Jobs of ``kind`` (None: every kind) of ``tenant`` (None: every tenant) are not
    claimed while this stands. ``actor`` and ``since`` (the store's time) say who set it
    and when; ``reason`` is free text."""

    kind: str | None
    tenant: str | None
    reason: str | None = None
    actor: str | None = None
    since: datetime | None = None

    def __attrs_post_init__(self) -> None:
        pause_scope(self.kind, self.tenant)
        check_reason(self.reason)
        if self.actor is not None:
            check_actor("actor", self.actor)

    def covers(self, kind: str, tenant: str | None) -> bool:
        """Whether a job of ``kind`` and ``tenant`` is paused by this."""
        return (self.kind is None or self.kind == kind) and (
            self.tenant is None or self.tenant == tenant
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the CLI's ``--json``, the REST API)."""
        return {
            "kind": self.kind,
            "tenant": self.tenant,
            "reason": self.reason,
            "actor": self.actor,
            "since": None if self.since is None else self.since.isoformat(),
        }


@attrs.frozen
class Limit:
    """A rate limit set at run time: for ``kind`` (``tenant`` None: the kind's default
    for every tenant without its own), or for ``provider`` (a cap across the provider's
    kinds; then ``kind`` and ``tenant`` are None). ``actor`` and ``updated_at`` (the
    store's time) say who set it and when."""

    limit: RateLimit
    kind: str | None = None
    tenant: str | None = None
    provider: str | None = None
    actor: str | None = None
    updated_at: datetime | None = None

    def __attrs_post_init__(self) -> None:
        limit_scope(self.kind, self.tenant, self.provider)
        if self.actor is not None:
            check_actor("actor", self.actor)

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the CLI's ``--json``, the REST API)."""
        return {
            "kind": self.kind,
            "tenant": self.tenant,
            "provider": self.provider,
            "rps": self.limit.rps,
            "burst": self.limit.burst,
            "actor": self.actor,
            "updated_at": None if self.updated_at is None else self.updated_at.isoformat(),
        }


def limit_scope(
    kind: object, tenant: object, provider: object
) -> tuple[str | None, str | None, str | None]:
    """A checked ``(kind, tenant, provider)`` of a limit: a kind (and maybe a tenant), or
    a provider alone."""
    if provider is not None:
        if kind is not None or tenant is not None:
            raise ValidationError("a provider cap names a provider only (no kind or tenant)")
        return None, None, _name("provider", provider, nullable=False)
    if kind is None:
        raise ValidationError("a limit names a kind (and maybe a tenant) or a provider")
    return _name("kind", kind, nullable=False), _name("tenant", tenant), None


@attrs.frozen
class Controls:
    """The pauses, rate limits and concurrency limits stored now: what every worker
    refreshes (see ``Settings.controls_refresh``). Ordered as the store lists them."""

    pauses: tuple[Pause, ...] = ()
    limits: tuple[Limit, ...] = ()
    concurrency: tuple[ConcurrencyLimit, ...] = ()
    #: The workers asked to drain or stop (issue 45), not yet gone.
    requests: tuple[WorkerRequest, ...] = ()

    def request_for(self, worker_id: str) -> WorkerRequest | None:
        """What worker ``worker_id`` is asked to do, if anything."""
        return next((r for r in self.requests if r.worker_id == worker_id), None)

    def concurrency_of(
        self, kind: str | None, key: str | None, scope: str
    ) -> ConcurrencyLimit | None:
        """The stored concurrency limit of exactly ``(kind, key, scope)``, if any."""
        return next(
            (c for c in self.concurrency if (c.kind, c.key, c.scope) == (kind, key, scope)),
            None,
        )

    def key_limits(self) -> dict[str, int]:
        """The concurrency keys' limits set at run time."""
        return {c.key: c.limit for c in self.concurrency if c.key is not None}

    def pause_of(self, kind: str, tenant: str | None) -> Pause | None:
        """The pause that stops jobs of ``kind`` and ``tenant``, if any."""
        return next((p for p in self.pauses if p.covers(kind, tenant)), None)

    def exclusions(self) -> Exclusions:
        """The pauses as claim exclusions."""
        kinds: set[str] = set()
        tenants: set[str] = set()
        pairs: set[Pair] = set()
        for pause in self.pauses:
            if pause.tenant is None and pause.kind is not None:
                kinds.add(pause.kind)
            elif pause.kind is None and pause.tenant is not None:
                tenants.add(pause.tenant)
            elif pause.kind is not None:
                pairs.add((pause.kind, pause.tenant))
        return Exclusions(frozenset(kinds), frozenset(tenants), frozenset(pairs))

    def same(self, other: Controls) -> bool:
        """Whether ``other`` pauses and limits the same (who and when aside)."""
        return _essence(self) == _essence(other)


def _essence(controls: Controls) -> tuple[frozenset[Any], ...]:
    return (
        frozenset((p.kind, p.tenant) for p in controls.pauses),
        frozenset((x.kind, x.tenant, x.provider, x.limit) for x in controls.limits),
        frozenset((c.kind, c.key, c.scope, c.limit) for c in controls.concurrency),
    )


@attrs.frozen
class Exclusions:
    """What the pauses keep out of a claim: whole kinds, whole tenants, pairs."""

    kinds: frozenset[str] = frozenset()
    tenants: frozenset[str] = frozenset()
    pairs: frozenset[Pair] = frozenset()


@attrs.frozen
class EffectiveLimits:
    """The rate limits in force: the stored ones over the code's and settings' ones.

    Precedence for a ``(kind, tenant)``: the stored limit of the pair, else the stored
    default of the kind (``tenant`` None), else ``policy_rates[kind]`` (the kind's
    ``rate_limit`` policy: settings, ``SKIPLOCK_RATE_LIMITS``, the task's options). For a
    provider: the stored cap, else ``settings_caps[provider]`` (``Settings.caps``).

    This is the one source of the rates a worker applies: :meth:`table` is them as the
    :class:`~._bucket.RateTable` a claim carries (the store's cluster-wide buckets,
    ``ClaimRequest.rates``) or the process's buckets apply; :meth:`rate_for` (the table's
    lookup) and :meth:`cap_for` are what every bucket asks.
    """

    controls: Controls = attrs.field(factory=Controls)
    policy_rates: Mapping[str, RateLimit] = attrs.field(factory=dict)
    settings_caps: Mapping[str, RateLimit] = attrs.field(factory=dict)
    _rates: RateTable = attrs.field(init=False)
    _caps: Mapping[str, RateLimit] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        pairs: dict[Pair, RateLimit] = {}
        kinds: dict[str, RateLimit] = {}
        caps = dict(self.settings_caps)
        for stored in self.controls.limits:
            if stored.provider is not None:
                caps[stored.provider] = stored.limit
            elif stored.kind is not None and stored.tenant is None:
                kinds[stored.kind] = stored.limit
            elif stored.kind is not None:
                pairs[(stored.kind, stored.tenant)] = stored.limit
        object.__setattr__(
            self, "_rates", RateTable(kinds={**self.policy_rates, **kinds}, pairs=pairs)
        )
        object.__setattr__(self, "_caps", caps)

    def rate_for(self, kind: str, tenant: str | None) -> RateLimit | None:
        """The rate limit of ``(kind, tenant)``'s bucket, None: unlimited."""
        return self._rates.rate_for(kind, tenant)

    def cap_for(self, provider: str | None) -> RateLimit | None:
        """The cap of ``provider`` across its kinds, None: none (or no provider)."""
        return None if provider is None else self._caps.get(provider)

    def kind_rates(self, kinds: Iterable[str] | None = None) -> dict[str, RateLimit]:
        """The default rate of each limited kind (among ``kinds``; None: all)."""
        wanted = None if kinds is None else set(kinds)
        return {k: r for k, r in self._rates.kinds.items() if wanted is None or k in wanted}

    def pair_rates(self, kinds: Iterable[str] | None = None) -> dict[Pair, RateLimit]:
        """The pairs with a rate of their own (among ``kinds``; None: all)."""
        wanted = None if kinds is None else set(kinds)
        return {p: r for p, r in self._rates.pairs.items() if wanted is None or p[0] in wanted}

    def table(
        self, providers: Mapping[str, str | None], kinds: Iterable[str] | None = None
    ) -> RateTable:
        """The limits in force for ``kinds`` (None: all) as a rate table; ``providers``
        maps a kind to its provider (None or absent: none), whose cap then applies."""
        wanted = None if kinds is None else set(kinds)
        provider_caps: dict[str, tuple[str, RateLimit]] = {}
        for kind, provider in providers.items():
            cap = self.cap_for(provider)
            if provider is not None and cap is not None and (wanted is None or kind in wanted):
                provider_caps[kind] = (provider, cap)
        return RateTable(
            kinds=self.kind_rates(kinds), pairs=self.pair_rates(kinds), providers=provider_caps
        )


def pause_details(pause: Pause) -> dict[str, Any]:
    """The details of a ``paused`` or ``resumed`` audit event: the pause's reason."""
    return {"reason": pause.reason}


def limit_details(limit: Limit) -> dict[str, Any]:
    """The details of a ``limit_set`` or ``limit_cleared`` audit event."""
    return {"provider": limit.provider, "rps": limit.limit.rps, "burst": limit.limit.burst}


def control_event(
    action: AuditAction,
    control: Pause | Limit | ConcurrencyLimit,
    actor: str | None,
    at: datetime,
) -> AuditEvent:
    """The audit event (J10) of a change of ``control`` made by ``actor`` at ``at``: no
    job; ``kind`` and ``tenant`` as the control names them (a concurrency limit names no
    tenant; its key is in the details)."""
    if isinstance(control, ConcurrencyLimit):  # no tenant; its key is in the details
        return AuditEvent(action, None, control.kind, None, actor, at, concurrency_details(control))
    details = pause_details(control) if isinstance(control, Pause) else limit_details(control)
    return AuditEvent(
        action=action,
        job_id=None,
        kind=control.kind,
        tenant=control.tenant,
        actor=actor,
        at=at,
        details=details,
    )
