"""Configuration fields declared once: name, default, rule, text form and meaning.

:data:`POLICY_FIELDS` is the single declaration of the per-kind policy settings. The
policy classes validate and resolve through it, ``Settings`` takes its global defaults,
checks and ``SKIPLOCK_*`` variables from it, the processor registry accepts exactly its
names, and the documentation's configuration table is checked against it.

Every duration is stored as a :class:`~datetime.timedelta` and accepted as one or as
seconds (int or float); in environment variables as seconds or with a unit suffix
(``ms``, ``s``, ``m``, ``h``, ``d``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Generic, TypeVar, cast, overload

import attrs

from ._bucket import RateLimit
from ._idempotency import IDEMPOTENCY_CONFLICTS, IDEMPOTENCY_SCOPES
from ._validation import (
    check_actor,
    check_bool,
    check_choice,
    check_duration,
    check_int,
    check_number,
    check_rate_limit,
)

_S = TypeVar("_S", bound=float | None)
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
#: What an environment variable may say for "no value" (no limit, off) where allowed.
NONE_WORDS = frozenset({"none", "off", "null"})


# ---- text forms (environment variables) ---------------------------------------------


def parse_duration(raw: str) -> timedelta:
    """``"30"``, ``"1.5"``, ``"250ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"7d"`` as a timedelta."""
    match = _DURATION_RE.fullmatch(raw)
    if match is None:
        raise ValueError("expected a duration such as 30, 1.5, 250ms, 30s, 5m, 2h or 7d")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def parse_int(raw: str) -> int:
    """A decimal int."""
    return int(raw.strip())


def parse_float(raw: str) -> float:
    """A decimal number."""
    return float(raw.strip())


def parse_bool(raw: str) -> bool:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case)."""
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("expected a boolean: 1/0, true/false, yes/no, on/off")


def parse_rate(raw: str) -> RateLimit:
    """``"rps/burst"``, e.g. ``"5/10"``."""
    rps, sep, burst = raw.partition("/")
    if not sep:
        raise ValueError("expected a rate limit 'rps/burst', e.g. 5/10")
    return RateLimit(rps=float(rps), burst=int(burst))


# ---- value types: a check and a text form ---------------------------------------------


@attrs.frozen
class ValueType:
    """What a field accepts: ``check(name, value)`` raises ValidationError naming the
    field, ``parse(text)`` reads an environment variable, ``text`` describes it."""

    check: Callable[[str, Any], object]
    parse: Callable[[str], Any]
    text: str


POSITIVE_INT = ValueType(functools.partial(check_int, minimum=1), parse_int, "int >= 1")
NON_NEGATIVE_INT = ValueType(functools.partial(check_int, minimum=0), parse_int, "int >= 0")
POSITIVE_DURATION = ValueType(check_duration, parse_duration, "duration > 0")
NON_NEGATIVE_DURATION = ValueType(
    functools.partial(check_duration, allow_zero=True), parse_duration, "duration >= 0"
)
FACTOR = ValueType(functools.partial(check_number, minimum=1), parse_float, "number >= 1")
FRACTION = ValueType(
    functools.partial(check_number, minimum=0, maximum=1), parse_float, "number in [0, 1]"
)
FLAG = ValueType(check_bool, parse_bool, "bool")
RATE = ValueType(check_rate_limit, parse_rate, "rps/burst")
ACTOR = ValueType(check_actor, str.strip, "text")


def _parse_word(raw: str) -> str:
    return raw.strip().lower()


def choice(*options: str) -> ValueType:
    """One of the words ``options`` (any case in the environment)."""
    text = f"{', '.join(options[:-1])} or {options[-1]}" if len(options) > 1 else options[0]
    return ValueType(functools.partial(check_choice, choices=options), _parse_word, text)


@attrs.frozen
class Setting:
    """One configuration field.

    ``nullable``: ``None`` is a valid value (no limit, off), written ``none`` in the
    environment. Policy fields also have a per-kind variable (``kind_env``, a list of
    ``kind=value``) and, for the retry fields, the :class:`RetryPolicy` attribute they set.
    ``seconds_view``: the value is stored as a timedelta in ``_<name>`` while ``<name>``
    reads back as float seconds, as it always has.
    """

    name: str
    default: Any
    type: ValueType
    doc: str
    nullable: bool = False
    kind_env: str | None = None
    retry_attr: str | None = None
    seconds_view: bool = False

    @property
    def env(self) -> str:
        """The global environment variable, ``SKIPLOCK_<NAME>``."""
        return f"SKIPLOCK_{self.name.upper()}"

    @property
    def attr(self) -> str:
        """The attribute that stores the value."""
        return f"_{self.name}" if self.seconds_view else self.name

    def stored(self, obj: object) -> Any:
        """The value stored on ``obj`` (a timedelta for durations)."""
        return getattr(obj, self.attr)

    def check(self, value: object, *, none_ok: bool | None = None) -> None:
        """Raise ValidationError unless ``value`` is valid (``None`` is valid if
        ``none_ok``, by default if the field is nullable)."""
        if value is None and (self.nullable if none_ok is None else none_ok):
            return
        self.type.check(self.name, value)

    def parse_env(self, raw: str) -> Any:
        """The value of an environment variable's text."""
        if self.nullable and raw.strip().lower() in NONE_WORDS:
            return None
        return self.type.parse(raw)


class SecondsView(Generic[_S]):
    """A read-only attribute giving the timedelta stored in ``_<name>`` as float seconds.

    For fields declared with ``seconds_view=True``, which have always read back as
    seconds: ``poll_interval = SecondsView[float]()``, or ``SecondsView[float | None]()``
    for a nullable one.
    """

    _attr: str

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> SecondsView[_S]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _S: ...
    def __get__(self, obj: object, owner: type | None = None) -> SecondsView[_S] | _S:
        if obj is None:
            return self
        value: timedelta | None = getattr(obj, self._attr)
        return cast("_S", None if value is None else value.total_seconds())


def check_fields(obj: object, fields: Iterable[Setting], *, none_ok: bool | None = None) -> None:
    """Check every field's stored value on ``obj`` (see :meth:`Setting.check`)."""
    for field in fields:
        field.check(field.stored(obj), none_ok=none_ok)


def field_defaults(fields: Iterable[Setting]) -> Mapping[str, Any]:
    """Field name -> default."""
    return {field.name: field.default for field in fields}


#: The per-kind policy settings, each declared once. Resolution per kind: explicit
#: configuration (``Settings.kinds``) > the processor's own value > the global value.
POLICY_FIELDS: tuple[Setting, ...] = (
    Setting(
        "max_attempts",
        5,
        POSITIVE_INT,
        "Attempts before a failing job is dead.",
        kind_env="SKIPLOCK_KIND_MAX_ATTEMPTS",
        retry_attr="max_attempts",
    ),
    Setting(
        "backoff_base",
        timedelta(seconds=30),
        NON_NEGATIVE_DURATION,
        "Delay before the first retry.",
        kind_env="SKIPLOCK_KIND_BACKOFF_BASE",
        retry_attr="base",
    ),
    Setting(
        "backoff_factor",
        2.0,
        FACTOR,
        "The delay is multiplied by this for each further attempt.",
        kind_env="SKIPLOCK_KIND_BACKOFF_FACTOR",
        retry_attr="factor",
    ),
    Setting(
        "backoff_cap",
        timedelta(hours=24),
        NON_NEGATIVE_DURATION,
        "Longest delay before jitter (at least `backoff_base`).",
        kind_env="SKIPLOCK_KIND_BACKOFF_CAP",
        retry_attr="cap",
    ),
    Setting(
        "backoff_jitter",
        0.1,
        FRACTION,
        "Up to this fraction of the delay is added at random.",
        kind_env="SKIPLOCK_KIND_BACKOFF_JITTER",
        retry_attr="jitter",
    ),
    Setting(
        "timeout",
        None,
        POSITIVE_DURATION,
        "A job running longer fails; also its connection's statement timeout "
        "(none: no limit). Reads back as float seconds.",
        nullable=True,
        kind_env="SKIPLOCK_TIMEOUTS",
        seconds_view=True,
    ),
    Setting(
        "stale_ttl",
        timedelta(minutes=15),
        POSITIVE_DURATION,
        "A running job whose worker has not sent a heartbeat for this long is recovered; "
        "at least twice `heartbeat_interval`.",
        kind_env="SKIPLOCK_STALE_TTLS",
    ),
    Setting(
        "node_limit",
        None,
        POSITIVE_INT,
        "Most jobs of the kind running at once per worker process, shared by all workers "
        "of one engine there (none: no limit).",
        nullable=True,
        kind_env="SKIPLOCK_NODE_LIMITS",
    ),
    Setting(
        "cluster_limit",
        None,
        POSITIVE_INT,
        "Most running jobs of the kind across all workers (none: no limit).",
        nullable=True,
        kind_env="SKIPLOCK_CLUSTER_LIMITS",
    ),
    Setting(
        "rate_limit",
        None,
        RATE,
        "Token bucket per (tenant, kind), shared by the cluster (per worker process with "
        '`rate_limit_scope = "process"`; none: no limit).',
        nullable=True,
        kind_env="SKIPLOCK_RATE_LIMITS",
    ),
    Setting(
        "prefetch_limit",
        None,
        NON_NEGATIVE_INT,
        "Most claimed jobs of the kind a worker holds unstarted beside the ones it starts "
        "at once (none: no limit of its own, but 0 for a kind with a `cluster_limit`, a "
        "`rate_limit` or a provider cap, so no node hoards limited work).",
        nullable=True,
        kind_env="SKIPLOCK_PREFETCH_LIMITS",
    ),
    Setting(
        "transactional",
        False,
        FLAG,
        "Run the processor inside the job's transaction (`ctx.connection`).",
        kind_env="SKIPLOCK_KIND_TRANSACTIONAL",
    ),
    Setting(
        "autocommit",
        False,
        FLAG,
        "Hand the processor an autocommit connection (exclusive with `transactional`).",
        kind_env="SKIPLOCK_KIND_AUTOCOMMIT",
    ),
    Setting(
        "idempotency_scope",
        "global",
        choice(*IDEMPOTENCY_SCOPES),
        "Where an enqueued job's idempotency key is unique: `global` (among all jobs) or "
        "`tenant` (among its tenant's jobs; a job without a tenant is in the global scope). "
        "The enqueuing engine's value for the kind applies.",
        kind_env="SKIPLOCK_KIND_IDEMPOTENCY_SCOPE",
    ),
    Setting(
        "idempotency_conflict",
        "ignore",
        choice(*IDEMPOTENCY_CONFLICTS),
        "What an enqueue whose idempotency key exists does: `ignore` returns the existing "
        "job; `replace_pending` gives a still-pending job the new payload, due time and "
        "priority (audited as `job_replaced`) and leaves a running or finished one alone. "
        "The enqueuing engine's value for the kind applies.",
        kind_env="SKIPLOCK_KIND_IDEMPOTENCY_CONFLICT",
    ),
)

#: The declared policy field names, in declaration order.
POLICY_FIELD_NAMES: tuple[str, ...] = tuple(field.name for field in POLICY_FIELDS)
POLICY_DEFAULTS: Mapping[str, Any] = field_defaults(POLICY_FIELDS)
