"""The run-time controls as the workers of one engine see them (issue 30): the last
snapshot of the store's pauses and limits, shared by the engine's workers in this process,
and each worker's view of the limits in force. No I/O: the worker's loop reads the store
(``WorkerLoops.controls``) and hands the snapshot in.
"""

from __future__ import annotations

from threading import Lock
from typing import TYPE_CHECKING

from skiplock.core.rules import EffectiveLimits
from skiplock.core.store import Controls

if TYPE_CHECKING:
    from collections.abc import Mapping

    from skiplock.core import RateLimit
    from skiplock.core.store import RateTable


class ControlsCache:
    """The store's pauses and limits as last read, with when (monotonic seconds) and a
    version that grows whenever what they pause or limit changed. Thread-safe."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._controls = Controls()
        self._read_at: float | None = None
        self._version = 0

    @property
    def version(self) -> int:
        """Grows with every change seen (0: nothing read yet, or nothing set)."""
        with self._lock:
            return self._version

    def current(self) -> tuple[Controls, int]:
        """The snapshot and its version."""
        with self._lock:
            return self._controls, self._version

    def due(self, now: float, every: float) -> bool:
        """Whether the snapshot is older than ``every`` seconds at ``now`` (or never
        read, or invalidated)."""
        with self._lock:
            return self._read_at is None or now - self._read_at >= every

    def update(self, controls: Controls, now: float) -> bool:
        """Keep what was read at ``now``; True if it pauses or limits something else."""
        with self._lock:
            self._read_at = now
            if controls.same(self._controls):
                self._controls = controls  # who and when may have changed
                return False
            self._controls = controls
            self._version += 1
            return True

    def invalidate(self) -> None:
        """This engine changed a control: the next refresh reads at once."""
        with self._lock:
            self._read_at = None


class LimitsView:
    """One worker's limits in force: the cached controls over its kinds' ``rate_limit``
    policies and the settings' provider caps (:class:`~skiplock.core.EffectiveLimits`,
    built again only when the snapshot's version changed), and the same as the rate
    table its claims carry (:meth:`rates`). The one lookup of every rate a worker
    applies, cluster-wide or per process."""

    def __init__(
        self,
        cache: ControlsCache,
        policy_rates: Mapping[str, RateLimit],
        settings_caps: Mapping[str, RateLimit],
        providers: Mapping[str, str | None] | None = None,
    ) -> None:
        self._cache = cache
        self._policy_rates = dict(policy_rates)
        self._settings_caps = dict(settings_caps)
        self._providers = dict(providers or {})
        self._lock = Lock()
        self._built: tuple[int, EffectiveLimits, RateTable] | None = None

    def _current(self) -> tuple[Controls, EffectiveLimits, RateTable]:
        controls, version = self._cache.current()
        with self._lock:
            if self._built is None or self._built[0] != version:
                limits = EffectiveLimits(controls, self._policy_rates, self._settings_caps)
                self._built = (version, limits, limits.table(self._providers))
            return controls, self._built[1], self._built[2]

    def snapshot(self) -> tuple[Controls, int]:
        """The controls snapshot and its version (see :class:`ControlsCache`)."""
        return self._cache.current()

    def current(self) -> tuple[Controls, EffectiveLimits]:
        """The controls snapshot and the limits in force with it."""
        controls, limits, _ = self._current()
        return controls, limits

    def limits(self) -> EffectiveLimits:
        """The limits in force now."""
        return self._current()[1]

    def rates(self) -> RateTable:
        """The limits in force now as a rate table (:meth:`EffectiveLimits.table
        <skiplock.core.EffectiveLimits.table>` with the worker's kinds' providers): what a
        claim carries to the store's buckets (``ClaimRequest.rates``) or the process's
        buckets apply."""
        return self._current()[2]
