"""Errors raised by the engine and its workers (the core's errors are re-exported too)."""

from __future__ import annotations

from skiplock.core import InvalidTransitionError, SkiplockError


class JobTimeoutError(SkiplockError, TimeoutError):
    """A processor ran past its kind's timeout (R22); the attempt counts as failed.

    Async processors see a cancellation; sync processors get this error raised into their
    thread and see ``ctx.cancelled`` turn true.
    """


class JobCancelledError(SkiplockError):
    """The worker stopped a running job (graceful shutdown past ``shutdown_timeout``).

    The job is released to ``pending`` without using an attempt.
    """


class UndecodablePayloadError(SkiplockError, ValueError):
    """A stored payload does not decode to the processor's payload type (R25)."""


class UnstorableResultError(SkiplockError, ValueError):
    """A processor returned a value that cannot be stored as its job's result (not JSON,
    or larger than ``Settings.max_result_bytes``): the job goes to ``dead`` (X5)."""


class SelectionChangedError(InvalidTransitionError):
    """A bulk action's jobs are no longer what the operator confirmed (one left the
    selection, or another joined it): nothing changed. ``count`` is how many match now,
    ``confirmed`` how many were confirmed; confirm again to act on the new selection."""

    def __init__(self, message: str, *, count: int, confirmed: int) -> None:
        super().__init__(message)
        self.count = count
        self.confirmed = confirmed
