"""Fault injection for the PostgreSQL stores under the contract kit (both flavours).

Imported as ``tests.contract.pgfaults``. Every PostgreSQL store runs its statements
through one driver object, so wrapping the driver's ``fetch`` reaches psycopg, asyncpg
and SQLAlchemy alike.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from skiplock.testing.contract import InjectedFault

if TYPE_CHECKING:
    from collections.abc import Iterator

#: Only the key lookup of a keyed enqueue (``ids_by_idempotency_key``) reads keys so.
_KEY_LOOKUP = "idempotency_key = ANY("


class PgFaults:
    """The kit's ``failing_key_lookup`` for a PostgreSQL store (mix in before the kit)."""

    @contextlib.contextmanager
    def failing_key_lookup(self, store: Any) -> Iterator[None]:
        driver = store._driver
        fetch = driver.fetch

        def fetch_or_fail(conn: Any, query: Any, params: Any) -> Any:
            if _KEY_LOOKUP in query.text:
                raise InjectedFault(f"injected: {query.text.split()[0]} ... {_KEY_LOOKUP}")
            return fetch(conn, query, params)  # a coroutine for the async driver

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(driver, "fetch", fetch_or_fail)
            yield
