"""What an engine accepts: each kind's resolved policy, and enqueue items turned into
validated requests with their kind's defaults (X2: everything is checked before the
store is asked). One for both flavours: nothing here waits on the store.
"""

from __future__ import annotations

import logging
import operator
from typing import TYPE_CHECKING, Any, TypeAlias

from skiplock.core import (
    EnqueueBatch,
    EnqueueRequest,
    UnknownKindError,
    ValidationError,
    encode_payload,
)
from skiplock.core.rules import (
    check_available_at,
    check_concurrency,
    check_idempotency_policy,
    check_max_attempts,
    check_priority,
    unknown_kind_message,
    validate_fields,
)

from .._codec import encode
from .._inputs import Enqueue, as_delay

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from datetime import datetime, timedelta

    from skiplock.core import KindPolicy
    from skiplock.core.rules import IdempotencyConflict, IdempotencyScope

    from .._declaration import TaskDef
    from .._registry import Registry
    from ..settings._settings import Settings

    #: One enqueue's arguments: kind, payload, priority, tenant, idempotency_key,
    #: available_at, delay, max_attempts, idempotency_scope, idempotency_conflict,
    #: concurrency_key, concurrency_limit (as given: each may be anything).
    EnqueueArgs: TypeAlias = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any, Any]
    #: A kind's enqueue defaults: ``(priority, max_attempts, idempotency_scope,
    #: idempotency_conflict, declaration)``; the declaration (None: none) gives the
    #: concurrency key of a job that sets none.
    Defaults: TypeAlias = tuple[
        int, int, IdempotencyScope, IdempotencyConflict, TaskDef[Any] | None
    ]
    #: The fields of an :class:`EnqueueRequest`, positionally in its order (what
    #: :meth:`EnqueueBatch.append` takes).
    RequestValues: TypeAlias = tuple[
        str,
        Any,
        int,
        str | None,
        datetime | None,
        timedelta | None,
        int,
        str | None,
        Mapping[str, str] | None,
        bool,
        str,
        IdempotencyScope,
        IdempotencyConflict,
        str | None,
        int | None,
    ]

logger = logging.getLogger("skiplock.engine")

#: At most this many resolved policies of kinds without a processor are kept (and as
#: many kinds' checks, and undeclared kinds warned about): kinds come from callers.
POLICY_CACHE_SIZE = 1024

#: An :class:`Enqueue`'s fields as a tuple, in :data:`EnqueueArgs` order.
enqueue_args: Callable[[Enqueue], EnqueueArgs] = operator.attrgetter(
    "kind",
    "payload",
    "priority",
    "tenant",
    "idempotency_key",
    "available_at",
    "delay",
    "max_attempts",
    "idempotency_scope",
    "idempotency_conflict",
    "concurrency_key",
    "concurrency_limit",
)


class Intake:
    """An engine's kinds as enqueue sees them, over its registry and settings.

    Resolved policies of kinds without a processor here are cached: resolving builds and
    validates new policy objects, far too slow to repeat for every enqueued job. Settings
    are frozen, so only new settings (:meth:`configure`) or a registration
    (:meth:`forget`) change them.

    Cached as well: the kinds that passed their checks (format, ``Settings.unknown_kinds``)
    with their enqueue defaults, kept while the registry (:attr:`Registry.version`) and
    the settings are unchanged, so an enqueue of a kind seen before checks only its own
    arguments (:class:`RequestBuilder`).
    """

    def __init__(self, registry: Registry, settings: Settings) -> None:
        self._registry = registry
        self._settings = settings
        self._policies: dict[str, KindPolicy] = {}
        # (registry version, settings, kinds checked -> defaults): one tuple, replaced
        # whole, so a thread never sees a version with another version's kinds.
        self._checked: tuple[int, Settings | None, dict[str, Defaults]] = (-1, None, {})
        self._warned_kinds: set[str] = set()  # undeclared kinds warned about (unknown_kinds)

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
        checked = self._checked
        if checked[0] != version or checked[1] is not settings:
            checked = self._checked = (version, settings, {})
        known = registry.known_kinds()
        mode = settings.unknown_kinds
        return RequestBuilder(
            self,
            # Kinds checked under the other rule are not known to pass this one.
            checked[2] if check_kinds else None,
            trace=trace,
            known_kinds=known if known and mode == "error" and check_kinds else None,
            warn_unless=known if known and mode == "warn" and check_kinds else None,
            max_payload_bytes=settings.max_payload_bytes,
        )

    def defaults(self, kind: object) -> Defaults:
        """:data:`Defaults` for a job of ``kind`` whose enqueue sets none of them: the
        declared priority (else 0) and the kind's resolved ``max_attempts``,
        ``idempotency_scope`` and ``idempotency_conflict``."""
        settings = self._settings
        if not isinstance(kind, str):  # refused by validation next
            return 0, settings.max_attempts, "global", "ignore", None
        declaration = self._registry.declaration(kind)
        priority = declaration.priority if declaration is not None else None
        policy = self.policy(kind)
        keyed = declaration is not None and declaration.concurrency_key is not None
        return (
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
            "%s", unknown_kind_message(kind, known, f"{anyway} (Settings.unknown_kinds='warn')")
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
            raise UnknownKindError(unknown_kind_message(kind, known, advice))


class RequestBuilder:
    """Validated requests for one enqueue call, from :meth:`Intake.builder`.

    ``seen`` holds the kinds that passed their checks, with their valid defaults (the
    intake's cache; None: none are known, none are kept); ``known_kinds`` the kinds
    an unknown one is refused for, ``warn_unless`` those it is warned about for
    (``Settings.unknown_kinds``). Every request carries ``trace``.
    """

    __slots__ = (
        "_intake",
        "_known_kinds",
        "_max_payload_bytes",
        "_seen",
        "_trace",
        "_trace_checked",
        "_warn_unless",
    )

    def __init__(
        self,
        intake: Intake | None,
        seen: dict[str, Defaults] | None,
        *,
        trace: Mapping[str, str] | None,
        known_kinds: frozenset[str] | None,
        warn_unless: frozenset[str] | None,
        max_payload_bytes: int,
    ) -> None:
        self._intake = intake
        self._seen = seen
        self._trace = trace
        self._trace_checked = False
        self._known_kinds = known_kinds
        self._warn_unless = warn_unless
        self._max_payload_bytes = max_payload_bytes

    def request(
        self,
        kind: Any,
        payload: Any,
        *,
        priority: Any,
        tenant: Any,
        idempotency_key: Any,
        available_at: Any,
        delay: Any,
        max_attempts: Any,
        idempotency_scope: Any = None,
        idempotency_conflict: Any = None,
        concurrency_key: Any = None,
        concurrency_limit: Any = None,
    ) -> EnqueueRequest:
        """The request for one enqueue (its errors name no item)."""
        args = (
            kind,
            payload,
            priority,
            tenant,
            idempotency_key,
            available_at,
            delay,
            max_attempts,
            idempotency_scope,
            idempotency_conflict,
            concurrency_key,
            concurrency_limit,
        )
        return EnqueueRequest(*self.values(*self._lookup(kind), args))

    def requests(self, items: Sequence[Enqueue]) -> EnqueueBatch:
        """The requests for ``items``, as columns; with several items a ValidationError
        names the item's index."""
        batch = EnqueueBatch()
        append = batch.append
        lookup = self._lookup
        values = self.values
        args = enqueue_args
        several = len(items) > 1
        for index, item in enumerate(items):
            # The kind's defaults come first, outside the item's errors (as they always
            # did): resolving them fails only for the kind's policy, not for the item.
            defaults, known = lookup(getattr(item, "kind", None))
            if not isinstance(item, Enqueue):
                raise TypeError(f"expected skiplock.Enqueue, got {type(item).__name__}")
            try:
                append(*values(defaults, known, args(item)))
            except ValidationError as exc:
                if not several:
                    raise
                raise type(exc)(f"item {index}: {exc}") from None
        return batch

    def _lookup(self, kind: object) -> tuple[Defaults, bool]:
        """``kind``'s defaults, and whether it is a kind seen before (checked, with valid
        defaults)."""
        seen = self._seen
        if seen is not None and type(kind) is str:
            defaults = seen.get(kind)
            if defaults is not None:
                return defaults, True
        assert self._intake is not None, "a builder without an intake is given defaults"
        return self._intake.defaults(kind), False

    def values(self, defaults: Defaults, known: bool, args: EnqueueArgs) -> RequestValues:
        """One enqueue's request fields from its arguments (:data:`EnqueueArgs`), encoded
        and validated (X2); raises ValidationError/UnknownKindError on the first problem.

        ``defaults`` are the kind's, for what the enqueue leaves out; ``known`` says the
        kind passed its checks before and its defaults are valid, so those checks are
        skipped (as is the trace context's after the call's first request). Otherwise
        every check runs, in the order they always had: the payload (converted, encoded,
        its size), ``available_at``, ``delay``'s type, then :func:`validate_fields`.
        """
        *fields, scope, conflict, concurrency_key, concurrency_limit = args
        kind, payload, priority, tenant, idempotency_key, available_at, delay, max_attempts = fields
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
        chosen = priority is not None
        if not chosen:
            priority = defaults[0]
        if not explicit:
            max_attempts = defaults[1]
        trace = self._trace
        validate_fields(
            kind,
            priority,
            tenant,
            max_attempts,
            idempotency_key,
            available_at,
            delay,
            trace,
            known_kinds=self._known_kinds,
            kind_checked=known,
            priority_checked=known and not chosen,
            max_attempts_checked=known and not explicit,
            trace_checked=self._trace_checked,
        )
        self._trace_checked = True  # one trace context for the whole call
        if scope is None and conflict is None:
            scope, conflict = defaults[2], defaults[3]  # the kind's policy: valid
        else:
            scope = defaults[2] if scope is None else scope
            conflict = defaults[3] if conflict is None else conflict
            check_idempotency_policy(scope, conflict)
        if concurrency_key is None and defaults[4] is not None:
            # The declared key, from the payload as the caller gave it.
            try:
                concurrency_key, declared_limit = defaults[4].key_of(payload)
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
        if not known:
            self._learn(kind, defaults)
        return (
            kind,
            value,
            priority,
            tenant,
            available_at,
            delay,
            max_attempts,
            idempotency_key,
            trace,
            explicit,
            text,
            scope,
            conflict,
            concurrency_key,
            concurrency_limit,
        )

    def _learn(self, kind: str, defaults: Defaults) -> None:
        """After ``kind``'s first request passed: warn if it is unknown (``warn`` mode),
        and keep it with its defaults if they are valid (they were not checked when
        the request set its own)."""
        warn_unless = self._warn_unless
        if warn_unless is not None and kind not in warn_unless and self._intake is not None:
            self._intake.warn_unknown(kind, warn_unless)
        seen = self._seen
        if seen is None or type(kind) is not str or len(seen) >= POLICY_CACHE_SIZE:
            return
        try:
            check_priority("priority", defaults[0])
            check_max_attempts(defaults[1])
        except ValidationError:
            return  # each request of the kind checks them, as any request does
        seen[kind] = defaults


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
    defaults: Defaults = (default_priority, default_max_attempts, "global", "ignore", None)
    values = builder.values(defaults, False, enqueue_args(item))
    return EnqueueRequest(*values)
