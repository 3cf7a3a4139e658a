"""The next-due timer of a worker's claim loop and of the periodic scheduler's loop (one
module for both flavours: plain state under a lock, no awaits).

An idle worker sleeps until the earlier of its next poll and the time the next job it may
claim falls due. It learns that time from a bounded store read after a claim that left
room (:meth:`AsyncJobStore.next_due <skiplock.ports.AsyncJobStore.next_due>`), and from
the retries and delayed releases it writes itself. The read is repeated only when what
it knew may have changed: a notification (the jobs triggers notify also for jobs due
later), the known time passing, or no notifier at all; so an idle worker with nothing
new costs the store what it did before, one claim per poll. See docs/worker-internals.md,
"The worker".
"""

from __future__ import annotations

from datetime import datetime
from threading import Lock
from typing import TYPE_CHECKING

import attrs

from skiplock.core import Release, Retry

if TYPE_CHECKING:
    from skiplock.core import NextDue, Outcome
    from skiplock.ports import Clock

#: Shortest wait before a job (or tick) that is (nearly) due.
MIN_WAIT = 0.001

#: Added to a due time learned from the store: the claim at the wake-up should find the
#: job due on the store's clock, which is a round trip ahead of the local reading.
DUE_SLACK = 0.001


def wait_until(poll: float, seconds: float | None) -> float:
    """The wait of a loop that polls every ``poll`` seconds and has something due in
    ``seconds`` (None: nothing known): the earlier of the two, at least :data:`MIN_WAIT`."""
    if seconds is None:
        return poll
    return min(poll, max(seconds, MIN_WAIT))


def later_by(outcome: Outcome) -> float | None:
    """Seconds until a retry or release ``outcome`` makes its job due again, counted from
    its write on the store's clock; None for any other outcome."""
    if isinstance(outcome, Retry | Release):
        return outcome.delay.total_seconds()
    return None


@attrs.frozen
class Wakeup:
    """When a loop's current wait ends, on its clock's ``monotonic()`` scale.

    ``at``: the end of the armed wait (the next poll, or earlier the next due time);
    ``due``: when the earliest job (or tick) known falls due, on the same scale, None if
    none is known; ``due_at``: that time on the store's clock, when the store said it
    (None for a retry this worker wrote, or when nothing is known).
    """

    at: float
    due: float | None
    due_at: datetime | None


class DueTimer:
    """What one loop knows of the next due time, and the wait it armed."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = Lock()
        # From the store's answer: when the earliest job falls due (monotonic), and on the
        # store's clock.
        self._due: float | None = None
        self._due_at: datetime | None = None
        # The earliest retry or delayed release this worker wrote since (monotonic).
        self._expected: float | None = None
        # Whether the store must be asked again (also: a notification since the answer,
        # counted in _notes, seen up to _seen); without a notifier, always.
        self._stale = True
        self._notes = 0
        self._seen = 0
        self._listens = False
        self._armed: Wakeup | None = None

    def listening(self) -> None:
        """A notifier wakes the loop for every job that became pending: what the store
        said stays true until :meth:`notified` (else the store is asked at every turn)."""
        with self._lock:
            self._listens = True

    def notified(self) -> None:
        """A job became pending somewhere (due now or later): ask the store again."""
        with self._lock:
            self._notes += 1

    def expect(self, delay: float) -> None:
        """This worker wrote a retry or release due ``delay`` seconds from now (on the
        store's clock; it is written a moment later, so it is due no earlier)."""
        at = self._clock.monotonic() + max(delay, 0.0)
        with self._lock:
            if self._expected is None or at < self._expected:
                self._expected = at

    def query(self) -> int | None:
        """If the store should be asked (nothing asked yet, a notification since, no
        notifier, or the known due time passed): a token for :meth:`learned`; else None."""
        now = self._clock.monotonic()
        with self._lock:
            if self._expected is not None and self._expected <= now:
                self._expected = None  # the claim at its time found it, or the store will
                self._stale = True
            if self._due is not None and self._due <= now:
                self._stale = True
            if self._stale or self._notes != self._seen or not self._listens:
                return self._notes
            return None

    def learned(self, due: NextDue | None, token: int) -> None:
        """The store's answer (:meth:`AsyncJobStore.next_due`) to the query of ``token``
        (a notification meanwhile leaves the answer in doubt: the next turn asks again)."""
        now = self._clock.monotonic()
        with self._lock:
            self._stale = False
            self._seen = token
            if due is None:
                self._due, self._due_at = None, None
            else:
                self._due, self._due_at = now + due.seconds + DUE_SLACK, due.at

    def unknown(self) -> None:
        """The store could not be asked: poll, and ask again at the next turn."""
        with self._lock:
            self._stale = True
            self._due, self._due_at = None, None

    def arm(self, poll: float, sooner: float | None = None) -> float:
        """The wait until the next poll, the earliest known due time or ``sooner``
        seconds (a throttled kind's next token), whichever comes first; remembered as
        :meth:`armed`."""
        now = self._clock.monotonic()
        with self._lock:
            due = self._due
            if self._expected is not None and (due is None or self._expected < due):
                due = self._expected
            wait = wait_until(poll, None if due is None else due - now)
            if sooner is not None:
                wait = min(wait, sooner)
            self._armed = Wakeup(at=now + wait, due=due, due_at=self._due_at)
        return wait

    def armed(self) -> Wakeup | None:
        """The wait armed last (None before the first)."""
        with self._lock:
            return self._armed
