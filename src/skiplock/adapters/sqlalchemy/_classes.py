"""SQLAlchemy's sync and asyncio classes under one roof (hand-written).

The async sources import ``AsyncEngine``, ``AsyncConnection`` and ``AsyncSession`` from
here; their generated twins import ``Engine``, ``Connection`` and ``Session`` (unasync
drops the prefix), which must be SQLAlchemy's sync classes, not names from
``sqlalchemy.ext.asyncio``.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

__all__ = ["AsyncConnection", "AsyncEngine", "AsyncSession", "Connection", "Engine", "Session"]
