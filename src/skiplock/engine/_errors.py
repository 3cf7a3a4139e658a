"""Errors raised by the engine and its workers (the core's errors are re-exported too)."""

from __future__ import annotations

from skiplock.core import SkiplockError


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
