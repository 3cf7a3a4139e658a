"""Store adapters: memory, psycopg, asyncpg, SQLAlchemy (import the one you use)."""

from __future__ import annotations
