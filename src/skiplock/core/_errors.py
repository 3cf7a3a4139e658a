"""Exceptions. Our-side errors (bad input, illegal use) vs store-side errors."""

from __future__ import annotations


class SkiplockError(Exception):
    """Base of every skiplock error."""


class ValidationError(SkiplockError, ValueError):
    """Input rejected before anything was written (X2)."""


class InvalidTransitionError(SkiplockError):
    """A (state, event) pair that the transition table does not allow; nothing changed."""


class UnknownKindError(ValidationError):
    """Enqueue of a kind the engine has no processor for (when it knows its kinds)."""


class JobNotFoundError(SkiplockError, LookupError):
    """No job with that id."""


class LeaseLostError(SkiplockError):
    """A fenced write found the job no longer claimed by this worker/attempt."""


class StoreError(SkiplockError):
    """The store failed (connection, schema, driver); the store's fault, not the caller's."""


class DatabaseUnavailableError(StoreError):
    """PostgreSQL cannot be reached, or did not answer in time: the server refuses or
    drops connections (down, restarting), no pooled connection came within the pool's
    ``timeout``, a connection was lost during the call, or an operator read ran past the
    store's ``read_timeout``. Transient: retry later. Every door maps it the same way
    (REST and dashboard: 503 with ``Retry-After``; the ``skiplock`` command: exit
    status 1).
    """

    #: How :meth:`unreachable` begins its message (what the dashboard's page says).
    UNREACHABLE = "the database is unreachable: "

    @classmethod
    def unreachable(cls, why: str | None) -> DatabaseUnavailableError:
        """The error of a call that cannot have a connection because the server cannot
        be reached (``why``: the driver's words, on one line)."""
        line = " ".join((why or "").split()) or "no connection could be made"
        return cls(cls.UNREACHABLE + line)


class SchemaVersionError(StoreError):
    """The database schema is older (or newer) than this code expects."""


class UndecodableRowError(StoreError):
    """A stored job row that cannot become a :class:`~skiplock.core.Job`: one written
    around enqueue's validation (plain SQL, say), e.g. a ``trace_context`` that is no JSON
    object or a timestamp Python cannot read. Names the job, the column and the problem.

    A claim moves such a row to ``dead`` (see :func:`~skiplock.core.undecodable_error`);
    admin reads of it raise this error.
    """

    def __init__(self, job_id: int, column: str, problem: str) -> None:
        super().__init__(f"job {job_id} cannot be read: {column}: {problem}")
        self.job_id = job_id
        self.column = column
        self.problem = problem
