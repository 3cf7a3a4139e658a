"""Index care (OP-17) and the search-vector rebuild: ``index_sync``, ``gin_backfill``,
``reindex``.

``CREATE INDEX CONCURRENTLY`` cannot run in a transaction, so these kinds take an
autocommit connection (``autocommit=True``). A build can take long: a stale TTL of two
hours keeps a live worker's build from being taken for a crashed one, priority is low, and
``max_attempts=3`` stops a build that cannot succeed (a value that does not cast) from
retrying forever; its status then reads ``failed``.

Two concurrent builds on one table deadlock (each ``CREATE INDEX CONCURRENTLY`` waits for
the other's transaction): PostgreSQL kills one, which costs it an attempt, and the last
attempt of a build that would succeed could end ``failed``. ``index_sync`` and
``gin_backfill`` build on ``aa.entity`` and share its concurrency key, so at most one
build of the table runs at a time across every worker; the other waits, pending, without
using an attempt (docs/keys.md, "Concurrency keys"). ``prefetch_limit=0``: no worker
holds the table's place while its slots are busy.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any, LiteralString

import attrs
from psycopg import AsyncConnection, sql

import skiplock
from skiplock import AsyncEngine, JobContext, TaskOptions

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

# The spec's priority=200 means "low"; skiplock orders higher first (R14), so it is -200.
LOW = -200
INDEX_POLICY: TaskOptions = {
    "autocommit": True,
    "priority": LOW,
    "max_attempts": 3,
    "stale_ttl": timedelta(hours=2),
    "backoff_base": 60,
}
# Every index build is on aa.entity: one key for the table, one build at a time.
ENTITY_TABLE = "table:aa.entity"
BUILD_POLICY: TaskOptions = {**INDEX_POLICY, "concurrency_key": ENTITY_TABLE, "prefetch_limit": 0}
# Names end up in index names: validated, then still quoted as identifiers.
NAME = re.compile(r"[a-z][a-z0-9_]{0,19}")
CASTS: dict[str, LiteralString] = {"text": "text", "numeric": "numeric"}


@attrs.frozen
class IndexChange:
    type_key: str
    attribute: str


@attrs.frozen
class EntityType:
    type_key: str


@attrs.frozen
class Reindex:
    type_key: str
    batch: int = 1000


index_sync = skiplock.declare("index_sync", IndexChange, **BUILD_POLICY)
gin_backfill = skiplock.declare("gin_backfill", EntityType, **BUILD_POLICY)
reindex = skiplock.declare("reindex", Reindex, **INDEX_POLICY)


def check_name(*names: str) -> None:
    """Refuse a type or attribute name that cannot be part of an index name."""
    for name in names:
        if not NAME.fullmatch(name):
            raise ValueError(f"invalid name {name!r}: [a-z][a-z0-9_]*, at most 20 characters")


def register_indexes(engine: AsyncEngine) -> None:
    @engine.task(index_sync)
    async def sync_index(change: IndexChange, ctx: JobContext) -> str:
        conn: AsyncConnection[Any] = ctx.connection
        check_name(change.type_key, change.attribute)
        cur = await conn.execute(
            "SELECT searchable, data_type FROM aa.entity_type_attribute"
            " WHERE type_key = %s AND attribute = %s",
            [change.type_key, change.attribute],
        )
        wanted = await cur.fetchone()
        name = f"ix_entity_{change.type_key}_{change.attribute}"

        async def status(value: str) -> None:
            await conn.execute(
                "UPDATE aa.entity_type_attribute SET index_status = %s"
                " WHERE type_key = %s AND attribute = %s",
                [value, change.type_key, change.attribute],
            )

        create = None
        if wanted is not None and wanted[0]:
            create = sql.SQL(
                "CREATE INDEX CONCURRENTLY {} ON aa.entity (((attributes ->> {})::{}))"
                " WHERE type_key = {}"
            ).format(
                sql.Identifier(name),
                sql.Literal(change.attribute),
                sql.SQL(CASTS[wanted[1]]),
                sql.Literal(change.type_key),
            )
        return await _reconcile(conn, ctx, name, create, status)

    @engine.task(gin_backfill)
    async def backfill(entity_type: EntityType, ctx: JobContext) -> str:
        conn: AsyncConnection[Any] = ctx.connection
        check_name(entity_type.type_key)
        cur = await conn.execute(
            "SELECT is_external_source_target FROM aa.entity_type WHERE type_key = %s",
            [entity_type.type_key],
        )
        wanted = await cur.fetchone()
        name = f"ix_entity_attributes_gin_{entity_type.type_key}"

        async def status(value: str) -> None:
            await conn.execute(
                "UPDATE aa.entity_type SET gin_status = %s WHERE type_key = %s",
                [value, entity_type.type_key],
            )

        create = None
        if wanted is not None and wanted[0]:
            create = sql.SQL(
                "CREATE INDEX CONCURRENTLY {} ON aa.entity USING gin (attributes jsonb_path_ops)"
                " WHERE type_key = {}"
            ).format(sql.Identifier(name), sql.Literal(entity_type.type_key))
        return await _reconcile(conn, ctx, name, create, status)

    @engine.task(reindex)
    async def rebuild_search(job: Reindex, ctx: JobContext) -> dict[str, int]:
        conn: AsyncConnection[Any] = ctx.connection  # each batch commits on its own
        done, last_id = 0, 0
        while True:
            cur = await conn.execute(
                "UPDATE aa.entity SET search_vector = to_tsvector('simple', attributes)"
                " WHERE id IN (SELECT id FROM aa.entity WHERE tenant = %s AND type_key = %s"
                " AND id > %s ORDER BY id LIMIT %s) RETURNING id",
                [ctx.tenant, job.type_key, last_id, job.batch],
            )
            ids = [row[0] for row in await cur.fetchall()]
            if not ids:
                return {"reindexed": done}
            done, last_id = done + len(ids), max(ids)
            ctx.check_cancelled()


async def _reconcile(
    conn: AsyncConnection[Any],
    ctx: JobContext,
    name: str,
    create: sql.Composed | None,
    status: Callable[[str], Awaitable[None]],
) -> str:
    """Bring index ``name`` to what the flags want: dropped (``create`` None), or a drift
    check and then built: building -> active, or failed after the last attempt."""
    if create is None:
        await _drop(conn, name)
        await status("none")
        return "dropped"
    await status("building")
    try:
        cur = await conn.execute(
            "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE c.relnamespace = 'aa'::regnamespace AND c.relname = %s",
            [name],
        )
        found = await cur.fetchone()
        if found is not None and not found[0]:
            # A concurrent build that failed leaves an invalid index behind: drop it first.
            await _drop(conn, name)
        if found is None or not found[0]:
            await conn.execute(create)
    except Exception:
        if ctx.attempt >= ctx.job.max_attempts:  # the last attempt: leave nothing half-built
            await _drop(conn, name)
            await status("failed")
        raise
    await status("active")
    return "active"


async def _drop(conn: AsyncConnection[Any], name: str) -> None:
    await conn.execute(
        sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS aa.{}").format(sql.Identifier(name))
    )
