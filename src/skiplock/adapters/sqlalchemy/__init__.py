"""SQLAlchemy 2 adapter: job stores on your ``Engine`` / ``AsyncEngine``, sessions included.

Install with ``pip install skiplock[sqlalchemy]`` plus a PostgreSQL driver (psycopg or
asyncpg)::

    from skiplock.adapters.sqlalchemy import AsyncSessionJobStore

    store = AsyncSessionJobStore(create_async_engine("postgresql+asyncpg://..."))
    async with AsyncSession(engine) as session, session.begin():
        session.add(order)
        await skiplock_engine.enqueue("email_send", {...}, connection=session)

Alembic: see :mod:`skiplock.adapters.sqlalchemy.alembic`.
"""

from __future__ import annotations

from skiplock.adapters._pg import SchemaStatus

from ._store import SessionJobStore
from ._store_async import AsyncSessionJobStore

__all__ = ["AsyncSessionJobStore", "SchemaStatus", "SessionJobStore"]
