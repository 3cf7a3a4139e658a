"""The worker's slots: each started job runs in its own task (async source; ``_slots.py``
is the sync twin, with a thread per job) from its processor call until its outcome is
queued for the completer."""

from __future__ import annotations

import logging
import time
from threading import Lock
from typing import TYPE_CHECKING

from skiplock._compat_async import Interruptible, Task, ThreadSafeEvent, spawn
from skiplock.core import Release

from .._context import JobContext, running_job
from .._errors import JobCancelledError
from .._observe import AttemptSpan, traces
from ._completer_async import Done
from ._runner_async import LOST, RunResult
from ._timer import later_by

#: The result of a run that raised before it produced one (nothing to write).
NOT_RUN = RunResult(None, "error")

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from skiplock.core import Job
    from skiplock.ports import AsyncJobsRole, Clock, Tracer

    from .._limits import NodeSlots
    from ._completer_async import Completer
    from ._runner_async import JobRunner

logger = logging.getLogger("skiplock.worker")

#: How long jobs interrupted at shutdown get to release themselves before we give up.
RELEASE_GRACE = 5.0
#: The same after a forced stop.
FORCE_GRACE = 1.0


class _Slot:
    """A started job on this worker."""

    __slots__ = (
        "abandoned",
        "entered",
        "guard",
        "job",
        "lost",
        "paid",
        "returned",
        "settling",
        "task",
    )

    def __init__(self, job: Job, *, paid: bool) -> None:
        self.job = job
        # Whether the store counted this start's attempt yet (a held job starts without
        # a round trip; its outcome, or the next heartbeat's store.start, pays for it).
        self.paid = paid
        self.guard = Interruptible()
        self.task: Task[None] | None = None
        # Set (under the dispatcher's lock) when the job is no longer this worker's: its
        # lease is gone, so nothing is written for it.
        self.lost = False
        # Set once the processor is called (a suspect waits for every running job's).
        self.entered = False
        # Set once the processor returned: nothing is left to interrupt (see drop()).
        self.returned = False
        # Set (under the slots' lock) once its run settles its outcome; until then a
        # shutdown may abandon it instead (``abandoned``: released for it, see drain()).
        self.settling = False
        self.abandoned = False


class Slots:
    """The started jobs of one worker.

    ``on_entered()`` runs when a job's processor is about to be called, ``on_finished(job)``
    when a slot is free again (its outcome queued, written in its transaction, or
    discarded), ``on_later(seconds)`` when a job's outcome is a retry or release due that
    long after it is written (the worker's next-due timer).
    """

    def __init__(
        self,
        *,
        worker_id: str,
        store: AsyncJobsRole,
        on_store_error: Callable[[], None],
        runner: JobRunner,
        completer: Completer,
        node_slots: NodeSlots,
        clock: Clock,
        tracer: Tracer,
        on_entered: Callable[[], None],
        on_finished: Callable[[Job], None],
        on_later: Callable[[float], None] = lambda delay: None,
    ) -> None:
        self._worker_id = worker_id
        self._store = store
        self._on_store_error = on_store_error
        self._runner = runner
        self._completer = completer
        self._node_slots = node_slots
        self._clock = clock
        self._tracer = tracer
        self._traced = traces(tracer)
        self._on_entered = on_entered
        self._on_finished = on_finished
        self._on_later = on_later
        self._lock = Lock()
        self._running: dict[int, _Slot] = {}
        self._freed = ThreadSafeEvent()
        #: The jobs a shutdown interrupted whose outcome is their release (written by
        #: the completer), in the order they settled.
        self.released: list[int] = []

    def __len__(self) -> int:
        # No lock: len() of a dict is atomic, and the count is a snapshot either way.
        return len(self._running)

    def ids(self) -> list[int]:
        """The ids of the running jobs."""
        with self._lock:
            return list(self._running)

    def all_entered(self) -> bool:
        """True when every running job's processor has been called."""
        with self._lock:
            return all(slot.entered for slot in self._running.values())

    def start(self, job: Job, *, paid: bool = True) -> None:
        """Run ``job`` in a new slot; ``paid``: the store counted its attempt already."""
        slot = _Slot(job, paid=paid)
        with self._lock:
            self._running[job.id] = slot
        try:
            slot.task = spawn(self._run, slot)
        except BaseException:  # no task (thread) to be had: the slot stays free
            with self._lock:
                self._running.pop(job.id, None)
            raise

    async def pay(self) -> None:
        """Have the store count the attempts of running jobs that started without a round
        trip (after a heartbeat): a long job's attempt then counts while it runs, and a
        job found no longer this worker's is dropped."""
        with self._lock:
            jobs = [slot.job for slot in self._running.values() if not slot.paid]
        if not jobs:
            return
        try:
            confirmed = await self._store.start([job.lease for job in jobs])
        except Exception:
            self._on_store_error()
            logger.exception("worker %s: paying for started jobs failed", self._worker_id)
            return
        with self._lock:
            for job, ok in zip(jobs, confirmed, strict=True):
                slot = self._running.get(job.id)
                if ok and slot is not None:
                    slot.paid = True
        self.drop(job.id for job, ok in zip(jobs, confirmed, strict=True) if not ok)

    def drop(self, ids: Iterable[int] | None) -> None:
        """Interrupt the jobs (``None``: all) that are no longer this worker's; nothing is
        written for them."""
        wanted = None if ids is None else set(ids)
        with self._lock:
            # A job whose processor returned is past interrupting: its outcome is queued
            # or being written, fenced (a transactional job's, in its transaction, which
            # may just have committed: then the store rightly no longer sees it running
            # here, and it is done, not lost). A write that finds it gone reports it lost.
            slots = [
                s
                for s in self._running.values()
                if (wanted is None or s.job.id in wanted) and not s.returned
            ]
            for slot in slots:
                slot.lost = True
        if slots:
            logger.warning(
                "worker %s: job(s) %s no longer ours (recovered, cancelled or deleted); "
                "interrupting their processors, nothing is written for them",
                self._worker_id,
                [slot.job.id for slot in slots],
            )
        for slot in slots:
            slot.guard.interrupt(
                JobCancelledError(f"job {slot.job.id} is no longer claimed by this worker")
            )

    def nudge(self) -> None:
        """Wake a drain waiting for the slots (a forced stop wants it to look again)."""
        self._freed.set()

    def _entered(self, slot: _Slot) -> None:
        with self._lock:
            slot.entered = True
        self._on_entered()

    def _returned(self, slot: _Slot) -> None:
        with self._lock:
            slot.returned = True

    async def _run(self, slot: _Slot) -> None:
        job = slot.job
        ctx = JobContext(job, self._worker_id, cancel=slot.guard)
        # For the whole attempt, so every record logged meanwhile (the processor's, the
        # tasks and threads it starts, ours below) can tell its job (current_job()).
        token = running_job.set(ctx)
        span = AttemptSpan(self._tracer, job) if self._traced else None
        started = self._clock.monotonic()
        result = NOT_RUN
        failure: BaseException | None = None
        try:
            result = await self._runner.run(
                ctx, slot.guard, lambda: self._entered(slot), lambda: self._returned(slot)
            )
        except Exception as exc:
            failure = exc
            logger.exception(
                "worker %s: job %d (%s) could not be completed; it stays running until "
                "stale-claim recovery",
                self._worker_id,
                job.id,
                job.kind,
            )
        except BaseException as exc:  # this task (thread) is being stopped
            failure = exc
            raise
        finally:
            duration = max(0.0, self._clock.monotonic() - started)
            with self._lock:
                lost = slot.lost
                slot.settling = True
                abandoned = slot.abandoned
            label = "released" if abandoned else LOST.label if lost else result.label
            if span is not None:
                span.ended(label, result.error if failure is None else failure)
                span.close(failure)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "worker %s: job %d (%s) attempt %d: %s after %.3f s",
                    self._worker_id,
                    job.id,
                    job.kind,
                    job.attempts,
                    label,
                    duration,
                )
            running_job.reset(token)
            if abandoned:
                pass  # its release was written for it, its slot freed (see _abandon)
            elif lost or result.outcome is None:
                self._completer.report(job, label, duration)
                self._node_slots.release(job.kind)
            else:
                if isinstance(slot.guard.error, JobCancelledError):
                    # Interrupted by the shutdown (a lost job is not here): its release.
                    self.released.append(job.id)
                # The node slot is released once the outcome is written (on_settled): the
                # job is `running` in the store until then.
                done = Done(job, result.outcome, duration)
                if not self._completer.submit(done):
                    await self._completer.write_late(done)  # the completer is gone
                # A retry (or release) this worker writes arms its next-due timer.
                later = later_by(result.outcome)
                if later is not None:
                    self._on_later(later)
            if not abandoned:
                # Free the slot last (after queueing the outcome), so whoever waits for
                # it sees the job's every effect, or its outcome waiting to be written.
                with self._lock:
                    self._running.pop(job.id, None)
                self._freed.set()
                self._on_finished(job)

    async def drain(self, timeout: float, *, forced: Callable[[], bool]) -> None:
        """Shutdown: wait up to ``timeout`` for the running jobs (cut short once
        ``forced()``), then interrupt the rest: they release themselves."""
        if await self._wait_until_empty(timeout, forced=forced):
            return
        with self._lock:
            slots = list(self._running.values())
        for slot in slots:
            slot.guard.interrupt(JobCancelledError("the worker is shutting down"))
        logger.warning(
            "worker %s: interrupted %d running job(s) %s; they are released without using "
            "an attempt",
            self._worker_id,
            len(slots),
            "(forced stop)" if forced() else f"still running after {timeout:.1f} s",
        )
        if not await self._wait_until_empty(FORCE_GRACE if forced() else RELEASE_GRACE):
            self._abandon()

    def _abandon(self) -> None:
        """Shutdown, after the grace: release the jobs whose processors ignored the
        interruption (a blocking call in C code cannot be interrupted) as if they had
        stopped, and free their slots. Their tasks (threads) run on, writing nothing, until
        they end or the process does; a stale job would otherwise stay ``running`` until
        the next stale-claim recovery."""
        with self._lock:
            slots = [slot for slot in self._running.values() if not slot.settling]
            for slot in slots:
                slot.abandoned = True
                slot.lost = True  # whatever its run produces later is not written
        if not slots:
            return
        logger.warning(
            "worker %s: job(s) %s ignored the interruption (a call that cannot be "
            "interrupted); releasing them to pending without using an attempt and leaving "
            "their processors behind",
            self._worker_id,
            [slot.job.id for slot in slots],
        )
        for slot in slots:
            self.released.append(slot.job.id)
            if not self._completer.submit(Done(slot.job, Release(), 0.0)):
                self._completer.report(slot.job, "error", 0.0)
                self._node_slots.release(slot.job.kind)
            # Out of the running jobs only once its release is queued: the heartbeat
            # counts it as held until then (else it may release it first, recovered).
            with self._lock:
                del self._running[slot.job.id]
            self._on_finished(slot.job)
        self._freed.set()

    async def _wait_until_empty(
        self, timeout: float, *, forced: Callable[[], bool] | None = None
    ) -> bool:
        """True once nothing runs; False after ``timeout`` (or as soon as ``forced()``
        while jobs run)."""
        deadline = time.monotonic() + timeout
        while True:
            self._freed.clear()
            if not len(self):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (forced is not None and forced()):
                return False
            # At least once a second: ``forced()`` may turn true without a job freeing
            # (a stop's deadline during a drain), and a drain has no deadline (inf).
            await self._freed.wait(min(remaining, 1.0))
