"""What an engine accepts: each kind's resolved policy, and enqueue items turned into
validated requests with their kind's defaults (X2: everything is checked before the
store is asked). One for both flavours: nothing here waits on the store.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from skiplock.core import ValidationError, unknown_kind_message

from ._enqueue import build_request

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from skiplock.core import EnqueueRequest, KindPolicy

    from ._enqueue import Enqueue
    from ._registry import Registry
    from ._settings import Settings

logger = logging.getLogger("skiplock.engine")

#: At most this many resolved policies of kinds without a processor are kept (and as
#: many undeclared kinds warned about).
POLICY_CACHE_SIZE = 1024


class Intake:
    """An engine's kinds as enqueue sees them, over its registry and settings.

    Resolved policies of kinds without a processor here are cached: resolving builds and
    validates new policy objects, far too slow to repeat for every enqueued job. Settings
    are frozen, so only new settings (:meth:`configure`) or a registration
    (:meth:`forget`) change them.
    """

    def __init__(self, registry: Registry, settings: Settings) -> None:
        self._registry = registry
        self._settings = settings
        self._policies: dict[str, KindPolicy] = {}
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
    ) -> list[EnqueueRequest]:
        """Validated requests for ``items`` (X2), each carrying ``trace``; with
        ``check_kinds=False`` the kind may be one this engine does not know yet."""
        known = self._registry.known_kinds()
        mode = self._settings.unknown_kinds
        known_kinds = known if known and mode == "error" and check_kinds else None
        max_payload_bytes = self._settings.max_payload_bytes
        defaults: dict[str, tuple[int, int]] = {}
        requests = []
        for index, item in enumerate(items):
            kind = getattr(item, "kind", None)
            default = defaults.get(kind) if isinstance(kind, str) else None
            if default is None:
                default = self._enqueue_defaults(kind)
                if isinstance(kind, str):
                    defaults[kind] = default
            try:
                request = build_request(
                    item,
                    default_priority=default[0],
                    default_max_attempts=default[1],
                    trace_context=trace,
                    known_kinds=known_kinds,
                    max_payload_bytes=max_payload_bytes,
                )
            except ValidationError as exc:
                if len(items) == 1:
                    raise
                raise type(exc)(f"item {index}: {exc}") from None
            if known and check_kinds and mode == "warn" and request.kind not in known:
                self._warn_unknown(request.kind, known)
            requests.append(request)
        return requests

    def _enqueue_defaults(self, kind: object) -> tuple[int, int]:
        """``(priority, max_attempts)`` for a job of ``kind`` whose enqueue sets neither:
        the declared priority (else 0) and the kind's resolved ``max_attempts``."""
        if not isinstance(kind, str):
            return 0, self._settings.max_attempts  # refused by validation next
        declaration = self._registry.declaration(kind)
        priority = declaration.priority if declaration is not None else None
        return (0 if priority is None else priority), self.policy(kind).retry.max_attempts

    def _warn_unknown(self, kind: str, known: frozenset[str]) -> None:
        if kind in self._warned_kinds or len(self._warned_kinds) >= POLICY_CACHE_SIZE:
            return
        self._warned_kinds.add(kind)
        logger.warning(
            "%s; writing the job anyway (Settings.unknown_kinds='warn')",
            unknown_kind_message(kind, known),
        )
