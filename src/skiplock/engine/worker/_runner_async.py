"""Running one job (async source; ``_runner.py`` is the sync twin).

:meth:`JobRunner.run` takes a started job through its processor and returns what happened
as a :class:`RunResult`: the outcome still to be written (by the completer) or nothing to
write (completed inside the job's transaction, or no longer this worker's).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import traceback
from typing import TYPE_CHECKING, Any

import attrs

from skiplock.core import (
    Bury,
    Completion,
    LeaseLostError,
    Outcome,
    Release,
    Retry,
    Succeeded,
    UnknownKindError,
    ValidationError,
)
from skiplock.core.rules import FailureKind, decide_failure, encode_result, exception_traceback

from .._codec import encode
from .._errors import (
    JobCancelledError,
    JobTimeoutError,
    UndecodablePayloadError,
    UnstorableResultError,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from skiplock._compat_async import Interruptible
    from skiplock.core import Job, KindPolicy
    from skiplock.ports import AsyncAudit, AsyncJobsRole, Clock, Metrics

    from .._context import JobContext
    from .._controls import LimitsView
    from .._limits import RateLimiter
    from .._registry import ProcessorSpec

logger = logging.getLogger("skiplock.worker")

#: The metrics label of each outcome once it is written.
LABELS: Mapping[type[Any], str] = {
    Succeeded: "succeeded",
    Retry: "retry",
    Bury: "dead",
    Release: "released",
}


@attrs.frozen
class RunResult:
    """What running a job produced.

    ``outcome`` is left for the completer to write; ``None`` means nothing is left to
    write, and ``label`` says why (``succeeded`` in the job's own transaction, ``lost``
    when the job is no longer this worker's, ``error`` when it could not be completed).
    ``error`` is why the attempt failed, for the tracer (None when it did not).
    """

    outcome: Outcome | None
    label: str
    error: BaseException | None = None

    @property
    def final(self) -> bool:
        """Whether the job is finished once this result is written (no retry follows):
        the outcome's ``final``, or a success written in the job's own transaction."""
        if self.outcome is None:
            return self.label == "succeeded"
        return self.outcome.final

    @classmethod
    def pending(cls, outcome: Outcome, error: BaseException | None = None) -> RunResult:
        """An outcome for the completer (labelled as it will be once written)."""
        return cls(outcome, LABELS[type(outcome)], error)


LOST = RunResult(None, "lost")


class _Failures:
    """The failure decisions of one attempt, each taken once per exception: asked through
    the job's context (``ctx.failure_outcome``) before the exception reached the worker,
    the decision is the one the worker writes (same outcome, same retry delay)."""

    __slots__ = ("_decide", "_taken")

    def __init__(self, decide: Callable[[BaseException], tuple[RunResult, str]]) -> None:
        self._decide = decide
        self._taken: list[tuple[BaseException, RunResult, str]] = []

    def decision(self, exc: BaseException) -> tuple[RunResult, str]:
        """The result for ``exc`` and its error text (for the log)."""
        for seen, result, text in self._taken:
            if seen is exc:
                return result, text
        result, text = self._decide(exc)
        self._taken.append((exc, result, text))
        return result, text

    def outcome(self, exc: BaseException) -> Outcome:
        outcome = self.decision(exc)[0].outcome
        assert outcome is not None  # a failure always leaves an outcome to write
        return outcome


#: What a processor raises to end its process: after its failed attempt is recorded, the
#: worker stops gracefully and raises it again from ``run()``.
EXITS = (SystemExit, KeyboardInterrupt)


#: The outcome of a processor that returned None: nothing to encode or store.
NO_RESULT = Succeeded()


def succeeded(returned: object, max_bytes: int) -> Succeeded:
    """The outcome of a processor that returned ``returned``: its result converted like a
    payload (attrs classes, dataclasses, pydantic models) and encoded as JSON by the
    payload rules (X5). Raises :class:`UnstorableResultError` for a value that cannot be
    stored: not JSON, or more than ``max_bytes`` encoded."""
    if returned is None:
        return NO_RESULT
    try:
        value = encode(returned)
    except Exception as exc:  # a converter choking on a typed value
        raise UnstorableResultError(
            f"the return value ({type(returned).__name__}) could not be converted to JSON: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    try:
        text = encode_result(value, max_bytes=max_bytes)
    except ValidationError as exc:
        raise UnstorableResultError(str(exc)) from None
    return Succeeded(result=value, result_json=text)


def format_error(exc: BaseException) -> str:
    """The error text stored for a failed attempt: summary line, then the traceback from
    the processor's own frames (the worker's are left out)."""
    summary = "".join(traceback.format_exception_only(exc)).strip()
    details = exception_traceback(exc).rstrip()
    return f"{summary}\n\n{details}"


class JobRunner:
    """Runs started jobs of one worker: rate limits, decoding, the processor call in the
    kind's connection mode (R10) and timeout (R22), and the failure decision.

    Every way a processor ends is an outcome: an exception, any other ``BaseException``
    (``CancelledError`` it raised itself, ``GeneratorExit``, ...) and returning an
    awaitable from a plain function are failed attempts; ``SystemExit`` and
    ``KeyboardInterrupt`` are too, and ``on_exit(exc)`` then asks the worker to stop and
    raise it. Only the worker's own interruptions (shutdown, a lost lease) release the job.
    """

    def __init__(
        self,
        *,
        store: AsyncJobsRole,
        worker_id: str,
        processors: Mapping[str, ProcessorSpec],
        policy: Callable[[str], KindPolicy],
        limiter: RateLimiter | None,
        limits: LimitsView,
        clock: Clock,
        metrics: Metrics,
        on_exit: Callable[[BaseException], None],
        max_result_bytes: int,
        audit: AsyncAudit | None = None,
    ) -> None:
        self._store = store
        self._max_result_bytes = max_result_bytes
        self._audit = audit
        self._worker_id = worker_id
        self._processors = processors
        self._policy = policy
        self._limiter = limiter
        self._limits = limits
        self._clock = clock
        self._metrics = metrics
        self._on_exit = on_exit

    async def run(
        self,
        ctx: JobContext,
        guard: Interruptible,
        entered: Callable[[], None],
        returned: Callable[[], None],
    ) -> RunResult:
        """Run ``ctx.job`` (started: its attempt is counted) and return its result.

        ``guard`` is how others stop the processor (``ctx`` was built on it): a shutdown
        or a lost lease interrupts it with :class:`JobCancelledError` (released, or
        discarded by the caller). ``entered()`` is called right before the processor is,
        ``returned()`` right after it returned (before its outcome is written: in its
        transaction, for a transactional kind).
        """
        job = ctx.job
        spec = self._processors.get(job.kind)
        if spec is None:
            logger.warning(
                "worker %s: no processor for kind %r; job %d goes to dead",
                self._worker_id,
                job.kind,
                job.id,
            )
            return self._failed(
                job,
                FailureKind.UNKNOWN_KIND,
                job.kind,
                self._policy(job.kind),
                error=UnknownKindError(f"no processor registered for kind {job.kind!r}"),
            )
        failures = _Failures(functools.partial(self._decide, job, spec, guard))
        ctx._decide = failures.outcome
        wait = self._throttle(job)
        if wait > 0:
            try:
                self._metrics.rate_limited(job.kind, job.tenant)
            except Exception:  # a failing sink never stops a job
                logger.exception("worker %s: metrics failed", self._worker_id)
            return self._failed(
                job, FailureKind.THROTTLED, "rate limited", spec.policy, retry_after=wait
            )
        try:
            payload = spec.decode(job.payload)
        except UndecodablePayloadError as exc:
            logger.error("worker %s: job %d (%s): %s", self._worker_id, job.id, job.kind, exc)
            return self._failed(job, FailureKind.UNDECODABLE, str(exc), spec.policy, error=exc)
        try:
            return await self._execute(job, spec, payload, ctx, guard, (entered, returned))
        except LeaseLostError:
            logger.warning(
                "worker %s: job %d (%s) was no longer ours (recovered, cancelled or "
                "deleted); its transaction was rolled back",
                self._worker_id,
                job.id,
                job.kind,
            )
            return LOST
        except Exception as exc:
            return self._error(job, failures, exc)
        except BaseException as exc:
            if True:  # ASYNC
                task = asyncio.current_task()
                if isinstance(exc, asyncio.CancelledError) and task and task.cancelling():
                    raise  # this task is being cancelled: not the processor's doing
            result = self._error(job, failures, exc)
            if isinstance(exc, EXITS):
                self._on_exit(exc)
            return result

    async def _execute(
        self,
        job: Job,
        spec: ProcessorSpec,
        payload: Any,
        ctx: JobContext,
        guard: Interruptible,
        hooks: tuple[Callable[[], None], Callable[[], None]],
    ) -> RunResult:
        # R22: the job's database work is bounded by its own timeout, also server-side.
        statement_timeout = spec.policy.timeout
        if spec.policy.transactional:
            # R10: the processor's writes and the completion commit together.
            async with self._store.transaction(statement_timeout=statement_timeout) as tx:
                ctx.connection = tx
                returned = await self._call(spec, payload, ctx, guard, hooks, statement_timeout)
                # An unstorable result raises here: the processor's writes roll back.
                completion = [Completion(job.lease, succeeded(returned, self._max_result_bytes))]
                done = await self._store.complete(completion, connection=tx, audit=self._audit)
                if not done[0]:
                    # Rolls the processor's writes back with the transaction.
                    raise LeaseLostError(f"job {job.id} is no longer claimed by this worker")
            return RunResult(None, "succeeded")
        if spec.policy.autocommit:
            # For work that cannot run in a transaction (CREATE INDEX CONCURRENTLY).
            async with self._store.autocommit(statement_timeout=statement_timeout) as conn:
                ctx.connection = conn
                returned = await self._call(spec, payload, ctx, guard, hooks, statement_timeout)
        else:
            # The default: no connection is held while the processor runs.
            returned = await self._call(spec, payload, ctx, guard, hooks, statement_timeout)
        return RunResult.pending(succeeded(returned, self._max_result_bytes))

    async def _call(
        self,
        spec: ProcessorSpec,
        payload: Any,
        ctx: JobContext,
        guard: Interruptible,
        hooks: tuple[Callable[[], None], Callable[[], None]],
        timeout: float | None,
    ) -> object:
        """Call the processor in its timeout region (``timeout``: the policy's, in
        seconds); returns what it returned. ``hooks``: called before the processor and
        after it returned."""
        job_id, kind = ctx.job_id, ctx.kind

        def timeout_error() -> JobTimeoutError:
            return JobTimeoutError(f"job {job_id} ({kind}) ran past its timeout of {timeout} s")

        entered, returned_hook = hooks
        async with guard.region(timeout, timeout_error):
            entered()
            if spec.is_async:
                returned: object = await spec.fn(*spec.args(payload, ctx))
            else:
                returned = await guard.call_blocking(spec.fn, *spec.args(payload, ctx))
                if inspect.isawaitable(returned):
                    if inspect.iscoroutine(returned):
                        returned.close()  # never awaited: no warning about it
                    raise TypeError(
                        f"processor for {kind!r} is a plain function but returned "
                        f"{type(returned).__name__}, which nothing awaits: its work never "
                        "ran; make the processor async def (on an AsyncEngine)"
                    )
        returned_hook()
        return returned

    def _decide(
        self, job: Job, spec: ProcessorSpec, guard: Interruptible, exc: BaseException
    ) -> tuple[RunResult, str]:
        """The failure decision for ``exc`` (no side effect: see :class:`_Failures`)."""
        interrupted = guard.error
        if isinstance(interrupted, JobCancelledError):
            return RunResult.pending(Release()), ""
        if isinstance(interrupted, JobTimeoutError):
            failure, text = FailureKind.TIMEOUT, f"ran longer than {spec.policy.timeout} s"
            exc = interrupted
        elif isinstance(exc, UnstorableResultError):
            failure, text = FailureKind.UNSTORABLE_RESULT, str(exc)
        else:
            failure, text = FailureKind.ERROR, format_error(exc)
        result = self._failed(job, failure, text, spec.policy, jitter=random.random(), error=exc)
        return result, text

    def _error(self, job: Job, failures: _Failures, exc: BaseException) -> RunResult:
        result, text = failures.decision(exc)
        if isinstance(result.outcome, Release):
            return result
        logger.log(
            logging.ERROR if isinstance(result.outcome, Bury) else logging.WARNING,
            "worker %s: job %d (%s) attempt %d/%d failed (%s): %s",
            self._worker_id,
            job.id,
            job.kind,
            job.attempts,
            job.max_attempts,
            "dead" if isinstance(result.outcome, Bury) else "will retry",
            text.partition("\n")[0],
        )
        return result

    @staticmethod
    def _failed(
        job: Job,
        failure: FailureKind,
        text: str,
        policy: KindPolicy,
        *,
        jitter: float = 0.0,
        retry_after: float = 0.0,
        error: BaseException | None = None,
    ) -> RunResult:
        outcome = decide_failure(
            failure,
            text,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            retry=policy.retry,
            jitter=jitter,
            retry_after=retry_after,
        )
        return RunResult.pending(outcome, error)

    def _throttle(self, job: Job) -> float:
        """Per process (``limiter``): take a token from the (kind, tenant) bucket and the
        provider's, both shared by the engine's workers in this process, with the limits in
        force; 0.0 if both had one, else the seconds until they will (nothing is taken
        then). Claims are planned from the same buckets, so this rarely waits.
        Cluster-wide (no limiter) the claim paid for the job already."""
        if self._limiter is None:
            return 0.0
        rates = self._limits.rates()
        limit = rates.rate_for(job.kind, job.tenant)
        provider, cap = rates.providers.get(job.kind, (None, None))
        if limit is None and cap is None:
            return 0.0
        pair_wait, cap_wait = self._limiter.take(
            (job.kind, job.tenant), limit, provider, cap, self._clock.monotonic()
        )
        return max(pair_wait, cap_wait)
