"""What every PostgreSQL store shares for PgBouncer's transaction pooling
(``pgbouncer=True``) and for a notifier on a connection of its own (``listen_dsn=``).

In transaction pooling each transaction may run on another server connection: a store in
that mode sets no session state (no session reset, no per-connection
``statement_timeout``), uses no named prepared statements, and takes only
transaction-level advisory locks (all of skiplock's are). ``LISTEN`` needs a session, so
the notifier connects to the listen DSN (PostgreSQL directly, or a session-mode pool)
when there is one, and else there is none: workers poll. Imports no driver.
"""

from __future__ import annotations

import os

from skiplock.core import ValidationError

#: The environment variable of the notifier's connection string, read when a store is
#: given no ``listen_dsn=`` (a connection string, so no ``Settings`` field: as
#: ``SKIPLOCK_DSN``, the CLI's).
LISTEN_DSN_ENV = "SKIPLOCK_LISTEN_DSN"


def listen_dsn(given: str | None) -> str | None:
    """The notifier's own connection string: ``given``, else ``$SKIPLOCK_LISTEN_DSN``,
    else None (the store's own connections listen, or with ``pgbouncer=True`` nothing
    does)."""
    if given is not None:
        value: object = given  # checked at runtime: callers may pass anything
        if not isinstance(value, str) or not value.strip():
            raise ValidationError(f"listen_dsn must be a connection string, got {given!r}")
        return given
    found = os.environ.get(LISTEN_DSN_ENV, "").strip()
    return found or None


def statement_timeout_refused() -> ValidationError:
    """The error for ``statement_timeout=`` with ``pgbouncer=True``: it is a session
    setting (a startup parameter PgBouncer refuses, or a ``SET`` that would stay on
    whichever server connection PgBouncer picked)."""
    return ValidationError(
        "statement_timeout cannot be set per connection through PgBouncer; "
        "set it on the role or database (ALTER ROLE ... SET statement_timeout)"
    )
