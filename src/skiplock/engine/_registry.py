"""Processor registration: the decorator and class styles, resolved into specs (R2)."""

from __future__ import annotations

import collections.abc
import inspect
import logging
import threading
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from skiplock.core import (
    POLICY_FIELD_NAMES,
    KindPolicy,
    PolicyOverrides,
    RateLimit,
    ValidationError,
    overrides_from,
)
from skiplock.core import check_int as check_int  # re-exported for the engine and workers
from skiplock.core import check_kind as check_kind

from ._codec import Decoder, decoder_for, payload_annotation, resolve_annotation

if TYPE_CHECKING:
    from datetime import timedelta

    from ._context import JobContext
    from ._settings import Settings

logger = logging.getLogger("skiplock.engine")


class Processor:
    """Base class for class-style processors; register an instance with ``engine.register``.

    Set ``kind`` and any policy attribute (``None`` means "use the configured default";
    durations may be seconds or a timedelta, see :data:`~skiplock.core.POLICY_FIELDS`),
    and implement ``process(self, payload, ctx)`` — ``async def`` for an ``AsyncEngine``.
    ``transactional = True`` runs it inside the job's transaction, ``autocommit = True``
    hands it an autocommit connection; by default it gets no connection (R10).
    ``rate_limit`` (per tenant and kind) and a ``provider``'s cap in ``Settings.caps`` are
    token buckets per process, shared by the engine's workers there: divide a
    cluster-wide limit by the number of worker processes.
    The payload parameter's annotation selects the decoded type, as for functions::

        class SendEmail(Processor):
            kind = "email.send"
            max_attempts = 10
            rate_limit = RateLimit(rps=5, burst=10)

            async def process(self, payload: Email, ctx: JobContext) -> None: ...
    """

    kind: ClassVar[str]
    max_attempts: ClassVar[int | None] = None
    timeout: ClassVar[float | timedelta | None] = None
    transactional: ClassVar[bool | None] = None
    autocommit: ClassVar[bool | None] = None
    node_limit: ClassVar[int | None] = None
    cluster_limit: ClassVar[int | None] = None
    rate_limit: ClassVar[RateLimit | tuple[float, int] | None] = None
    provider: ClassVar[str | None] = None
    backoff_base: ClassVar[timedelta | float | None] = None
    backoff_factor: ClassVar[float | None] = None
    backoff_cap: ClassVar[timedelta | float | None] = None
    backoff_jitter: ClassVar[float | None] = None
    stale_ttl: ClassVar[timedelta | float | None] = None

    def process(self, payload: Any, ctx: JobContext) -> Any:
        """Handle one job; raise to fail the attempt."""
        raise NotImplementedError(f"{type(self).__name__}.process is not implemented")


@attrs.frozen
class ProcessorSpec:
    """A registered processor with its resolved policy (explicit > processor > global)."""

    kind: str
    fn: Callable[..., Any]
    overrides: PolicyOverrides
    policy: KindPolicy
    provider: str | None
    payload_type: object
    decode: Decoder
    is_async: bool
    takes_context: bool

    def args(self, payload: Any, ctx: JobContext) -> tuple[Any, ...]:
        """The positional arguments for one call."""
        return (payload, ctx) if self.takes_context else (payload,)


def make_overrides(**options: Any) -> PolicyOverrides:
    """Processor-level overrides from the registration keywords: exactly the declared
    policy fields (:data:`~skiplock.core.POLICY_FIELDS`); durations may be seconds."""
    return overrides_from(options)


def overrides_of(processor: Processor) -> PolicyOverrides:
    """The policy attributes of a class-style processor."""
    cls = type(processor)
    return overrides_from({name: getattr(cls, name) for name in POLICY_FIELD_NAMES})


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """True for ``async def`` functions and methods (also behind functools.wraps)."""
    target = inspect.unwrap(fn)
    return inspect.iscoroutinefunction(target) or inspect.iscoroutinefunction(
        getattr(target, "__call__", None)  # noqa: B004 - instances with an async __call__
    )


#: Outer names of return annotations that cannot be resolved (imported under
#: TYPE_CHECKING) which surely mean an awaitable; "Task" or "Future" may be the app's own.
_AWAITABLE_NAMES = frozenset({"Awaitable", "Coroutine"})


def returns_awaitable(fn: Callable[..., Any]) -> bool:
    """True when ``fn``'s return annotation says it returns an awaitable (a coroutine, a
    future, ...): a plain function that does hands its work to nobody."""
    try:
        annotation = inspect.signature(fn).return_annotation
    except (TypeError, ValueError):
        return False
    if isinstance(annotation, str):
        try:
            annotation = resolve_annotation(fn, annotation)
        except Exception:
            head = annotation.split("[", 1)[0].strip().rpartition(".")[2]
            return head in _AWAITABLE_NAMES
    origin = typing.get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, collections.abc.Awaitable)


def build_spec(
    kind: str,
    fn: Callable[..., Any],
    overrides: PolicyOverrides,
    provider: str | None,
    settings: Settings,
) -> ProcessorSpec:
    """Validate and resolve one registration."""
    check_kind(kind)
    if not callable(fn):
        raise TypeError(f"processor for {kind!r} must be callable, got {fn!r}")
    checked: object = provider
    if checked is not None and (not isinstance(checked, str) or not checked.strip()):
        raise ValidationError(f"provider must be a non-empty str, got {provider!r}")
    if provider is not None and provider not in settings.caps:
        logger.warning(
            "processor %r names provider %r, which has no cap in Settings.caps: unlimited",
            kind,
            provider,
        )
    is_async = is_async_callable(fn)
    if not is_async and returns_awaitable(fn):
        raise TypeError(
            f"processor for {kind!r} is a plain function annotated to return an awaitable, "
            "which nothing would await (its work would never run); make it async def"
        )
    annotation, positional = payload_annotation(fn)
    return ProcessorSpec(
        kind=kind,
        fn=fn,
        overrides=overrides,
        policy=settings.policy_for(kind, overrides),
        provider=provider,
        payload_type=annotation,
        decode=decoder_for(annotation),
        is_async=is_async,
        takes_context=positional >= 2,
    )


class Registry:
    """Processors by kind, plus kinds declared as processed elsewhere. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, ProcessorSpec] = {}
        self._declared: set[str] = set()

    def add(self, spec: ProcessorSpec) -> None:
        """Register ``spec``; a kind can have one processor only."""
        with self._lock:
            if spec.kind in self._specs:
                raise ValueError(f"a processor for kind {spec.kind!r} is already registered")
            self._specs[spec.kind] = spec

    def declare(self, kind: str) -> None:
        """Know ``kind`` without processing it here (enqueue-only for it)."""
        check_kind(kind)
        with self._lock:
            self._declared.add(kind)

    def get(self, kind: str) -> ProcessorSpec | None:
        """The spec for ``kind``, or None."""
        return self._specs.get(kind)

    @property
    def specs(self) -> Mapping[str, ProcessorSpec]:
        """Registered processors by kind (a read-only snapshot)."""
        with self._lock:
            return MappingProxyType(dict(self._specs))

    def known_kinds(self) -> frozenset[str]:
        """Registered and declared kinds."""
        with self._lock:
            return frozenset(self._specs) | frozenset(self._declared)

    def resolve_again(self, policy: Callable[[ProcessorSpec], KindPolicy]) -> None:
        """Give every processor the policy ``policy(spec)`` (new settings); all or none:
        if one raises, nothing changes."""
        with self._lock:
            specs = {
                kind: attrs.evolve(spec, policy=policy(spec)) for kind, spec in self._specs.items()
            }
            self._specs = specs
