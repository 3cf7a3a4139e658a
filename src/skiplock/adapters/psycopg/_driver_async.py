"""Running the shared SQL steps on a psycopg connection (async source; twin generated)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from psycopg.rows import dict_row

from skiplock.adapters._pg._migrate import Rows, SchemaStatus, Step, apply_steps, status_steps
from skiplock.adapters._pg._sql import Query, convert_cached

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping

    from psycopg import AsyncConnection

T = TypeVar("T")


async def execute(
    conn: AsyncConnection[Any], query: Query, params: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Run one converted query; its rows as dicts (empty when it returns none)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(query.text, params)
        if cur.description is None:
            return []
        return await cur.fetchall()


async def run_step(conn: AsyncConnection[Any], step: Step) -> Rows:
    """Run one step: a parameterless script, or a neutral query converted to pyformat."""
    if step.params is None:
        async with conn.cursor(row_factory=dict_row) as cur:
            # A script may hold several statements; without parameters psycopg sends it
            # as is (no placeholder parsing, no prepared statement).
            await cur.execute(step.sql, prepare=False)
            return []
    return await execute(conn, convert_cached(step.sql, "pyformat"), step.params)


async def run_steps(conn: AsyncConnection[Any], steps: Generator[Step, Rows, T]) -> T:
    """Drive a step generator on ``conn`` (the caller decides about the transaction)."""
    try:
        step = next(steps)
        while True:
            rows = await run_step(conn, step)
            step = steps.send(rows)
    except StopIteration as stop:
        result: T = stop.value
        return result


async def apply_migrations(conn: AsyncConnection[Any], schema: str) -> list[str]:
    """Apply pending migrations in one transaction; returns the names applied."""
    async with conn.transaction():
        return await run_steps(conn, apply_steps(schema))


async def read_status(conn: AsyncConnection[Any], schema: str) -> SchemaStatus:
    """Applied and pending migrations of ``schema``."""
    async with conn.transaction():
        return await run_steps(conn, status_steps(schema))
