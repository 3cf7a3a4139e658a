"""What the sync and async psycopg drivers check on a connection the same way (not
generated: it holds no I/O, so both flavours import it)."""

from __future__ import annotations

import math
import random
import time
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool.base import AttemptWithBackoff

if TYPE_CHECKING:
    from collections.abc import Mapping

    from psycopg.abc import PQGen

RV = TypeVar("RV")


def idle(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether the connection is open and outside any transaction (a closed one's status
    is UNKNOWN)."""
    # pgconn's plain int: conn.info builds an object and an enum on every read.
    return conn.pgconn.transaction_status == TransactionStatus.IDLE


def in_transaction(conn: psycopg.BaseConnection[Any]) -> bool:
    """Whether a transaction is open (or failed) on a connection that is not closed."""
    return not conn.closed and conn.pgconn.transaction_status != TransactionStatus.IDLE


def ended_error() -> psycopg.ProgrammingError:
    """The error for a lent transaction that user code ended inside its block.

    psycopg's own ``transaction()`` refuses ``commit()`` and ``rollback()`` inside it; the
    block the driver opens itself (to send the session reset with its COMMIT) reports
    them with this instead.
    """
    return psycopg.ProgrammingError(
        "the transaction lent by the store was ended inside its block (commit() or "
        "rollback() on the lent connection): what ran after that was not part of it, "
        "and the store writes nothing more on it; use a savepoint (conn.transaction()) "
        "instead"
    )


#: SQLSTATE prefixes of errors that mean the server cannot be reached or ended the
#: session: connection exceptions (08), shutdown and termination (57P: a restart,
#: pg_terminate_backend, "the database system is starting up"), and the idle-in-transaction
#: timeout (25P03). No SQLSTATE at all: a client-side connection error (refused, timed out).
SESSION_ENDED = ("08", "57P", "25P03")

#: SQLSTATE of a write refused by a server that answers read-only: a primary demoted in
#: place, or a standby. The session works, but not for the store: it is dropped and the
#: next connection is opened anew (to the primary, with ``target_session_attrs``).
READ_ONLY = "25006"


def is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (from connecting or from a statement) means the session is gone or
    cannot be had, not that a query failed. A statement timeout, a deadlock or a
    serialization failure leave the connection usable. psycopg gives every failed
    connection attempt no SQLSTATE: a server that is down or restarting, and also one
    that refuses the login (a missing database, too many connections). A server that
    answers read-only (:data:`READ_ONLY`) counts as unreachable too."""
    if not isinstance(exc, psycopg.OperationalError):
        return isinstance(exc, psycopg.Error) and exc.sqlstate == READ_ONLY
    state = exc.sqlstate
    return state is None or state.startswith(SESSION_ENDED)


#: Longest wait between two connection attempts of an owned pool while the server is
#: unreachable (each wait drawn from its upper half: jitter, so that the nodes of a
#: cluster do not reconnect in lockstep).
RECONNECT_INTERVAL = 1.0
#: The first wait; it doubles up to :data:`RECONNECT_INTERVAL`.
RECONNECT_FIRST = 0.1


class CappedBackoff(AttemptWithBackoff):
    """psycopg_pool's reconnection schedule with its waits capped.

    psycopg_pool waits 1 s after a failed connection attempt and doubles the wait each
    time (up to ``reconnect_timeout``, 5 minutes): after an outage of 15 s its next
    attempt may come 16 s after the server is back. Here the wait starts at
    :data:`RECONNECT_FIRST`, doubles and never exceeds :data:`RECONNECT_INTERVAL`
    (jittered), so a pool reconnects within about a second of the server accepting
    connections, at about one attempt per second per missing connection meanwhile.
    """

    INITIAL_DELAY = RECONNECT_FIRST

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        cap = RECONNECT_INTERVAL * random.uniform(0.5, 1.0)
        self.delay = min(self.delay, cap)


def connect_kwargs(
    conninfo: str, given: Mapping[str, Any], connect_timeout: float
) -> dict[str, Any]:
    """The keyword arguments of a store's own connections: ``given``, with
    ``connect_timeout`` (whole seconds, at least 2: libpq's rule) unless ``conninfo`` or
    ``given`` sets one."""
    kwargs = dict(given)
    if "connect_timeout" not in conninfo_to_dict(conninfo) | kwargs:
        kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout))
    return kwargs


#: psycopg's wait interval (``psycopg.connection._WAIT_INTERVAL``): how often a wait
#: wakes up while the server is silent, so a deadline is noticed within this time.
WAIT_INTERVAL = 0.1


class DeadlineExpired(Exception):
    """Raised inside psycopg's wait by :func:`until_deadline` (never leaves the driver)."""


def until_deadline(gen: PQGen[RV], at: float) -> PQGen[RV]:
    """``gen`` (a psycopg generator of a statement's I/O), raising DeadlineExpired when
    psycopg's wait resumes it at or after ``at`` (``time.monotonic()``). The wait
    resumes it at least every interval while the server is silent, so a statement
    without an answer ends within an interval of ``at``."""
    try:
        state = next(gen)
    except StopIteration as stop:
        done: RV = stop.value
        return done
    while True:
        ready = yield state
        if time.monotonic() >= at:
            raise DeadlineExpired
        try:
            state = gen.send(ready)
        except StopIteration as stop:
            result: RV = stop.value
            return result
