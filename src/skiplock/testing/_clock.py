"""A controllable clock for tests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

#: Where a FakeClock starts unless told otherwise (any fixed, aware instant would do).
DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)


class FakeClock:
    """A :class:`~skiplock.ports.Clock` that moves only when told to. Thread-safe.

    ``now()`` is timezone-aware UTC; ``monotonic()`` starts at ``0.0``. :meth:`advance`
    moves both forward; :meth:`set` jumps the wall clock (also backwards, like a clock
    adjustment) and leaves ``monotonic()`` alone.
    """

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._lock = threading.Lock()
        self._now = _aware_utc(start)
        self._monotonic = 0.0

    def now(self) -> datetime:
        """The current fake time."""
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        """Seconds moved forward by :meth:`advance` so far."""
        with self._lock:
            return self._monotonic

    def advance(self, by: float | timedelta) -> datetime:
        """Move forward by ``by`` seconds (or a timedelta); returns the new time."""
        delta = by if isinstance(by, timedelta) else timedelta(seconds=by)
        if delta < timedelta(0):
            raise ValueError(f"a clock only advances forward; got {by!r} (use set())")
        with self._lock:
            self._now += delta
            self._monotonic += delta.total_seconds()
            return self._now

    def set(self, when: datetime) -> None:
        """Jump the wall clock to ``when`` (timezone-aware)."""
        aware = _aware_utc(when)
        with self._lock:
            self._now = aware

    def __repr__(self) -> str:
        return f"FakeClock({self.now().isoformat()})"


def _aware_utc(when: datetime) -> datetime:
    if when.utcoffset() is None:
        raise ValueError(f"FakeClock needs a timezone-aware datetime, got {when!r}")
    return when.astimezone(UTC)
