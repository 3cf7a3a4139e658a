"""Task declarations: a kind, its payload type and its defaults, known without an engine.

A web process imports declarations to enqueue typed payloads with the kind's defaults; a
worker binds a processor to the same declaration and runs the jobs with the same policy
(``docs/tasks.md``). Declarations are plain frozen values: two that say the same are equal.
"""

from __future__ import annotations

import typing
from collections.abc import Callable  # noqa: TC003 - TaskOptions' hints resolve at run time
from datetime import timedelta  # noqa: TC003 - TaskOptions' hints resolve at run time
from typing import Any, Generic, TypeAlias, TypedDict, TypeVar, Unpack, overload

import attrs

from skiplock.core import PolicyOverrides, RateLimit, ValidationError
from skiplock.core.rules import (
    POLICY_FIELD_NAMES,
    IdempotencyConflict,
    IdempotencyScope,
    check_concurrency,
    check_kind,
    check_priority,
    overrides_from,
)

P = TypeVar("P")

#: A kind's concurrency key (:func:`declare`): one key for all its jobs, or a function
#: of the payload as enqueued (the typed object) that returns the job's key or None.
ConcurrencyKey: TypeAlias = "str | Callable[[Any], str | None]"


class TaskOptions(TypedDict, total=False):
    """The keywords of :func:`declare`, ``engine.task(kind, ...)`` and
    ``engine.processor(kind, ...)``: every policy field (``docs/configuration.md``), the
    ``provider`` whose cap in ``Settings.caps`` the kind shares, the default
    ``priority`` of its jobs, and their ``concurrency_key`` (a str, or a function of the
    payload returning the key or None) with its ``concurrency_limit`` (default 1): at
    most that many jobs of one key run at once, across kinds and workers
    (docs/keys.md, "Concurrency keys"). ``None`` (or leaving a keyword out) means "not
    set here".
    """

    priority: int | None
    max_attempts: int | None
    timeout: float | timedelta | None
    transactional: bool | None
    autocommit: bool | None
    idempotency_scope: IdempotencyScope | None
    idempotency_conflict: IdempotencyConflict | None
    node_limit: int | None
    cluster_limit: int | None
    rate_limit: RateLimit | tuple[float, int] | None
    prefetch_limit: int | None
    provider: str | None
    backoff_base: timedelta | float | None
    backoff_factor: float | None
    backoff_cap: timedelta | float | None
    backoff_jitter: float | None
    stale_ttl: timedelta | float | None
    concurrency_key: str | Callable[[Any], str | None] | None
    concurrency_limit: int | None


#: Every keyword :class:`TaskOptions` names: the policy fields, ``provider``,
#: ``priority``, ``concurrency_key`` and ``concurrency_limit``.
TASK_OPTION_NAMES: tuple[str, ...] = (
    *POLICY_FIELD_NAMES,
    "provider",
    "priority",
    "concurrency_key",
    "concurrency_limit",
)


def _check_payload_type(value: object) -> None:
    # A class (attrs, dataclass, pydantic model, TypedDict, dict...), a generic alias such
    # as dict[str, Any], or Any: what a processor's payload annotation may be.
    if value is Any or isinstance(value, type) or typing.get_origin(value) is not None:
        return
    raise TypeError(
        f"payload_type must be a type (an attrs class, dataclass, pydantic model, "
        f"TypedDict, dict, ...) or Any, got {value!r}"
    )


def type_name(value: object) -> str:
    """A payload type as a message or repr shows it."""
    if value is Any:
        return "Any"
    if isinstance(value, type):
        return value.__qualname__
    return repr(value)


@attrs.frozen(repr=False)
class TaskDef(Generic[P]):
    """A kind's declaration: its name, payload type ``P`` and defaults (see :func:`declare`).

    ``overrides`` holds the policy fields it sets, ``priority`` the default priority of
    its jobs, ``provider`` the provider cap it shares, ``concurrency_key`` and
    ``concurrency_limit`` its jobs' concurrency key (see :class:`TaskOptions`). Invalid
    values raise :class:`~skiplock.ValidationError` (a payload type that is no type:
    ``TypeError``).
    """

    kind: str
    payload_type: type[P]
    overrides: PolicyOverrides = attrs.field(factory=PolicyOverrides, converter=overrides_from)
    priority: int | None = attrs.field(default=None, kw_only=True)
    provider: str | None = attrs.field(default=None, kw_only=True)
    concurrency_key: ConcurrencyKey | None = attrs.field(default=None, kw_only=True)
    concurrency_limit: int | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        check_kind(self.kind)
        _check_payload_type(self.payload_type)
        if self.priority is not None:
            check_priority("priority", self.priority)
        provider: object = self.provider
        if provider is not None and (not isinstance(provider, str) or not provider.strip()):
            raise ValidationError(f"provider must be a non-empty str, got {provider!r}")
        key: object = self.concurrency_key
        if callable(key):
            if self.concurrency_limit is not None:
                check_concurrency("key", self.concurrency_limit)
        else:
            check_concurrency(key, self.concurrency_limit)

    def key_of(self, payload: Any) -> tuple[str | None, int | None]:
        """The concurrency key and limit of a job of this kind with ``payload`` (the
        payload as enqueued), as the declaration says: ``(None, None)`` without a key."""
        key = self.concurrency_key
        if key is None:
            return None, None
        value = key(payload) if callable(key) else key
        return (None, None) if value is None else (value, self.concurrency_limit)

    def options(self) -> dict[str, Any]:
        """The keywords this declaration sets (as :func:`declare` took them)."""
        values = {name: self.overrides.value(name) for name in POLICY_FIELD_NAMES}
        values.update(
            provider=self.provider,
            priority=self.priority,
            concurrency_key=self.concurrency_key,
            concurrency_limit=self.concurrency_limit,
        )
        return {name: value for name, value in values.items() if value is not None}

    def differences(self, other: TaskDef[Any]) -> list[str]:
        """What ``other`` declares differently, as ``name: mine != theirs`` lines."""
        mine: dict[str, object] = {"kind": self.kind, "payload_type": type_name(self.payload_type)}
        theirs: dict[str, object] = {
            "kind": other.kind,
            "payload_type": type_name(other.payload_type),
        }
        my_options, their_options = self.options(), other.options()
        for name in TASK_OPTION_NAMES:
            mine[name] = my_options.get(name)
            theirs[name] = their_options.get(name)
        return [f"{k}: {mine[k]!r} != {theirs[k]!r}" for k in mine if mine[k] != theirs[k]]

    def __repr__(self) -> str:
        options = "".join(f", {name}={value!r}" for name, value in self.options().items())
        return f"TaskDef({self.kind!r}, {type_name(self.payload_type)}{options})"


@overload
def declare(kind: str, /, **options: Unpack[TaskOptions]) -> TaskDef[Any]: ...
@overload
def declare(kind: str, payload_type: type[P], /, **options: Unpack[TaskOptions]) -> TaskDef[P]: ...
def declare(kind: str, payload_type: Any = Any, /, **options: Unpack[TaskOptions]) -> TaskDef[Any]:
    """Declare ``kind`` with its payload type and defaults; no engine needed.

    ``welcome = skiplock.declare("email.welcome", Welcome, max_attempts=5, priority=-10)``
    returns a ``TaskDef[Welcome]``. An enqueue-only engine gets a typed handle with
    ``engine.declare(welcome)`` and writes jobs with these defaults; a worker binds the
    processor with ``@engine.task(welcome)`` and runs them with the same policy. Without
    ``payload_type`` the payload is untyped JSON (``TaskDef[Any]``).
    """
    unknown = sorted(set(options) - set(TASK_OPTION_NAMES))
    if unknown:
        raise TypeError(
            f"declare() got unexpected keyword argument(s) {unknown}; "
            f"options are {list(TASK_OPTION_NAMES)}"
        )
    values: dict[str, Any] = dict(options)
    priority = values.pop("priority", None)
    provider = values.pop("provider", None)
    key = values.pop("concurrency_key", None)
    limit = values.pop("concurrency_limit", None)
    return TaskDef(
        kind,
        payload_type,
        overrides_from(values),
        priority=priority,
        provider=provider,
        concurrency_key=key,
        concurrency_limit=limit,
    )
