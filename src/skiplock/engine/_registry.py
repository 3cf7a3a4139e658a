"""Processor registration and declared kinds: the decorator and class styles resolved into
specs (R2), and every kind's declaration (its payload type and defaults, ``docs/tasks.md``).
"""

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

from skiplock.core import KindPolicy, PolicyOverrides, RateLimit
from skiplock.core.rules import POLICY_FIELD_NAMES, overrides_from
from skiplock.core.rules import check_int as check_int
from skiplock.core.rules import check_kind as check_kind

from ._codec import Decoder, decoder_for, payload_annotation, resolve_annotation
from ._declaration import TaskDef, declare, type_name

if TYPE_CHECKING:
    from datetime import timedelta

    from skiplock.core.rules import IdempotencyConflict, IdempotencyScope

    from ._context import JobContext
    from .settings._settings import Settings

logger = logging.getLogger("skiplock.engine")


class Processor:
    """Base class for class-style processors; register an instance with ``engine.register``.

    Set ``kind`` and any policy attribute (``None`` means "use the configured default";
    durations may be seconds or a timedelta, see :data:`~skiplock.core.rules.POLICY_FIELDS`),
    and ``priority`` (the default priority of the kind's jobs), and implement
    ``process(self, payload, ctx)`` — ``async def`` for an ``AsyncEngine``.
    ``transactional = True`` runs it inside the job's transaction, ``autocommit = True``
    hands it an autocommit connection; by default it gets no connection (R10).
    ``rate_limit`` (per tenant and kind) and a ``provider``'s cap in ``Settings.caps`` are
    token buckets shared by every worker of the cluster (``Settings.rate_limit_scope``).
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
    prefetch_limit: ClassVar[int | None] = None
    provider: ClassVar[str | None] = None
    backoff_base: ClassVar[timedelta | float | None] = None
    backoff_factor: ClassVar[float | None] = None
    backoff_cap: ClassVar[timedelta | float | None] = None
    backoff_jitter: ClassVar[float | None] = None
    stale_ttl: ClassVar[timedelta | float | None] = None
    idempotency_scope: ClassVar[IdempotencyScope | None] = None
    idempotency_conflict: ClassVar[IdempotencyConflict | None] = None
    priority: ClassVar[int | None] = None

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
    policy fields (:data:`~skiplock.core.rules.POLICY_FIELDS`); durations may be seconds."""
    return overrides_from(options)


def declaration_of(processor: Processor) -> TaskDef[Any]:
    """The implicit declaration of a class-style processor: its kind, the payload type
    its ``process`` annotates, and its policy, ``provider`` and ``priority`` attributes."""
    cls = type(processor)
    options: dict[str, Any] = {name: getattr(cls, name) for name in POLICY_FIELD_NAMES}
    declared = declare(cls.kind, provider=cls.provider, priority=cls.priority, **options)
    return typed_by(declared, processor.process)


def typed_by(declaration: TaskDef[Any], fn: Callable[..., Any]) -> TaskDef[Any]:
    """The implicit declaration of a processor registered by kind: ``declaration`` (from
    its registration keywords) with the payload type ``fn`` annotates, if it names one."""
    if not callable(fn):
        raise TypeError(f"processor for {declaration.kind!r} must be callable, got {fn!r}")
    annotation, _ = payload_annotation(fn)
    if annotation is inspect.Parameter.empty:
        return declaration
    try:
        return attrs.evolve(declaration, payload_type=typing.cast("type[Any]", annotation))
    except TypeError:  # an annotation no declaration names (None, say): still decoded
        return declaration


def bound_payload_type(declaration: TaskDef[Any], fn: Callable[..., Any]) -> object:
    """The payload type a processor bound to ``declaration`` receives: the declared one,
    or the function's own annotation when the declaration says Any. A function
    annotating another type than the declared one is a TypeError."""
    annotation, _ = payload_annotation(fn)
    declared = declaration.payload_type
    if annotation is inspect.Parameter.empty or annotation == declared:
        return declared
    if declared is Any:
        return annotation
    raise TypeError(
        f"processor {getattr(fn, '__qualname__', fn)!r} annotates its payload as "
        f"{type_name(annotation)}, but {declaration.kind!r} is declared with payload type "
        f"{type_name(declared)}: annotate it as that type, or leave it unannotated"
    )


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
    declaration: TaskDef[Any], fn: Callable[..., Any], settings: Settings
) -> ProcessorSpec:
    """Validate and resolve one registration: ``fn`` processes ``declaration``'s kind with
    its policy (``Settings.kinds`` over the declaration over the globals)."""
    kind = declaration.kind
    if not callable(fn):
        raise TypeError(f"processor for {kind!r} must be callable, got {fn!r}")
    provider = declaration.provider
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
    payload_type = bound_payload_type(declaration, fn)
    _, positional = payload_annotation(fn)
    return ProcessorSpec(
        kind=kind,
        fn=fn,
        overrides=declaration.overrides,
        policy=settings.policy_for(kind, declaration.overrides),
        provider=provider,
        payload_type=payload_type,
        decode=decoder_for(payload_type),
        is_async=is_async,
        takes_context=positional >= 2,
    )


class Registry:
    """Every kind an engine knows: processors, declarations, and bare declared kinds.

    Each processor comes with its kind's declaration (an implicit one when registered by
    kind); a kind has one declaration, so two different ones for a kind are refused.
    Thread-safe. :attr:`version` counts the changes, for what is derived from it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._specs: dict[str, ProcessorSpec] = {}
        self._declarations: dict[str, TaskDef[Any]] = {}
        self._declared: set[str] = set()
        self._version = 0
        self._known: tuple[int, frozenset[str]] = (0, frozenset())

    @property
    def version(self) -> int:
        """Changes so far: a value derived from the registry holds while this is equal
        (every change bumps it after it is made)."""
        return self._version

    def _changed(self) -> None:
        # Under the lock, after the change: a reader that sees the new version sees it.
        self._version += 1

    def add(self, spec: ProcessorSpec, declaration: TaskDef[Any]) -> None:
        """Register ``spec`` for ``declaration``'s kind; a kind can have one processor."""
        with self._lock:
            if spec.kind in self._specs:
                raise ValueError(f"a processor for kind {spec.kind!r} is already registered")
            self._check_same(declaration)
            self._specs[spec.kind] = spec
            self._declarations[spec.kind] = declaration
            self._changed()

    def declare_task(self, declaration: TaskDef[Any]) -> None:
        """Know ``declaration``'s kind with its defaults (again: a no-op if equal)."""
        with self._lock:
            self._check_same(declaration)
            self._declarations[declaration.kind] = declaration
            self._changed()

    def _check_same(self, declaration: TaskDef[Any]) -> None:
        known = self._declarations.get(declaration.kind)
        if known is not None and known != declaration:
            differences = "; ".join(known.differences(declaration))
            raise ValueError(
                f"kind {declaration.kind!r} is already declared differently here "
                f"({differences}): declare each kind once, with skiplock.declare(), and "
                "bind its processor with engine.task(declaration)"
            )

    def declare(self, kind: str) -> None:
        """Know ``kind`` without processing it here (enqueue-only for it, no defaults)."""
        check_kind(kind)
        with self._lock:
            self._declared.add(kind)
            self._changed()

    def get(self, kind: str) -> ProcessorSpec | None:
        """The spec for ``kind``, or None."""
        return self._specs.get(kind)

    def declaration(self, kind: str) -> TaskDef[Any] | None:
        """The declaration of ``kind`` (a processor's implicit one included), or None."""
        return self._declarations.get(kind)

    @property
    def specs(self) -> Mapping[str, ProcessorSpec]:
        """Registered processors by kind (a read-only snapshot)."""
        with self._lock:
            return MappingProxyType(dict(self._specs))

    @property
    def declarations(self) -> Mapping[str, TaskDef[Any]]:
        """Every known kind's declaration by kind (a read-only snapshot): a kind known
        only by :meth:`declare` has ``declare(kind)``'s, untyped and without defaults."""
        with self._lock:
            found = dict(self._declarations)
            bare = sorted(self._declared - found.keys())
        return MappingProxyType(found | {kind: declare(kind) for kind in bare})

    def known_kinds(self) -> frozenset[str]:
        """Kinds with a processor or a declaration, and bare declared kinds."""
        version, known = self._known
        if version == self._version:  # built once per change, not per enqueue
            return known
        with self._lock:
            known = frozenset(self._declarations) | frozenset(self._declared)
            self._known = (self._version, known)
        return known

    def resolve_again(self, policy: Callable[[ProcessorSpec], KindPolicy]) -> None:
        """Give every processor the policy ``policy(spec)`` (new settings); all or none:
        if one raises, nothing changes."""
        with self._lock:
            specs = {
                kind: attrs.evolve(spec, policy=policy(spec)) for kind, spec in self._specs.items()
            }
            self._specs = specs
            self._changed()
