"""Engine and worker settings, from code or from ``SKIPLOCK_*`` environment variables.

Every field is declared once as a :class:`~skiplock.core.rules.Setting`: the engine's own in
:data:`ENGINE_FIELDS` (``_fields.py``), the per-kind policy in
:data:`~skiplock.core.rules.POLICY_FIELDS`. Validation and :meth:`Settings.from_env` (which
reads the variables with ``_env.py``) iterate :data:`SETTING_FIELDS`; the class
body spells the fields only for typing (a drift test keeps both in step).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, TypeVar

import attrs

from skiplock.core import KindPolicy, PolicyOverrides, RateLimit, RetryPolicy, ValidationError
from skiplock.core.rules import (
    POLICY_FIELDS,
    IdempotencyConflict,
    IdempotencyScope,
    SecondsView,
    check_connection_mode,
    check_kind,
    check_rate_limit,
    field_defaults,
    optional_duration,
    optional_rate_limit,
    overrides_from,
    policy_from,
    resolve_policy,
    to_duration,
    to_rate_limit,
)

from ._env import env_names, read_env, warn_unknown
from ._fields import (
    ENGINE_FIELDS,
    PREFETCH_CEILING,
    PREFETCH_FACTOR,
    SETTING_FIELDS,
    UNWRITTEN_BATCHES,
    EventLoop,
    ProcessorExits,
    RateLimitScope,
    UnknownKinds,
)

__all__ = [
    "ENGINE_FIELDS",
    "PREFETCH_CEILING",
    "PREFETCH_FACTOR",
    "SETTING_FIELDS",
    "UNWRITTEN_BATCHES",
    "EventLoop",
    "ProcessorExits",
    "RateLimitScope",
    "Settings",
    "UnknownKinds",
    "overrides_from",
]

_DEFAULT = field_defaults(SETTING_FIELDS)

V = TypeVar("V")


class _FieldError(ValidationError):
    """A ValidationError that knows the settings field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _checked(field: str, check: Callable[[], object]) -> None:
    try:
        check()
    except ValidationError as exc:
        raise _FieldError(field, str(exc)) from None


def _per_key(
    field: str,
    value: object,
    expected: str,
    convert: Callable[[Any, Any], V],
    check_key: Callable[[object], None] | None = None,
) -> Mapping[str, V]:
    """A read-only copy of the mapping ``value`` with every item converted by
    ``convert(key, item)``; an item's error names the field and the key. ``check_key``
    checks a key first (its error names the field only)."""
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field}: expected a mapping of {expected}, got {value!r}")
    result: dict[str, V] = {}
    for key, item in value.items():
        if check_key is not None:
            check_key(key)
        try:
            result[key] = convert(key, item)
        except ValidationError as exc:
            raise _FieldError(field, f"{field}[{key!r}]: {exc}") from None
    return MappingProxyType(result)


def _kind_overrides(kind: str, overrides: PolicyOverrides | Mapping[str, Any]) -> PolicyOverrides:
    check_kind(kind)
    return overrides_from(overrides)


def _kinds(
    value: Mapping[str, PolicyOverrides | Mapping[str, Any]],
) -> Mapping[str, PolicyOverrides]:
    return _per_key("kinds", value, "kind to overrides", _kind_overrides)


def _provider_name(provider: object) -> None:
    if not isinstance(provider, str) or not provider.strip():
        raise ValidationError(f"caps: invalid provider name {provider!r}")


def _caps(
    value: Mapping[str, RateLimit | tuple[float, int] | Mapping[str, Any]],
) -> Mapping[str, RateLimit]:
    return _per_key(
        "caps",
        value,
        "provider to RateLimit",
        lambda _, limit: check_rate_limit("cap", to_rate_limit(limit)),
        check_key=_provider_name,
    )


@attrs.frozen(kw_only=True)
class Settings:
    """Everything an engine and its workers can be tuned with; validated at construction.

    Every field, its default and its ``SKIPLOCK_*`` variables are listed in
    ``docs/configuration.md`` (declared in :data:`ENGINE_FIELDS` and
    :data:`~skiplock.core.rules.POLICY_FIELDS`). Durations are accepted as seconds (int or
    float) or a ``timedelta`` and stored as a ``timedelta``; ``poll_interval``,
    ``shutdown_timeout``, ``heartbeat_interval``, ``maintenance_interval`` and ``timeout``
    read back as float seconds, as they always have. The policy fields here are global
    values: per-kind ``kinds`` overrides (explicit configuration) win over the values a
    kind's declaration or processor sets, which win over these (R21).

    :meth:`from_env` reads ``SKIPLOCK_<FIELD>`` for every scalar field, e.g.
    ``SKIPLOCK_CONCURRENCY=8``, ``SKIPLOCK_STALE_TTL=15m``, ``SKIPLOCK_TIMEOUT=none``,
    ``SKIPLOCK_RETENTION=off``, ``SKIPLOCK_UNKNOWN_KINDS=warn``. Durations are seconds
    or carry a unit suffix ``ms``, ``s``, ``m``, ``h`` or ``d``; booleans are
    ``1/0/true/false/yes/no/on/off``. Per-kind values are comma-separated ``kind=value``
    lists, one variable per policy field (its ``kind_env``), e.g.
    ``SKIPLOCK_NODE_LIMITS="email.send=2,report=1"``, ``SKIPLOCK_TIMEOUTS="report=5m"``,
    ``SKIPLOCK_RATE_LIMITS="email.send=5/10"`` (``rps/burst``); provider caps are
    ``SKIPLOCK_CAPS="smtp=20/40"``.

    ``node_limit`` counts per worker *process*: all workers of one engine in a process
    share it. Rate limits (a kind's ``rate_limit``, and ``caps``) are token buckets in
    the store by default (``rate_limit_scope="cluster"``): a rate holds across every
    worker process and node. With ``rate_limit_scope="process"`` they are per process
    (J6), and a cluster-wide rate must be divided by the number of worker processes (e.g.
    20/s over 4 processes: ``5/10`` each).
    """

    # ---- the engine's own fields (ENGINE_FIELDS) -------------------------------------
    concurrency: int = _DEFAULT["concurrency"]
    batch_size: int | None = _DEFAULT["batch_size"]
    prefetch: int | None = _DEFAULT["prefetch"]
    rate_limit_scope: RateLimitScope = _DEFAULT["rate_limit_scope"]
    completion_batch_size: int = _DEFAULT["completion_batch_size"]
    _poll_interval: timedelta = attrs.field(
        default=_DEFAULT["poll_interval"], converter=to_duration
    )
    _controls_refresh: timedelta = attrs.field(
        default=_DEFAULT["controls_refresh"], converter=to_duration
    )
    _shutdown_timeout: timedelta = attrs.field(
        default=_DEFAULT["shutdown_timeout"], converter=to_duration
    )
    request_timeout: timedelta = attrs.field(
        default=_DEFAULT["request_timeout"], converter=to_duration
    )
    request_concurrency: int = _DEFAULT["request_concurrency"]
    _heartbeat_interval: timedelta = attrs.field(
        default=_DEFAULT["heartbeat_interval"], converter=to_duration
    )
    _maintenance_interval: timedelta = attrs.field(
        default=_DEFAULT["maintenance_interval"], converter=to_duration
    )
    retention: timedelta | None = attrs.field(
        default=_DEFAULT["retention"], converter=optional_duration
    )
    retention_archive: bool = _DEFAULT["retention_archive"]
    audit_retention: timedelta | None = attrs.field(
        default=_DEFAULT["audit_retention"], converter=optional_duration
    )
    max_payload_bytes: int = _DEFAULT["max_payload_bytes"]
    max_result_bytes: int = _DEFAULT["max_result_bytes"]
    unknown_kinds: UnknownKinds = _DEFAULT["unknown_kinds"]
    processor_exits: ProcessorExits = _DEFAULT["processor_exits"]
    event_loop: EventLoop = _DEFAULT["event_loop"]
    audit: bool = _DEFAULT["audit"]
    audit_actor: str | None = _DEFAULT["audit_actor"]
    idempotency_retention: timedelta | None = attrs.field(
        default=_DEFAULT["idempotency_retention"], converter=optional_duration
    )
    # ---- global policy values (POLICY_FIELDS) -----------------------------------------
    max_attempts: int = _DEFAULT["max_attempts"]
    backoff_base: timedelta = attrs.field(default=_DEFAULT["backoff_base"], converter=to_duration)
    backoff_factor: float = _DEFAULT["backoff_factor"]
    backoff_cap: timedelta = attrs.field(default=_DEFAULT["backoff_cap"], converter=to_duration)
    backoff_jitter: float = _DEFAULT["backoff_jitter"]
    _timeout: timedelta | None = attrs.field(
        default=_DEFAULT["timeout"], converter=optional_duration
    )
    stale_ttl: timedelta = attrs.field(default=_DEFAULT["stale_ttl"], converter=to_duration)
    node_limit: int | None = _DEFAULT["node_limit"]
    cluster_limit: int | None = _DEFAULT["cluster_limit"]
    rate_limit: RateLimit | None = attrs.field(
        default=_DEFAULT["rate_limit"], converter=optional_rate_limit
    )
    prefetch_limit: int | None = _DEFAULT["prefetch_limit"]
    transactional: bool = _DEFAULT["transactional"]
    autocommit: bool = _DEFAULT["autocommit"]
    idempotency_scope: IdempotencyScope = _DEFAULT["idempotency_scope"]
    idempotency_conflict: IdempotencyConflict = _DEFAULT["idempotency_conflict"]
    # ---- per kind and per provider ------------------------------------------------------
    kinds: Mapping[str, PolicyOverrides] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_kinds
    )
    caps: Mapping[str, RateLimit] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_caps
    )

    # Durations that have always read back as float seconds (stored as timedelta).
    poll_interval = SecondsView[float]()
    controls_refresh = SecondsView[float]()
    shutdown_timeout = SecondsView[float]()
    heartbeat_interval = SecondsView[float]()
    maintenance_interval = SecondsView[float]()
    timeout = SecondsView[float | None]()

    def __attrs_post_init__(self) -> None:
        for field in SETTING_FIELDS:
            _checked(field.name, functools.partial(field.check, field.stored(self)))
        # R12: a live worker's heartbeat must arrive at least twice per TTL, else its
        # long job looks stale after one late beat and is taken from it.
        if 2 * self._heartbeat_interval > self.stale_ttl:
            raise _FieldError(
                "heartbeat_interval",
                f"heartbeat_interval must be at most half of stale_ttl "
                f"({self.stale_ttl.total_seconds()} s), got {self.heartbeat_interval}",
            )
        _checked(
            "transactional",
            functools.partial(check_connection_mode, self.transactional, self.autocommit),
        )
        try:
            self.default_policy()  # what is left to fail: the backoff's base above its cap
        except ValidationError as exc:
            raise _FieldError("backoff_base", f"backoff: {exc}") from None
        for kind in self.kinds:
            try:
                self.policy_for(kind, None)
            except ValidationError as exc:
                raise _FieldError("kinds", f"kinds[{kind!r}]: {exc}") from None

    # ---- derived values -------------------------------------------------------------

    def retry_policy(self) -> RetryPolicy:
        """The global retry policy."""
        return self.default_policy().retry

    def default_policy(self) -> KindPolicy:
        """The global policy: what a kind gets when nothing more specific is set."""
        return policy_from({field.name: field.stored(self) for field in POLICY_FIELDS})

    def policy_for(self, kind: str, processor: PolicyOverrides | None) -> KindPolicy:
        """Resolve ``kind``'s policy: ``kinds[kind]`` > ``processor`` > globals (R6).

        The resolved ``stale_ttl`` must be at least ``2 * heartbeat_interval`` (R12: else a
        live worker's long job is recovered from under it); a ValidationError otherwise.
        """
        policy = resolve_policy(self.kinds.get(kind), processor, self.default_policy())
        if policy.stale_ttl < 2 * self._heartbeat_interval:
            raise ValidationError(
                f"kind {kind!r}: stale_ttl ({policy.stale_ttl.total_seconds()} s) must be at "
                f"least twice heartbeat_interval ({self.heartbeat_interval} s)"
            )
        return policy

    def claim_prefetch(self, concurrency: int) -> int:
        """The smallest prefetch buffer of a worker with ``concurrency`` slots (claimed
        jobs it may hold unstarted): ``prefetch``, or by default :data:`PREFETCH_FACTOR`
        per slot, which grows up to :meth:`prefetch_ceiling` while jobs finish fast."""
        return self.prefetch if self.prefetch is not None else PREFETCH_FACTOR * concurrency

    def prefetch_ceiling(self, concurrency: int) -> int:
        """The most claimed jobs a worker with ``concurrency`` slots holds unstarted:
        ``prefetch`` when set; by default :data:`PREFETCH_CEILING` (or
        :data:`PREFETCH_FACTOR` per slot, if more), reached only while its jobs finish
        fast (``engine/worker/_planner.ClaimPace``)."""
        if self.prefetch is not None:
            return self.prefetch
        return max(PREFETCH_FACTOR * concurrency, PREFETCH_CEILING)

    def unwritten_limit(self, concurrency: int) -> int:
        """Most jobs a worker with ``concurrency`` slots holds whose outcome is not written
        yet: running, prefetched (at most :meth:`prefetch_ceiling`), or finished with the
        outcome waiting for the completer.

        So at most this many outcomes ever wait to be written: when the store writes
        slower than jobs finish, the worker claims only as fast as outcomes are written.
        """
        return (
            concurrency
            + self.prefetch_ceiling(concurrency)
            + UNWRITTEN_BATCHES * self.completion_batch_size
        )

    def claim_batch_size(self, concurrency: int) -> int:
        """How many jobs one claim may take for a worker with ``concurrency`` slots."""
        if self.batch_size is not None:
            return self.batch_size
        return concurrency + self.prefetch_ceiling(concurrency)

    # ---- environment ----------------------------------------------------------------

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        base: Settings | None = None,
        **overrides: Any,
    ) -> Settings:
        """Settings from ``SKIPLOCK_*`` variables (see the class docstring) on top of
        ``base`` (default: the defaults); keyword ``overrides`` win over both.

        With ``base`` a variable replaces that field; per-kind variables
        (``SKIPLOCK_NODE_LIMITS``, ...) set their field for the kinds they name, keeping
        the rest of ``base.kinds``; ``SKIPLOCK_CAPS`` replaces the caps of the providers it
        names. Invalid values raise :class:`~skiplock.core.ValidationError` naming the
        variable. A ``SKIPLOCK_*`` variable it does not read (misspelt, or removed such as
        ``SKIPLOCK_STRICT_KINDS``) is logged as a warning on the ``skiplock.settings``
        logger, naming its replacement or the closest setting, and ignored.
        """
        env = os.environ if environ is None else environ
        warn_unknown(env)
        values, sources = read_env(env, {} if base is None else base._values())
        for key in overrides:
            sources.pop(key, None)
        values.update(overrides)
        try:
            return cls(**values)
        except _FieldError as exc:
            if exc.field in sources:
                raise ValidationError(f"{sources[exc.field]}: {exc}") from None
            raise

    @staticmethod
    def env_names() -> frozenset[str]:
        """Every variable :meth:`from_env` reads (e.g. to refuse a misspelt one)."""
        return env_names()

    def _values(self) -> dict[str, Any]:
        """Every field as a constructor keyword (durations as stored timedeltas)."""
        values = {field.name: field.stored(self) for field in SETTING_FIELDS}
        values["kinds"] = dict(self.kinds)
        values["caps"] = dict(self.caps)
        return values
