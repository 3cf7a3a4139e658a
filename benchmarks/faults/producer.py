"""The fault suite's producer loop, one for skiplock's producer
(:class:`benchmarks.faults.harness.Producer`) and the peers'
(:class:`benchmarks.faults.peers.Producer`): it enqueues at the load's rate, the extra
kinds first (once), and records every acknowledged job in the ledger. A failed enqueue
is retried as a new one (its jobs were never acknowledged: not the producer's to miss).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.faults.ledger import Ledger


class Producer(threading.Thread):
    """The loop (:meth:`produce`); a subclass says how it enqueues (:meth:`enqueue`) and
    runs the loop in its thread with its connection open."""

    def __init__(self, name: str, rate: float, ledger: Ledger, extra: list[str]) -> None:
        super().__init__(name=name, daemon=True)
        self._rate, self._ledger = rate, ledger
        #: Kinds to enqueue once, first thing (the poison scenario's job).
        self._extra = extra
        self._halt = threading.Event()
        #: Enqueues that failed (each retried as a new one).
        self.failures = 0

    def stop(self) -> None:
        self._halt.set()

    def enqueue(self, extra: list[str], numbers: range) -> list[tuple[int, str]]:
        """Enqueue one job of each of the ``extra`` kinds, then the load's jobs numbered
        ``numbers``: each job's id and kind, in that order. Raises when the database
        does not answer."""
        raise NotImplementedError

    def produce(self) -> None:
        """Enqueue at the load's rate until stopped."""
        sent, extra, started = 0, self._extra, time.monotonic()
        while not self._halt.is_set():
            owed = max(int((time.monotonic() - started) * self._rate) - sent, 0)
            if extra or owed:
                try:
                    jobs = self.enqueue(extra, range(sent, sent + owed))
                except Exception:  # the database is down or hung: try again
                    self.failures += 1
                    self._halt.wait(0.2)
                    continue
                acked = time.monotonic()
                for job, kind in jobs:
                    self._ledger.acknowledge(job, kind, acked)
                sent += len(jobs) - len(extra)
                extra = []
            self._halt.wait(0.05)
