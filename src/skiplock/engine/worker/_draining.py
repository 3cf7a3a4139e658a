"""Draining a worker and the requests an operator sends it through the store (issue 45;
one module for both flavours: no I/O). Mixed into :class:`~._worker_async.AsyncWorker`
and its sync twin.

- :meth:`Draining.drain`: stop claiming and let every running job finish, however long.
- A request read from the store (``Controls.requests``): ``drain`` drains, ``stop`` is
  the worker's graceful :meth:`stop` (running jobs get ``shutdown_timeout``).
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threading import Lock

    from skiplock.core.store import WorkerRequest

    from ..settings._settings import Settings

logger = logging.getLogger("skiplock.worker")


class Draining:
    """What a worker needs to drain and to follow requests (see the module). The worker
    provides the attributes and :meth:`stop`: ``_drain_timeout``, how long running jobs
    may take once stopping (``shutdown_timeout``; a drain: no end), ``_stop_at``, when a
    stop during a drain cuts it short (monotonic; None: no such stop), and ``_request``,
    the last request acted on (None at first)."""

    _id: str
    _lock: Lock
    _settings: Settings
    _stop_requested: bool
    _force_requested: bool
    _drain_timeout: float
    _stop_at: float | None
    _request: WorkerRequest | None

    def stop(self, *, force: bool = False) -> None:
        raise NotImplementedError

    def drain(self) -> None:
        """Stop claiming and let every running job finish, however long it takes, then
        unregister and return from :meth:`run` (thread-safe). Held (prefetched) jobs go
        back to ``pending`` at once, as in :meth:`stop`. A :meth:`stop` after it gives
        the running jobs ``Settings.shutdown_timeout`` from then; after a :meth:`stop`
        it changes nothing. What ``skiplock workers drain`` asks through the store."""
        with self._lock:
            if not self._stop_requested:
                self._drain_timeout = math.inf
        self.stop()

    def _on_request(self, request: WorkerRequest) -> None:
        """An operator asked this worker, through the store, to drain or stop: act once
        per request (the controls loop reports it at every refresh while it stands)."""
        with self._lock:
            if request == self._request:
                return
            self._request = request
        logger.warning(
            "worker %s: %s asked by %s at %s",
            self._id,
            request.action,
            request.actor or "an operator",
            request.requested_at,
        )
        if request.action == "drain":
            self.drain()
        else:
            self.stop()

    def _cut_short(self) -> bool:
        """Whether the running jobs' wait ends now: a forced stop, or a stop's deadline
        during a drain."""
        stop_at = self._stop_at
        return self._force_requested or (stop_at is not None and time.monotonic() >= stop_at)

    def _stopping_now(self) -> None:
        """A stop begins: during a drain, the running jobs get ``shutdown_timeout`` from
        now (:meth:`_cut_short`)."""
        with self._lock:
            if self._drain_timeout == math.inf and self._stop_at is None and self._stop_requested:
                self._stop_at = time.monotonic() + self._settings.shutdown_timeout
