"""What the sync and async psycopg drivers check on a connection the same way (not
generated: it holds no I/O, so both flavours import it)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.pq import TransactionStatus


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
