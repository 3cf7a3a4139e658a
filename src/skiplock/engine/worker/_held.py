"""The jobs a worker claimed but has not started (one module for both flavours: no I/O).

:class:`HeldJobs` is the dispatcher's buffer: jobs held in claim order, jobs whose start
is being confirmed, the suspect that runs alone and the slots promised to a claim in
flight. It decides which held jobs may start and in what order; the dispatcher starts
them, under its own lock, which every method here expects to be held.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from skiplock.core import Job


class HeldJobs:
    """Claimed jobs not running yet, and the slots promised to some of them."""

    def __init__(self) -> None:
        self._queue: deque[Job] = deque()  # held, in claim order
        self._starting: dict[int, Job] = {}  # recovered ones being paid for (store.start)
        # The suspect that runs alone (its id until its slot is free), and a suspect a
        # claim charged that waits for quiet to start.
        self.isolated: int | None = None
        self.ready: Job | None = None
        # Slots kept free for the jobs a claim in flight starts at once.
        self.reserved = 0

    def __len__(self) -> int:
        """Held, being started, or a suspect waiting for quiet."""
        return len(self._queue) + len(self._starting) + (self.ready is not None)

    @property
    def queued(self) -> int:
        """Held jobs not yet taken to start."""
        return len(self._queue)

    @property
    def starting(self) -> bool:
        """Whether some start is being confirmed."""
        return bool(self._starting)

    def promised(self) -> int:
        """Slots not free although no job runs in them yet."""
        return len(self._starting) + self.reserved + (self.ready is not None)

    def ids(self) -> set[int]:
        """Every job held here."""
        ready = () if self.ready is None else (self.ready.id,)
        return {*(job.id for job in self._queue), *self._starting, *ready}

    def waiting(self) -> bool:
        """Whether a held job (or a charged suspect) waits for a slot."""
        return bool(self._queue) or self.ready is not None

    def suspect_waits(self) -> bool:
        """Whether a suspect waits to start (for quiet)."""
        return self.ready is not None or bool(self._queue and self._queue[0].suspect)

    # ---- taking jobs in ----------------------------------------------------------------

    def hold(self, jobs: Iterable[Job]) -> None:
        """Hold ``jobs`` (claim order) behind those already held."""
        self._queue.extend(jobs)

    def hold_charged_suspect(self, job: Job) -> None:
        """A suspect the claim charged: it waits for quiet, then runs alone."""
        self.isolated, self.ready = job.id, job

    # ---- starting ------------------------------------------------------------------------

    def take_unpaid(self, free: int) -> list[Job]:
        """The leading held jobs that were never recovered, up to ``free``: they start
        without a round trip (their outcome, or the next heartbeat, pays for them)."""
        jobs: list[Job] = []
        queue = self._queue
        while len(jobs) < free and queue and self.isolated is None and self.ready is None:
            if queue[0].recovered or queue[0].suspect:
                break
            jobs.append(queue.popleft().charged())
        return jobs

    def take_to_confirm(self, free: int, quiet: Callable[[], bool]) -> list[Job]:
        """Leading recovered held jobs (up to ``free``) to be paid for before they run, or
        a suspect alone once ``quiet()``; they count as starting until :meth:`confirmed`
        or :meth:`unstart`."""
        queue = self._queue
        if self.isolated is not None or not queue or free <= 0:
            return []
        jobs: list[Job] = []
        if queue[0].suspect:
            if not quiet():
                return []
            jobs.append(queue.popleft())
            self.isolated = jobs[0].id
        else:
            while queue and len(jobs) < free and queue[0].recovered and not queue[0].suspect:
                jobs.append(queue.popleft())
        self._starting.update((job.id, job) for job in jobs)
        return jobs

    def confirmed(self, jobs: Sequence[Job], ok: Sequence[bool]) -> tuple[list[Job], list[Job]]:
        """``store.start`` answered for ``jobs``: (paid for, to start; no longer ours).
        Jobs dropped meanwhile are in neither."""
        started: list[Job] = []
        gone: list[Job] = []
        for job, still_ours in zip(jobs, ok, strict=True):
            if self._starting.pop(job.id, None) is None:
                continue  # dropped meanwhile
            if still_ours:
                started.append(job.charged())
            else:
                gone.append(job)
                if self.isolated == job.id:
                    self.isolated = None
        return started, gone

    def unstart(self, jobs: Sequence[Job]) -> None:
        """The start of ``jobs`` failed: back to the head of the queue, in order, unless
        dropped meanwhile."""
        back = [job for job in jobs if self._starting.pop(job.id, None) is not None]
        self._queue.extendleft(reversed(back))
        if self.isolated in {job.id for job in jobs}:
            self.isolated = None

    def finished(self, job_id: int) -> bool:
        """A job left its slot; True if it was the suspect running alone."""
        if self.isolated != job_id:
            return False
        self.isolated = None
        return True

    # ---- letting jobs go -------------------------------------------------------------------

    def drop(self, wanted: set[int] | None) -> list[Job]:
        """Forget the jobs in ``wanted`` (None: every one) that are held here; returns them."""

        def dropping(job_id: int) -> bool:
            return wanted is None or job_id in wanted

        dropped = [job for job in self._queue if dropping(job.id)]
        if dropped:
            self._queue = deque(job for job in self._queue if not dropping(job.id))
        starting = [i for i in self._starting if dropping(i)]
        dropped.extend(self._starting.pop(i) for i in starting)
        if self.ready is not None and dropping(self.ready.id):
            dropped.append(self.ready)
            self.ready = None
        if self.isolated is not None and self.isolated in {job.id for job in dropped}:
            self.isolated = None
        return dropped

    def release_all(self) -> tuple[list[Job], Job | None]:
        """Shutdown: every queued job and the charged suspect, to give back; jobs being
        started stay until their confirmation."""
        jobs = list(self._queue)
        self._queue.clear()
        ready, self.ready = self.ready, None
        return jobs, ready
