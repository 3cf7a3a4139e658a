"""Engine and worker settings, from code or from ``SKIPLOCK_*`` environment variables."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import attrs

from skiplock.core import (
    KIND_RE,
    MAX_PAYLOAD_BYTES,
    KindPolicy,
    PolicyOverrides,
    RateLimit,
    RetryPolicy,
    ValidationError,
    resolve_policy,
)

#: Default prefetch per slot: a worker holds up to this many claimed jobs per slot
#: waiting, beside the running ones.
PREFETCH_FACTOR = 4

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_NONE = frozenset({"none", "off", "null"})


class _FieldError(ValidationError):
    """A ValidationError that knows the settings field it is about."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _check(ok: bool, field: str, message: str) -> None:
    if not ok:
        raise _FieldError(field, f"{field}: {message}")


# ---- converters (accept the convenient forms, normalise to one type) ------------------


def _duration(value: timedelta | float) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"expected a timedelta or seconds, got {value!r}")
    if not math.isfinite(value):
        raise ValidationError(f"expected a finite number of seconds, got {value!r}")
    return timedelta(seconds=value)


def _optional_duration(value: timedelta | float | None) -> timedelta | None:
    return None if value is None else _duration(value)


def _rate_limit(value: object) -> RateLimit:
    if isinstance(value, RateLimit):
        return value
    if isinstance(value, Mapping):
        return RateLimit(**value)
    if isinstance(value, tuple) and len(value) == 2:
        rps, burst = value
        return RateLimit(rps=rps, burst=burst)
    raise ValidationError(f"expected a RateLimit or (rps, burst), got {value!r}")


_OVERRIDE_CONVERTERS: Mapping[str, Callable[[Any], Any]] = {
    "backoff_base": _optional_duration,
    "backoff_cap": _optional_duration,
    "stale_ttl": _optional_duration,
    "rate_limit": lambda v: None if v is None else _rate_limit(v),
}


def overrides_from(value: PolicyOverrides | Mapping[str, Any]) -> PolicyOverrides:
    """A :class:`PolicyOverrides` from itself or a mapping of its fields.

    Durations may be seconds, rate limits ``(rps, burst)``; unknown keys are an error.
    """
    if isinstance(value, PolicyOverrides):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError(f"expected PolicyOverrides or a mapping, got {value!r}")
    known = {f.name for f in attrs.fields(PolicyOverrides)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ValidationError(f"unknown policy field(s) {unknown}; known: {sorted(known)}")
    converted = {k: _OVERRIDE_CONVERTERS.get(k, lambda v: v)(v) for k, v in value.items()}
    return PolicyOverrides(**converted)


def _kinds(
    value: Mapping[str, PolicyOverrides | Mapping[str, Any]],
) -> Mapping[str, PolicyOverrides]:
    checked: object = value  # checked at run time whatever the static type says
    if not isinstance(checked, Mapping):
        raise ValidationError(f"kinds: expected a mapping of kind to overrides, got {value!r}")
    result: dict[str, PolicyOverrides] = {}
    for kind, overrides in checked.items():
        if not isinstance(kind, str) or KIND_RE.fullmatch(kind) is None:
            raise ValidationError(f"kinds: invalid kind name {kind!r}")
        try:
            result[kind] = overrides_from(overrides)
        except ValidationError as exc:
            raise ValidationError(f"kinds[{kind!r}]: {exc}") from None
    return MappingProxyType(result)


def _caps(
    value: Mapping[str, RateLimit | tuple[float, int] | Mapping[str, Any]],
) -> Mapping[str, RateLimit]:
    checked: object = value  # checked at run time whatever the static type says
    if not isinstance(checked, Mapping):
        raise ValidationError(f"caps: expected a mapping of provider to RateLimit, got {value!r}")
    result: dict[str, RateLimit] = {}
    for provider, limit in checked.items():
        if not isinstance(provider, str) or not provider.strip():
            raise ValidationError(f"caps: invalid provider name {provider!r}")
        try:
            result[provider] = _rate_limit(limit)
        except ValidationError as exc:
            raise ValidationError(f"caps[{provider!r}]: {exc}") from None
    return MappingProxyType(result)


def _positive_int(field: str, value: object) -> None:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and value >= 1,
        field,
        f"must be an int >= 1, got {value!r}",
    )


def _positive_seconds(field: str, value: object, *, allow_zero: bool = False) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        assert isinstance(value, int | float)
        ok = value >= 0 if allow_zero else value > 0
    bound = ">= 0" if allow_zero else "> 0"
    _check(ok, field, f"must be a number of seconds {bound}, got {value!r}")


@attrs.frozen(kw_only=True)
class Settings:
    """Everything an engine and its workers can be tuned with; validated at construction.

    Durations given as numbers are seconds. Per-kind ``kinds`` overrides (explicit
    configuration) win over a processor's own defaults, which win over the global values
    here (R6). ``retention`` defaults to 7 days of succeeded jobs (R26; ``None`` switches
    purging off). ``prefetch`` is how many claimed jobs a worker may keep waiting for a
    slot beyond its running ones, so that short jobs never wait for a claim round trip
    (``None``: :data:`PREFETCH_FACTOR` times its concurrency; ``0``: claim only for free
    slots, best for long jobs that other workers could start sooner); ``batch_size``
    caps one claim (``None``: concurrency plus prefetch).
    ``completion_batch_size`` caps how many outcomes of jobs that ran outside their
    transaction one store call writes (ARCHITECTURE §8; 1 writes each on its own).

    :meth:`from_env` reads ``SKIPLOCK_<FIELD>`` for every scalar field, e.g.
    ``SKIPLOCK_CONCURRENCY=8``, ``SKIPLOCK_STALE_TTL=15m``, ``SKIPLOCK_TIMEOUT=none``,
    ``SKIPLOCK_RETENTION=off``, ``SKIPLOCK_STRICT_KINDS=false``. Durations are seconds
    or carry a unit suffix ``ms``, ``s``, ``m``, ``h`` or ``d``; booleans are
    ``1/0/true/false/yes/no/on/off``. Per-kind values are comma-separated ``kind=value``
    lists:

    - ``SKIPLOCK_NODE_LIMITS="email.send=2,report=1"`` (per-worker concurrency per kind)
    - ``SKIPLOCK_CLUSTER_LIMITS="report=3"``
    - ``SKIPLOCK_TIMEOUTS="report=5m"`` and ``SKIPLOCK_STALE_TTLS="report=1h"``
    - ``SKIPLOCK_KIND_MAX_ATTEMPTS="email.send=10"``
    - ``SKIPLOCK_KIND_TRANSACTIONAL="invoice.book=true"`` and
      ``SKIPLOCK_KIND_AUTOCOMMIT="index.build=true"`` (connection mode, R10)
    - ``SKIPLOCK_RATE_LIMITS="email.send=5/10"`` (``rps/burst`` per tenant and kind)
    - ``SKIPLOCK_CAPS="smtp=20/40"`` (``rps/burst`` per provider, across its kinds)

    Rate limits (a kind's ``rate_limit``, and ``caps``) are token buckets per process
    (J6): all workers of one engine in a process share them, but every worker process
    has its own, so a cluster-wide limit must be divided by the number of worker
    processes (e.g. 20/s over 4 processes: ``5/10`` each).
    """

    concurrency: int = 4
    batch_size: int | None = None
    prefetch: int | None = None
    completion_batch_size: int = 100
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    heartbeat_interval: float = 10.0
    stale_ttl: timedelta = attrs.field(default=timedelta(minutes=15), converter=_duration)
    maintenance_interval: float = 300.0
    max_attempts: int = 5
    backoff_base: timedelta = attrs.field(default=timedelta(seconds=30), converter=_duration)
    backoff_factor: float = 2.0
    backoff_cap: timedelta = attrs.field(default=timedelta(hours=24), converter=_duration)
    backoff_jitter: float = 0.1
    timeout: float | None = None
    kinds: Mapping[str, PolicyOverrides] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_kinds
    )
    caps: Mapping[str, RateLimit] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_caps
    )
    retention: timedelta | None = attrs.field(
        default=timedelta(days=7), converter=_optional_duration
    )
    retention_archive: bool = False
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    strict_kinds: bool = True

    def __attrs_post_init__(self) -> None:
        _positive_int("concurrency", self.concurrency)
        if self.batch_size is not None:
            _positive_int("batch_size", self.batch_size)
        if self.prefetch is not None:
            prefetch: object = self.prefetch  # checked at run time whatever the type says
            _check(
                isinstance(prefetch, int) and not isinstance(prefetch, bool) and prefetch >= 0,
                "prefetch",
                f"must be an int >= 0, got {prefetch!r}",
            )
        _positive_int("completion_batch_size", self.completion_batch_size)
        _positive_seconds("poll_interval", self.poll_interval)
        _positive_seconds("shutdown_timeout", self.shutdown_timeout, allow_zero=True)
        _positive_seconds("heartbeat_interval", self.heartbeat_interval)
        _positive_seconds("maintenance_interval", self.maintenance_interval)
        _check(self.stale_ttl > timedelta(0), "stale_ttl", f"must be > 0, got {self.stale_ttl}")
        # R12: a live worker's heartbeat must arrive at least twice per TTL, else its
        # long job looks stale after one late beat and is taken from it.
        _check(
            2 * self.heartbeat_interval <= self.stale_ttl.total_seconds(),
            "heartbeat_interval",
            f"must be at most half of stale_ttl ({self.stale_ttl.total_seconds()} s), "
            f"got {self.heartbeat_interval}",
        )
        _positive_int("max_attempts", self.max_attempts)
        if self.timeout is not None:
            _positive_seconds("timeout", self.timeout)
        if self.retention is not None:
            _check(
                self.retention > timedelta(0),
                "retention",
                f"must be > 0 or None (off), got {self.retention}",
            )
        _positive_int("max_payload_bytes", self.max_payload_bytes)
        for name in ("retention_archive", "strict_kinds"):
            _check(isinstance(getattr(self, name), bool), name, "must be a bool")
        try:
            self.retry_policy()
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
        return RetryPolicy(
            max_attempts=self.max_attempts,
            base=self.backoff_base,
            factor=self.backoff_factor,
            cap=self.backoff_cap,
            jitter=self.backoff_jitter,
        )

    def default_policy(self) -> KindPolicy:
        """The global policy: what a kind gets when nothing more specific is set."""
        return KindPolicy(retry=self.retry_policy(), timeout=self.timeout, stale_ttl=self.stale_ttl)

    def policy_for(self, kind: str, processor: PolicyOverrides | None) -> KindPolicy:
        """Resolve ``kind``'s policy: ``kinds[kind]`` > ``processor`` > globals (R6).

        The resolved ``stale_ttl`` must be at least ``2 * heartbeat_interval`` (R12: else a
        live worker's long job is recovered from under it); a ValidationError otherwise.
        """
        policy = resolve_policy(self.kinds.get(kind), processor, self.default_policy())
        ttl = policy.stale_ttl.total_seconds()
        if ttl < 2 * self.heartbeat_interval:
            raise ValidationError(
                f"kind {kind!r}: stale_ttl ({ttl} s) must be at least twice "
                f"heartbeat_interval ({self.heartbeat_interval} s)"
            )
        return policy

    def claim_prefetch(self, concurrency: int) -> int:
        """How many claimed jobs a worker with ``concurrency`` slots may hold unstarted."""
        return self.prefetch if self.prefetch is not None else PREFETCH_FACTOR * concurrency

    def claim_batch_size(self, concurrency: int) -> int:
        """How many jobs one claim may take for a worker with ``concurrency`` slots."""
        if self.batch_size is not None:
            return self.batch_size
        return concurrency + self.claim_prefetch(concurrency)

    # ---- environment ----------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``SKIPLOCK_*`` variables (see the class docstring); keyword
        ``overrides`` win over the environment. Invalid values raise
        :class:`~skiplock.core.ValidationError` naming the variable."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for field, parse in _SCALARS.items():
            name = f"SKIPLOCK_{field.upper()}"
            raw = env.get(name)
            if raw is None or not raw.strip():
                continue
            values[field] = _parse(name, raw, parse)
            sources[field] = name
        kinds: dict[str, dict[str, Any]] = {}
        for name, (field, parse) in _PER_KIND.items():
            raw = env.get(name)
            if raw is None or not raw.strip():
                continue
            for kind, value in _parse(name, raw, functools.partial(_pairs, parse=parse)).items():
                kinds.setdefault(kind, {})[field] = value
            sources["kinds"] = name
        if kinds:
            try:
                values["kinds"] = {k: overrides_from(v) for k, v in kinds.items()}
            except ValidationError as exc:
                raise ValidationError(f"{sources['kinds']}: {exc}") from None
        raw_caps = env.get("SKIPLOCK_CAPS")
        if raw_caps is not None and raw_caps.strip():
            values["caps"] = _parse("SKIPLOCK_CAPS", raw_caps, lambda r: _pairs(r, _parse_rate))
            sources["caps"] = "SKIPLOCK_CAPS"
        for key in overrides:
            sources.pop(key, None)
        values.update(overrides)
        try:
            return cls(**values)
        except _FieldError as exc:
            if exc.field in sources:
                raise ValidationError(f"{sources[exc.field]}: {exc}") from None
            raise


# ---- environment parsing ---------------------------------------------------------------


def _parse(name: str, raw: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(raw)
    except (ValueError, ValidationError) as exc:
        raise ValidationError(f"{name}={raw!r}: {exc}") from None


def _parse_seconds(raw: str) -> float:
    match = _DURATION_RE.fullmatch(raw)
    if match is None:
        raise ValueError("expected a duration such as 30, 1.5, 250ms, 30s, 5m, 2h or 7d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _parse_duration(raw: str) -> timedelta:
    return timedelta(seconds=_parse_seconds(raw))


def _parse_optional_seconds(raw: str) -> float | None:
    return None if raw.strip().lower() in _NONE else _parse_seconds(raw)


def _parse_optional_duration(raw: str) -> timedelta | None:
    return None if raw.strip().lower() in _NONE else _parse_duration(raw)


def _parse_int(raw: str) -> int:
    return int(raw.strip())


def _parse_float(raw: str) -> float:
    return float(raw.strip())


def _parse_bool(raw: str) -> bool:
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected a boolean: 1/0, true/false, yes/no, on/off")


def _parse_rate(raw: str) -> RateLimit:
    rps, sep, burst = raw.partition("/")
    if not sep:
        raise ValueError("expected a rate limit 'rps/burst', e.g. 5/10")
    return RateLimit(rps=float(rps), burst=int(burst))


def _pairs(raw: str, parse: Callable[[str], Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"expected comma-separated name=value entries, got {item.strip()!r}")
        if key in result:
            raise ValueError(f"{key!r} is given twice")
        try:
            result[key] = parse(value)
        except (ValueError, ValidationError) as exc:
            raise ValueError(f"{key}: {exc}") from None
    return result


_SCALARS: Mapping[str, Callable[[str], Any]] = {
    "concurrency": _parse_int,
    "batch_size": lambda r: None if r.strip().lower() in _NONE else _parse_int(r),
    "prefetch": lambda r: None if r.strip().lower() in _NONE else _parse_int(r),
    "completion_batch_size": _parse_int,
    "poll_interval": _parse_seconds,
    "shutdown_timeout": _parse_seconds,
    "heartbeat_interval": _parse_seconds,
    "stale_ttl": _parse_duration,
    "maintenance_interval": _parse_seconds,
    "max_attempts": _parse_int,
    "backoff_base": _parse_duration,
    "backoff_factor": _parse_float,
    "backoff_cap": _parse_duration,
    "backoff_jitter": _parse_float,
    "timeout": _parse_optional_seconds,
    "retention": _parse_optional_duration,
    "retention_archive": _parse_bool,
    "max_payload_bytes": _parse_int,
    "strict_kinds": _parse_bool,
}

_PER_KIND: Mapping[str, tuple[str, Callable[[str], Any]]] = {
    "SKIPLOCK_NODE_LIMITS": ("node_limit", _parse_int),
    "SKIPLOCK_CLUSTER_LIMITS": ("cluster_limit", _parse_int),
    "SKIPLOCK_TIMEOUTS": ("timeout", _parse_seconds),
    "SKIPLOCK_STALE_TTLS": ("stale_ttl", _parse_duration),
    "SKIPLOCK_KIND_MAX_ATTEMPTS": ("max_attempts", _parse_int),
    "SKIPLOCK_KIND_TRANSACTIONAL": ("transactional", _parse_bool),
    "SKIPLOCK_KIND_AUTOCOMMIT": ("autocommit", _parse_bool),
    "SKIPLOCK_RATE_LIMITS": ("rate_limit", _parse_rate),
}
