"""The completer: writes outcomes in batches (async source; ``_completer.py`` is the sync
twin).

Outcomes of jobs that did not complete inside their own transaction are queued here and
written many per ``store.complete`` call (see docs/worker-internals.md, "The worker"). No
timer: each round writes whatever accumulated while the previous write ran, so batches
grow with the load and an idle worker's outcome is written at once. A write the store
rejects is retried with backoff, together with the outcomes that arrived meanwhile.
"""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta
from threading import Lock
from typing import TYPE_CHECKING

import attrs

from skiplock._compat_async import Task, ThreadSafeEvent, join, spawn
from skiplock.core import Completion, Job, Outcome, RetryPolicy
from skiplock.core.rules import next_delay

from ._runner_async import LABELS

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.ports import AsyncAudit, AsyncJobsRole, Metrics

logger = logging.getLogger("skiplock.worker")

#: Waits after a store error before the next try, for every worker loop that talks to the
#: store: writing a batch of outcomes, claiming, renewing the lease (0.1 s doubling up to
#: 1 s, plus up to 50 % jitter): a store that is back after a lost connection or an
#: outage is used again within about a second, and one that is down is tried about once
#: a second, not hammered. ``max_attempts`` is unused.
STORE_RETRY = RetryPolicy(
    max_attempts=1,
    base=timedelta(seconds=0.1),
    factor=2.0,
    cap=timedelta(seconds=1),
    jitter=0.5,
)


@attrs.frozen
class Done:
    """An outcome waiting to be written."""

    job: Job
    outcome: Outcome
    duration: float


class Completer:
    """Batches outcomes into ``store.complete`` calls, on its own task (or thread).

    ``on_written`` runs after every written batch (written outcomes may make jobs due);
    ``on_store_error`` after every failed write (the worker's lease is then in doubt);
    ``on_settled(job)`` once per job when its outcome was written or given up on (until
    then the job is still ``running`` in the store and counts against node limits).
    With ``audit`` each write audits its successes and moves to dead (J10).
    """

    def __init__(
        self,
        *,
        store: AsyncJobsRole,
        worker_id: str,
        metrics: Metrics,
        batch_size: int,
        give_up_after: float,
        on_written: Callable[[], None],
        on_store_error: Callable[[], None],
        on_settled: Callable[[Job], None],
        audit: AsyncAudit | None = None,
    ) -> None:
        self._store = store
        self._audit = audit
        self._worker_id = worker_id
        self._metrics = metrics
        self._batch_size = batch_size
        self._give_up_after = give_up_after
        self._on_written = on_written
        self._on_store_error = on_store_error
        self._on_settled = on_settled
        self._lock = Lock()
        self._outbox: list[Done] = []
        self._writing = 0
        # The jobs of the write under way and of late writes: still running in the store.
        self._in_write: list[int] = []
        self._late: set[int] = set()
        self._closed = False
        self._forced = False
        self._written_batches = 0
        self._ready = ThreadSafeEvent()
        # Set on close and on a forced stop: cuts the retry wait short.
        self._hurry = ThreadSafeEvent()
        self._task: Task[None] | None = None
        #: The jobs whose outcome it gave up writing (at shutdown only): still running.
        self.given_up: list[int] = []

    # ---- state read by the worker ---------------------------------------------------

    @property
    def written_batches(self) -> int:
        """How many batches were written so far (an idle check compares it)."""
        with self._lock:
            return self._written_batches

    @property
    def unwritten(self) -> int:
        """Outcomes not written yet: waiting, or in the write under way (a failed write's
        batch is back among the waiting ones)."""
        with self._lock:
            return len(self._outbox) + self._writing

    def unsettled_ids(self) -> set[int]:
        """The jobs whose outcome is not written yet (still running in the store): the
        worker's heartbeat counts them as held."""
        with self._lock:
            return {*(done.job.id for done in self._outbox), *self._in_write, *self._late}

    @property
    def busy(self) -> bool:
        """True while outcomes wait or are being written."""
        with self._lock:
            return bool(self._outbox or self._writing)

    # ---- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the writing task (or thread)."""
        self._task = spawn(self._loop)

    def submit(self, done: Done) -> bool:
        """Queue an outcome; False once the completer stopped accepting (closed)."""
        with self._lock:
            if self._closed:
                return False
            self._outbox.append(done)
        self._ready.set()
        return True

    async def write_late(self, done: Done) -> None:
        """Write one outcome of a job that outlived the completer, once."""
        with self._lock:
            self._late.add(done.job.id)
        try:
            error = await self._write([done])
        finally:
            with self._lock:
                self._late.discard(done.job.id)
        if error is not None:
            self._give_up([done], error)

    def hurry(self) -> None:
        """A forced stop: one more attempt for what waits, then give up."""
        self._forced = True
        self._hurry.set()

    async def close(self) -> None:
        """Stop accepting outcomes, write those waiting and wait for the writing task."""
        task, self._task = self._task, None
        if task is None:
            return
        with self._lock:
            self._closed = True
        self._ready.set()
        self._hurry.set()
        try:
            await join(task)
        except Exception:
            logger.exception("worker %s: the completer failed", self._worker_id)

    # ---- writing --------------------------------------------------------------------

    async def _loop(self) -> None:
        failures = 0
        give_up_at: float | None = None
        while True:
            if not failures:
                await self._ready.wait()
                self._ready.clear()
            # Cleared before reading the state: a close or forced stop from now on ends
            # the retry wait below at once.
            self._hurry.clear()
            with self._lock:
                closed = self._closed
            error = await self._flush()
            if error is None:
                failures = 0
                if closed:  # and the outbox was empty since: nothing more can come
                    return
                continue
            self._on_store_error()
            failures += 1
            delay = next_delay(STORE_RETRY, failures, random.random()).total_seconds()
            if closed:
                now = time.monotonic()
                if give_up_at is None:
                    give_up_at = now + self._give_up_after
                if self._forced or now >= give_up_at:
                    with self._lock:
                        dropped = list(self._outbox)
                        self._outbox.clear()
                    self._give_up(dropped, error)
                    return
                delay = min(delay, give_up_at - now)
            logger.warning(
                "worker %s: completing jobs failed (%s: %s); attempt %d, retrying in %.2f s",
                self._worker_id,
                type(error).__name__,
                error,
                failures,
                delay,
                exc_info=error if failures == 1 else None,
            )
            await self._hurry.wait(delay)

    async def _flush(self) -> Exception | None:
        """Write the outbox in batches until it is empty; on a failed write put the batch
        back at its head and return the error."""
        while True:
            with self._lock:
                batch = self._outbox[: self._batch_size]
                del self._outbox[: len(batch)]
                self._writing = len(batch)
                self._in_write = [done.job.id for done in batch]
            if not batch:
                return None
            error = await self._write(batch)
            # One critical section: an idle check never sees the batch in neither place.
            with self._lock:
                self._writing = 0
                self._in_write = []
                if error is None:
                    self._written_batches += 1
                else:
                    self._outbox[:0] = batch
            if error is not None:
                return error
            self._on_written()

    async def _write(self, batch: list[Done]) -> Exception | None:
        """One ``store.complete`` call for ``batch``; returns the store's error (nothing is
        reported then: the caller retries or gives up)."""
        completions = [Completion(done.job.lease, done.outcome) for done in batch]
        try:
            applied = await self._store.complete(completions, audit=self._audit)
        except Exception as exc:
            return exc
        if len(applied) != len(batch):
            # A broken store: which ones it applied is unknown, so do not retry.
            logger.error(
                "worker %s: store.complete returned %d results for %d jobs (ids %s)",
                self._worker_id,
                len(applied),
                len(batch),
                ", ".join(str(done.job.id) for done in batch),
            )
            labels = ["error"] * len(batch)
        else:
            labels = [
                LABELS[type(done.outcome)] if ok else self._lost(done.job)
                for done, ok in zip(batch, applied, strict=True)
            ]
        for done, label in zip(batch, labels, strict=True):
            self.report(done.job, label, done.duration)
            self._on_settled(done.job)
        return None

    def _lost(self, job: Job) -> str:
        logger.warning(
            "worker %s: job %d (%s) was no longer ours (recovered, cancelled or deleted); "
            "its result is discarded",
            self._worker_id,
            job.id,
            job.kind,
        )
        return "lost"

    def _give_up(self, dropped: list[Done], error: Exception) -> None:
        if not dropped:
            return
        logger.error(
            "worker %s: giving up completing %d job(s) (ids %s): %s: %s; they stay running "
            "until this worker's unregistration releases them, or else until the next "
            "stale-claim recovery",
            self._worker_id,
            len(dropped),
            ", ".join(str(done.job.id) for done in dropped),
            type(error).__name__,
            error,
        )
        self.given_up.extend(done.job.id for done in dropped)
        for done in dropped:
            self.report(done.job, "error", done.duration)
            self._on_settled(done.job)

    def report(self, job: Job, label: str, duration: float) -> None:
        """Tell the metrics port how a job ended (a failing sink never stops a worker)."""
        try:
            self._metrics.job_finished(job.kind, job.tenant, label, duration)
        except Exception:
            logger.exception("worker %s: metrics failed", self._worker_id)
