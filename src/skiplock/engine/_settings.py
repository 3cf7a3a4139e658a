"""Engine and worker settings, from code or from ``SKIPLOCK_*`` environment variables.

Every field is declared once as a :class:`~skiplock.core.Setting`: the engine's own in
:data:`ENGINE_FIELDS`, the per-kind policy in :data:`~skiplock.core.POLICY_FIELDS`.
Validation and :meth:`Settings.from_env` iterate :data:`SETTING_FIELDS`; the class body
spells the fields only for typing (a drift test keeps both in step).
"""

from __future__ import annotations

import functools
import os
import typing
from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Literal

import attrs

from skiplock.core import (
    ACTOR,
    FLAG,
    MAX_PAYLOAD_BYTES,
    MAX_RESULT_BYTES,
    NON_NEGATIVE_DURATION,
    NON_NEGATIVE_INT,
    POLICY_FIELDS,
    POSITIVE_DURATION,
    POSITIVE_INT,
    RATE,
    KindPolicy,
    PolicyOverrides,
    RateLimit,
    RetryPolicy,
    SecondsView,
    Setting,
    ValidationError,
    check_connection_mode,
    check_kind,
    check_rate_limit,
    choice,
    field_defaults,
    optional_duration,
    optional_rate_limit,
    overrides_from,
    policy_from,
    resolve_policy,
    to_duration,
    to_rate_limit,
)

__all__ = [
    "ENGINE_FIELDS",
    "PREFETCH_FACTOR",
    "SETTING_FIELDS",
    "UNWRITTEN_BATCHES",
    "Settings",
    "UnknownKinds",
    "overrides_from",
]

#: Default prefetch per slot: a worker holds up to this many claimed jobs per slot
#: waiting, beside the running ones.
PREFETCH_FACTOR = 4

#: Completion batches of finished jobs a worker may hold beyond its slots and prefetch
#: before it claims nothing more: one being written while the next one fills, so a slow
#: store still gets full batches (see :meth:`Settings.unwritten_limit`).
UNWRITTEN_BATCHES = 2

#: The variable of ``Settings.caps`` (provider=rate pairs).
_CAPS_ENV = "SKIPLOCK_CAPS"

#: What ``Settings.unknown_kinds`` may say.
UnknownKinds = Literal["error", "warn", "allow"]
UNKNOWN_KINDS = choice(*typing.get_args(UnknownKinds))

#: The engine's own settings (the global policy values are :data:`POLICY_FIELDS`).
ENGINE_FIELDS: tuple[Setting, ...] = (
    Setting("concurrency", 4, POSITIVE_INT, "Job slots per worker."),
    Setting(
        "batch_size",
        None,
        POSITIVE_INT,
        "Most jobs one claim takes (none: concurrency plus prefetch).",
        nullable=True,
    ),
    Setting(
        "prefetch",
        None,
        NON_NEGATIVE_INT,
        f"Claimed jobs a worker keeps waiting beside its running ones (none: "
        f"{PREFETCH_FACTOR} per slot; 0 for long jobs).",
        nullable=True,
    ),
    Setting(
        "completion_batch_size",
        100,
        POSITIVE_INT,
        "Most outcomes of jobs that ran outside their transaction one store call writes. "
        "A worker holds at most concurrency + prefetch + twice this many jobs whose outcome "
        "is not written; at that bound it claims nothing until the store has taken some.",
    ),
    Setting(
        "poll_interval",
        timedelta(seconds=1),
        POSITIVE_DURATION,
        "How often an idle worker looks for due jobs. Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "shutdown_timeout",
        timedelta(seconds=30),
        NON_NEGATIVE_DURATION,
        "How long a stopping worker lets running jobs finish. Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "heartbeat_interval",
        timedelta(seconds=10),
        POSITIVE_DURATION,
        "How often a worker reports it is alive; at most half of every `stale_ttl`. "
        "Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "maintenance_interval",
        timedelta(minutes=5),
        POSITIVE_DURATION,
        "How often stale jobs are recovered and old ones purged (one node at a time). "
        "Reads back as float seconds.",
        seconds_view=True,
    ),
    Setting(
        "retention",
        timedelta(days=7),
        POSITIVE_DURATION,
        "Succeeded jobs, and audit events, older than this are purged (none: never).",
        nullable=True,
    ),
    Setting("retention_archive", False, FLAG, "Purged jobs are archived instead of deleted."),
    Setting(
        "max_payload_bytes",
        MAX_PAYLOAD_BYTES,
        POSITIVE_INT,
        "Largest encoded payload (UTF-8 bytes) enqueue accepts.",
    ),
    Setting(
        "max_result_bytes",
        MAX_RESULT_BYTES,
        POSITIVE_INT,
        "Largest encoded processor return value (UTF-8 bytes) stored as the job's result; "
        "a larger one fails the job (dead, no retry).",
    ),
    Setting(
        "unknown_kinds",
        "error",
        UNKNOWN_KINDS,
        "What enqueue does with a kind the engine neither processes nor declared, once it "
        "knows any: `error` raises `UnknownKindError`, `warn` logs a warning (once per "
        "kind) and writes the job, `allow` writes it. An engine that knows no kind "
        "accepts any.",
    ),
    Setting(
        "audit",
        False,
        FLAG,
        "Record an audit trail of job lifecycle changes in the store's audit table (or "
        "the engine's `audit_sink`, which turns it on by itself); see docs/operations.md.",
    ),
    Setting(
        "audit_actor",
        None,
        ACTOR,
        "Who the audit trail names for enqueues, for admin calls without `actor=` and for "
        "stale-claim recovery (none: no one); workers name themselves by their id.",
        nullable=True,
    ),
)

#: Every scalar field of :class:`Settings`, each read from ``SKIPLOCK_<NAME>``.
SETTING_FIELDS: tuple[Setting, ...] = ENGINE_FIELDS + POLICY_FIELDS
_DEFAULT = field_defaults(SETTING_FIELDS)


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


def _kinds(
    value: Mapping[str, PolicyOverrides | Mapping[str, Any]],
) -> Mapping[str, PolicyOverrides]:
    checked: object = value  # checked at run time whatever the static type says
    if not isinstance(checked, Mapping):
        raise ValidationError(f"kinds: expected a mapping of kind to overrides, got {value!r}")
    result: dict[str, PolicyOverrides] = {}
    for kind, overrides in checked.items():
        try:
            check_kind(kind)
            result[kind] = overrides_from(overrides)
        except ValidationError as exc:
            raise _FieldError("kinds", f"kinds[{kind!r}]: {exc}") from None
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
            result[provider] = check_rate_limit("cap", to_rate_limit(limit))
        except ValidationError as exc:
            raise _FieldError("caps", f"caps[{provider!r}]: {exc}") from None
    return MappingProxyType(result)


@attrs.frozen(kw_only=True)
class Settings:
    """Everything an engine and its workers can be tuned with; validated at construction.

    Every field, its default and its ``SKIPLOCK_*`` variables are listed in
    ``docs/configuration.md`` (declared in :data:`ENGINE_FIELDS` and
    :data:`~skiplock.core.POLICY_FIELDS`). Durations are accepted as seconds (int or
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
    share it. Rate limits (a kind's ``rate_limit``, and ``caps``) are token buckets per
    process too (J6), so a cluster-wide rate must be divided by the number of worker
    processes (e.g. 20/s over 4 processes: ``5/10`` each).
    """

    # ---- the engine's own fields (ENGINE_FIELDS) -------------------------------------
    concurrency: int = _DEFAULT["concurrency"]
    batch_size: int | None = _DEFAULT["batch_size"]
    prefetch: int | None = _DEFAULT["prefetch"]
    completion_batch_size: int = _DEFAULT["completion_batch_size"]
    _poll_interval: timedelta = attrs.field(
        default=_DEFAULT["poll_interval"], converter=to_duration
    )
    _shutdown_timeout: timedelta = attrs.field(
        default=_DEFAULT["shutdown_timeout"], converter=to_duration
    )
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
    max_payload_bytes: int = _DEFAULT["max_payload_bytes"]
    max_result_bytes: int = _DEFAULT["max_result_bytes"]
    unknown_kinds: UnknownKinds = _DEFAULT["unknown_kinds"]
    audit: bool = _DEFAULT["audit"]
    audit_actor: str | None = _DEFAULT["audit_actor"]
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
    transactional: bool = _DEFAULT["transactional"]
    autocommit: bool = _DEFAULT["autocommit"]
    # ---- per kind and per provider ------------------------------------------------------
    kinds: Mapping[str, PolicyOverrides] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_kinds
    )
    caps: Mapping[str, RateLimit] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_caps
    )

    # Durations that have always read back as float seconds (stored as timedelta).
    poll_interval = SecondsView[float]()
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
        """How many claimed jobs a worker with ``concurrency`` slots may hold unstarted."""
        return self.prefetch if self.prefetch is not None else PREFETCH_FACTOR * concurrency

    def unwritten_limit(self, concurrency: int) -> int:
        """Most jobs a worker with ``concurrency`` slots holds whose outcome is not written
        yet: running, prefetched, or finished with the outcome waiting for the completer.

        So at most this many outcomes ever wait to be written: when the store writes
        slower than jobs finish, the worker claims only as fast as outcomes are written.
        """
        return (
            concurrency
            + self.claim_prefetch(concurrency)
            + UNWRITTEN_BATCHES * self.completion_batch_size
        )

    def claim_batch_size(self, concurrency: int) -> int:
        """How many jobs one claim may take for a worker with ``concurrency`` slots."""
        if self.batch_size is not None:
            return self.batch_size
        return concurrency + self.claim_prefetch(concurrency)

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
        variable.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {} if base is None else base._values()
        sources: dict[str, str] = {}
        for field in SETTING_FIELDS:
            raw = env.get(field.env)
            if raw is not None and raw.strip():
                values[field.name] = _parse(field.env, raw, field.parse_env)
                sources[field.name] = field.env
        kinds: dict[str, dict[str, Any]] = {}
        if base is not None:
            for kind, kind_overrides in base.kinds.items():
                kinds[kind] = {
                    field.name: field.stored(kind_overrides)
                    for field in POLICY_FIELDS
                    if field.stored(kind_overrides) is not None
                }
        for field in POLICY_FIELDS:
            name = field.kind_env
            raw = env.get(name) if name is not None else None
            if name is None or raw is None or not raw.strip():
                continue
            parse = functools.partial(_per_kind_value, field)
            for kind, value in _parse(name, raw, functools.partial(_pairs, parse=parse)).items():
                kinds.setdefault(kind, {})[field.name] = value
            sources["kinds"] = f"{sources['kinds']}, {name}" if "kinds" in sources else name
        if kinds:
            values["kinds"] = kinds
        raw_caps = env.get(_CAPS_ENV)
        if raw_caps is not None and raw_caps.strip():
            caps = _parse(_CAPS_ENV, raw_caps, lambda r: _pairs(r, RATE.parse))
            values["caps"] = {**values.get("caps", {}), **caps}
            sources["caps"] = _CAPS_ENV
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
        kind_names = {field.kind_env for field in POLICY_FIELDS if field.kind_env is not None}
        return frozenset({field.env for field in SETTING_FIELDS} | kind_names | {_CAPS_ENV})

    def _values(self) -> dict[str, Any]:
        """Every field as a constructor keyword (durations as stored timedeltas)."""
        values = {field.name: field.stored(self) for field in SETTING_FIELDS}
        values["kinds"] = dict(self.kinds)
        values["caps"] = dict(self.caps)
        return values


# ---- environment parsing ---------------------------------------------------------------


def _parse(name: str, raw: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(raw)
    except (ValueError, ValidationError) as exc:
        raise ValidationError(f"{name}={raw!r}: {exc}") from None


def _per_kind_value(field: Setting, raw: str) -> Any:
    # A per-kind value always sets the field: "none" would mean "not set" there.
    value = field.type.parse(raw)
    field.check(value, none_ok=False)
    return value


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
