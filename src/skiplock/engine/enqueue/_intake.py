"""What an engine accepts: each kind's resolved policy, and enqueue items turned into
validated requests with their kind's defaults (X2: everything is checked before the
store is asked). One for both flavours: nothing here waits on the store.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from skiplock.core import (
    EnqueueBatch,
    EnqueueRequest,
    UnknownKindError,
    ValidationError,
    encode_payload,
    rules,
)
from skiplock.core.rules import (
    IdempotencyConflict,
    IdempotencyScope,
    check_available_at,
    check_concurrency,
    check_job_fields,
)

from .._codec import encode
from .._declaration import TaskDef
from .._inputs import Enqueue, as_delay

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime, timedelta

    from skiplock.core import KindPolicy

    from .._registry import Registry
    from ..settings._settings import Settings

logger = logging.getLogger("skiplock.engine")
T = TypeVar("T")

#: At most this many resolved policies of kinds without a processor are kept (and as
#: many kinds' checks, and undeclared kinds warned about): kinds come from callers.
POLICY_CACHE_SIZE = 1024


@attrs.frozen
class KindIntake:
    """One kind's enqueue, compiled: the defaults of what an enqueue of it leaves out,
    resolved once from its declaration and policy (:meth:`Intake.kind_intake`).

    ``priority`` is the declared priority (else 0); ``max_attempts``,
    ``idempotency_scope`` and ``idempotency_conflict`` the kind's resolved policy;
    ``declaration`` the kind's declaration when it declares a concurrency key (the key of
    a job that sets none), else None. One kept by an :class:`Intake` passed the kind's
    checks (its name, ``Settings.unknown_kinds``, its defaults' bounds), so an enqueue of
    it checks only the options it sets.
    """

    priority: int
    max_attempts: int
    idempotency_scope: IdempotencyScope = "global"
    idempotency_conflict: IdempotencyConflict = "ignore"
    declaration: TaskDef[Any] | None = None


class Intake:
    """An engine's kinds as enqueue sees them, over its registry and settings.

    Resolved policies of kinds without a processor here are cached: resolving builds and
    validates new policy objects, far too slow to repeat for every enqueued job. Settings
    are frozen, so only new settings (:meth:`configure`) or a registration
    (:meth:`forget`) change them.

    Cached as well: each kind that passed its checks (format, ``Settings.unknown_kinds``,
    its defaults' bounds) compiled (:class:`KindIntake`), kept while the registry
    (:attr:`Registry.version`) and the settings are unchanged, so an enqueue of a kind
    seen before checks only the options it sets (:class:`RequestBuilder`).
    """

    def __init__(self, registry: Registry, settings: Settings) -> None:
        self._registry = registry
        self._settings = settings
        self._policies: dict[str, KindPolicy] = {}
        # (registry version, settings, compiled kinds): one tuple, replaced whole, so a
        # thread never sees a version with another version's kinds.
        self._compiled: tuple[int, Settings | None, dict[str, KindIntake]] = (-1, None, {})
        self._warned_kinds: set[str] = set()  # undeclared kinds warned about (unknown_kinds)
        # The last builder without a trace that checks kinds, with the compiled tuple it
        # was made for: every untraced enqueue asks for one.
        self._plain: tuple[object, RequestBuilder] | None = None

    def configure(self, settings: Settings) -> None:
        """Use ``settings`` from now on (the engine's :meth:`AsyncEngine.configure`)."""
        self._settings = settings
        self._policies.clear()

    def forget(self, kind: str) -> None:
        """Resolve ``kind``'s policy again: a processor or declaration of it came."""
        self._policies.pop(kind, None)

    def policy(self, kind: str) -> KindPolicy:
        """The resolved policy of ``kind`` (:meth:`AsyncEngine.policy`)."""
        spec = self._registry.get(kind)
        if spec is not None:
            return spec.policy
        policy = self._policies.get(kind)
        if policy is None:
            declaration = self._registry.declaration(kind)
            overrides = None if declaration is None else declaration.overrides
            policy = self._settings.policy_for(kind, overrides)
            if len(self._policies) < POLICY_CACHE_SIZE:  # bounded: kinds come from callers
                self._policies[kind] = policy
        return policy

    def requests(
        self,
        items: Sequence[Enqueue],
        trace: Mapping[str, str] | None = None,
        *,
        check_kinds: bool = True,
    ) -> EnqueueBatch:
        """Validated requests for ``items`` (X2), each carrying ``trace``; with
        ``check_kinds=False`` the kind may be one this engine does not know yet."""
        return self.builder(trace, check_kinds=check_kinds).requests(items)

    def builder(
        self, trace: Mapping[str, str] | None = None, *, check_kinds: bool = True
    ) -> RequestBuilder:
        """Requests for one enqueue call, each carrying ``trace`` (as :meth:`requests`)."""
        registry = self._registry
        settings = self._settings
        version = registry.version
        compiled = self._compiled
        plain = trace is None and check_kinds
        if compiled[0] != version or compiled[1] is not settings:
            compiled = self._compiled = (version, settings, {})
        elif plain and self._plain is not None and self._plain[0] is compiled:
            return self._plain[1]  # the same kinds and settings: the same builder
        known = registry.known_kinds()
        mode = settings.unknown_kinds
        builder = RequestBuilder(
            self,
            # Kinds checked under the other rule are not known to pass this one.
            compiled[2] if check_kinds else None,
            trace=trace,
            known_kinds=known if known and mode == "error" and check_kinds else None,
            warn_unless=known if known and mode == "warn" and check_kinds else None,
            max_payload_bytes=settings.max_payload_bytes,
        )
        if plain:  # kept with the kinds it was made for (a builder holds no call's state)
            self._plain = (compiled, builder)
        return builder

    def kind_intake(self, kind: object) -> KindIntake:
        """``kind``'s :class:`KindIntake`, resolved now (not checked: a builder keeps it
        once an enqueue of the kind passed)."""
        settings = self._settings
        if not isinstance(kind, str):  # refused by validation next
            return KindIntake(0, settings.max_attempts)
        declaration = self._registry.declaration(kind)
        priority = declaration.priority if declaration is not None else None
        policy = self.policy(kind)
        keyed = declaration is not None and declaration.concurrency_key is not None
        return KindIntake(
            0 if priority is None else priority,
            policy.retry.max_attempts,
            policy.idempotency_scope,
            policy.idempotency_conflict,
            declaration if keyed else None,
        )

    def warn_unknown(
        self, kind: str, known: frozenset[str], anyway: str = "writing the job anyway"
    ) -> None:
        """Log once per kind that ``kind`` is not known (``Settings.unknown_kinds='warn'``)
        and that ``anyway`` is done."""
        if kind in self._warned_kinds or len(self._warned_kinds) >= POLICY_CACHE_SIZE:
            return
        self._warned_kinds.add(kind)
        logger.warning(
            "%s",
            rules.unknown_kind_message(kind, known, f"{anyway} (Settings.unknown_kinds='warn')"),
        )

    def known_kinds(self) -> frozenset[str]:
        """The kinds this engine knows: a processor or a declaration of each."""
        return self._registry.known_kinds()

    def check_named_kind(self, kind: str, known: frozenset[str], what: str) -> None:
        """Enqueue's rule for ``kind`` named outside enqueue (``what``: a pause, a limit):
        with ``known`` kinds (none: any kind passes) and ``Settings.unknown_kinds``
        ``error``, raise :class:`~skiplock.UnknownKindError` with enqueue's message if
        ``kind`` is not one of them; ``warn`` logs it (once per kind); ``allow`` accepts
        it. The opt-in for a kind another service declares is the caller's
        (``allow_unknown_kind``)."""
        if not known or kind in known:
            return
        mode = self._settings.unknown_kinds
        if mode == "warn":
            self.warn_unknown(kind, known, f"storing the {what} anyway")
        elif mode == "error":
            advice = (
                f"declare it here, or to {what} a kind another service declares pass "
                "allow_unknown_kind (--allow-unknown-kind on the command line)"
            )
            raise UnknownKindError(rules.unknown_kind_message(kind, known, advice))


class RequestBuilder:
    """Validated requests for one enqueue call, from :meth:`Intake.builder`.

    ``compiled`` holds the kinds that passed their checks, compiled (the intake's cache;
    None: none are known, none are kept); ``known_kinds`` the kinds an unknown one is
    refused for, ``warn_unless`` those it is warned about for
    (``Settings.unknown_kinds``). Every request carries ``trace``, checked once here.
    """

    __slots__ = (
        "_compiled",
        "_intake",
        "_known_kinds",
        "_max_payload_bytes",
        "_trace",
        "_warn_unless",
    )

    def __init__(
        self,
        intake: Intake | None,
        compiled: dict[str, KindIntake] | None,
        *,
        trace: Mapping[str, str] | None,
        known_kinds: frozenset[str] | None,
        warn_unless: frozenset[str] | None,
        max_payload_bytes: int,
    ) -> None:
        rules.check_trace_context(trace)  # one trace context for the whole call
        self._intake = intake
        self._compiled = compiled
        self._trace = trace
        self._known_kinds = known_kinds
        self._warn_unless = warn_unless
        self._max_payload_bytes = max_payload_bytes

    def request(self, item: Enqueue) -> EnqueueRequest:
        """The request for one enqueue (its errors name no item)."""
        kind = item.kind
        compiled = self._compiled
        known = compiled.get(kind) if compiled is not None and type(kind) is str else None
        if known is not None:
            return self._build(known, item, EnqueueRequest)
        return self._first(item, EnqueueRequest)

    def requests(self, items: Sequence[Enqueue]) -> EnqueueBatch:
        """The requests for ``items``, as columns; with several items a ValidationError
        names the item's index."""
        batch = EnqueueBatch()
        append = batch.append
        fields = self._fields
        compiled = self._compiled or {}
        several = len(items) > 1
        for index, item in enumerate(items):
            kind = getattr(item, "kind", None)
            known = compiled.get(kind) if type(kind) is str else None
            # An unknown kind's intake is resolved first, outside the item's errors (as it
            # always was): resolving fails only for the kind's policy, not for the item.
            first = self._resolve(kind) if known is None else None
            if not isinstance(item, Enqueue):
                raise TypeError(f"expected skiplock.Enqueue, got {type(item).__name__}")
            try:
                if known is not None:  # _build written out: one call less per job
                    fields(
                        known, append, True, item.kind, item.payload, item.available_at,
                        item.delay, item.priority, item.tenant, item.max_attempts,
                        item.idempotency_key, item.idempotency_scope,
                        item.idempotency_conflict, item.concurrency_key,
                        item.concurrency_limit,
                    )  # fmt: skip
                else:
                    self._first(item, append, first)
            except ValidationError as exc:
                if not several:
                    raise
                raise type(exc)(f"item {index}: {exc}") from None
        return batch

    def _resolve(self, kind: object) -> KindIntake:
        assert self._intake is not None, "a builder without an intake is given its kinds"
        return self._intake.kind_intake(kind)

    def _first(
        self, item: Enqueue, sink: Callable[..., T], resolved: KindIntake | None = None
    ) -> T:
        """The request of a kind not compiled yet: its name and defaults checked as if
        the item set them, then the kind kept (:meth:`_learn`)."""
        kind = item.kind
        intake = self._resolve(kind) if resolved is None else resolved
        result = self._build(intake, item, sink, compiled=False)
        self._learn(kind, intake)
        return result

    def _build(
        self,
        intake: KindIntake,
        item: Enqueue,
        sink: Callable[..., T],
        *,
        compiled: bool = True,
    ) -> T:
        """:meth:`_fields` of ``item``."""
        return self._fields(
            intake, sink, compiled, item.kind, item.payload, item.available_at, item.delay,
            item.priority, item.tenant, item.max_attempts, item.idempotency_key,
            item.idempotency_scope, item.idempotency_conflict, item.concurrency_key,
            item.concurrency_limit,
        )  # fmt: skip

    def request_of(
        self,
        kind: str,
        payload: Any = None,
        available_at: datetime | None = None,
        delay: timedelta | float | None = None,
        *,
        priority: int | None = None,
        tenant: str | None = None,
        idempotency_key: str | None = None,
        max_attempts: int | None = None,
        idempotency_scope: IdempotencyScope | None = None,
        idempotency_conflict: IdempotencyConflict | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
    ) -> EnqueueRequest:
        """The request for one enqueue given by keyword (``engine.enqueue``'s), as
        :meth:`request` of the same :class:`Enqueue` without building one: a kind seen
        before goes straight to the checks of what the call sets."""
        compiled = self._compiled
        known = compiled.get(kind) if compiled is not None and type(kind) is str else None
        if known is None:  # the kind's first request (or a bad one): the item's path
            item = Enqueue(
                kind, payload, available_at=available_at, delay=delay, priority=priority,
                tenant=tenant, idempotency_key=idempotency_key, max_attempts=max_attempts,
                idempotency_scope=idempotency_scope, idempotency_conflict=idempotency_conflict,
                concurrency_key=concurrency_key, concurrency_limit=concurrency_limit,
            )  # fmt: skip
            return self._first(item, EnqueueRequest)
        return self._fields(
            known, EnqueueRequest, True, kind, payload, available_at, delay, priority, tenant,
            max_attempts, idempotency_key, idempotency_scope, idempotency_conflict,
            concurrency_key, concurrency_limit,
        )  # fmt: skip

    def _fields(
        self,
        intake: KindIntake,
        sink: Callable[..., T],
        compiled: bool,
        kind: str,
        payload: Any,
        available_at: datetime | None,
        delay: timedelta | float | None,
        priority: int | None,
        tenant: str | None,
        max_attempts: int | None,
        idempotency_key: str | None,
        scope: IdempotencyScope | None,
        conflict: IdempotencyConflict | None,
        concurrency_key: str | None,
        concurrency_limit: int | None,
    ) -> T:
        """``sink`` (:class:`EnqueueRequest` or :meth:`EnqueueBatch.append`) called with
        the request's fields, from the item's and its kind's ``intake``, encoded and
        validated (X2); raises ValidationError/UnknownKindError on the first problem.

        A ``compiled`` intake's kind and defaults passed their checks, so only what the
        item sets is checked; else the kind is checked too (the builder's known kinds),
        and the defaults the item takes as if it set them.
        The checks run in the order they always had: the payload (converted, encoded,
        its size), ``available_at``, ``delay``'s type, the kind, then
        :func:`check_job_fields`, the idempotency policy and the concurrency key.
        """
        try:
            value = encode(payload)
        except ValidationError:
            raise
        except Exception as exc:  # a converter choking on a typed payload
            raise ValidationError(f"payload could not be encoded: {exc}") from None
        # Encoded once here (validating it, its size too) and handed to the store, which
        # would otherwise encode it again.
        text = encode_payload(value, max_bytes=self._max_payload_bytes)
        # In UTC: any offset Python allows (a fraction of a second, nearly a day) reaches
        # the store as a plain instant.
        if available_at is not None:
            available_at = check_available_at(available_at)
        if delay is not None:
            delay = as_delay(delay)
        # Only the caller's own choice binds the worker; the default is the enqueuing
        # node's, and the worker that runs the job applies its processor's policy.
        explicit = max_attempts is not None
        if not compiled:  # the kind and the defaults it gives are checked as if given
            rules.check_known_kind(kind, self._known_kinds)
            priority = intake.priority if priority is None else priority
            max_attempts = intake.max_attempts if max_attempts is None else max_attempts
        check_job_fields(priority, tenant, max_attempts, idempotency_key, available_at, delay)
        if priority is None:
            priority = intake.priority
        if max_attempts is None:
            max_attempts = intake.max_attempts
        if scope is None and conflict is None:
            scope, conflict = intake.idempotency_scope, intake.idempotency_conflict  # valid
        else:
            scope = intake.idempotency_scope if scope is None else scope
            conflict = intake.idempotency_conflict if conflict is None else conflict
            rules.check_idempotency_policy(scope, conflict)
        declaration = intake.declaration
        if concurrency_key is None and declaration is not None:
            # The declared key, from the payload as the caller gave it.
            try:
                concurrency_key, declared_limit = declaration.key_of(payload)
            except Exception as exc:  # the application's key function failed
                raise ValidationError(
                    f"concurrency_key of {kind!r} could not be derived from the payload: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if concurrency_limit is None:
                concurrency_limit = declared_limit
        if concurrency_key is not None or concurrency_limit is not None:
            concurrency_key, concurrency_limit = check_concurrency(
                concurrency_key, concurrency_limit
            )
        # By name, a few to a line, grouped by topic.
        return sink(
            kind=kind, payload=value, payload_json=text, trace_context=self._trace,
            priority=priority, tenant=tenant, available_at=available_at, delay=delay,
            max_attempts=max_attempts, explicit_max_attempts=explicit,
            idempotency_key=idempotency_key, idempotency_scope=scope,
            idempotency_conflict=conflict,
            concurrency_key=concurrency_key, concurrency_limit=concurrency_limit,
        )  # fmt: skip

    def _learn(self, kind: str, intake: KindIntake) -> None:
        """After ``kind``'s first request passed: warn if it is unknown (``warn`` mode),
        and keep it compiled if its defaults are valid (they were not checked when the
        request set its own)."""
        warn_unless = self._warn_unless
        if warn_unless is not None and kind not in warn_unless and self._intake is not None:
            self._intake.warn_unknown(kind, warn_unless)
        compiled = self._compiled
        if compiled is None or type(kind) is not str or len(compiled) >= POLICY_CACHE_SIZE:
            return
        try:
            rules.check_priority("priority", intake.priority)
            rules.check_max_attempts(intake.max_attempts)
        except ValidationError:
            return  # each request of the kind checks them, as any request does
        compiled[kind] = intake


def build_request(
    item: Enqueue,
    *,
    default_max_attempts: int,
    default_priority: int = 0,
    trace_context: Mapping[str, str] | None,
    known_kinds: frozenset[str] | None,
    max_payload_bytes: int,
) -> EnqueueRequest:
    """Encode the payload and validate; raises ValidationError/UnknownKindError.

    ``default_max_attempts`` and ``default_priority`` are the kind's defaults, for an
    item that sets neither (the engine resolves them per kind, in one place, and
    builds its requests with an :class:`Intake`, which checks the same).
    """
    if not isinstance(item, Enqueue):
        raise TypeError(f"expected skiplock.Enqueue, got {type(item).__name__}")
    builder = RequestBuilder(
        None,
        None,
        trace=trace_context,
        known_kinds=known_kinds,
        warn_unless=None,
        max_payload_bytes=max_payload_bytes,
    )
    intake = KindIntake(default_priority, default_max_attempts)
    return builder._first(item, EnqueueRequest, intake)
