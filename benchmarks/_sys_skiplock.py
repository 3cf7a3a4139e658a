"""skiplock itself, through one of the adapters in :mod:`benchmarks.adapters`."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from benchmarks import _pg
from benchmarks._system import KIND, Client, DrainConfig, Hooks, WorkerArgs, WorkerRunner
from benchmarks.adapters import TX_TABLE, Adapter, get_adapter
from skiplock.engine import AsyncEngine, Enqueue, JobContext, Settings

# Connections beyond the slots: the claim/complete path, listener and heartbeat.
_SPARE_CONNECTIONS = 4


def _engine(store: Any) -> AsyncEngine:
    # Default settings unless SKIPLOCK_* variables say otherwise (e.g. SKIPLOCK_PREFETCH
    # to try another prefetch); the harness itself sets none.
    return AsyncEngine(store, Settings.from_env())


async def drop_objects(
    conninfo: str, schema: str, indexes: tuple[str, ...], triggers: tuple[str, ...]
) -> None:
    """Drop these indexes and triggers of ``schema.jobs`` (what each costs, measured)."""
    ident = sql.Identifier(schema)
    for index in indexes:
        await _pg.execute(
            conninfo, sql.SQL("DROP INDEX {}.{}").format(ident, sql.Identifier(index))
        )
    for trigger in triggers:
        await _pg.execute(
            conninfo,
            sql.SQL("DROP TRIGGER {} ON {}.jobs").format(sql.Identifier(trigger), ident),
        )


class _SkiplockClient:
    def __init__(self, label: str, conninfo: str, schema: str, store: Any) -> None:
        self.label = label
        self._conninfo = conninfo
        self._schema = schema
        self._store = store
        self._engine = _engine(store)
        self._engine.declare_kind(KIND)  # an enqueue-only engine: no processors here
        self.unfinished_sql = (
            sql.SQL("SELECT count(*) FROM {}.jobs WHERE status IN ('pending', 'running')")
            .format(sql.Identifier(schema))
            .as_string(None)
        )

    async def enqueue_single(self, number: int) -> None:
        await self._engine.enqueue(KIND, {"i": number})

    async def enqueue_bulk(self, numbers: range) -> None:
        await self._engine.enqueue_many([Enqueue(KIND, {"i": i}) for i in numbers])

    async def enqueue_scheduled(self, number: int, delay: float) -> None:
        await self._engine.enqueue_after(delay, KIND, {"i": number})

    async def lateness_ms(self) -> list[float] | None:
        # started_at is the claim's now() (the attempt's start); both on the server's clock.
        rows = await _pg.fetch_all(
            self._conninfo,
            sql.SQL(
                "SELECT extract(epoch FROM started_at - available_at) * 1000 FROM {}.jobs"
                " WHERE (payload->>'i')::int >= 0 ORDER BY id"
            ).format(sql.Identifier(self._schema)),
        )
        return [float(r[0]) for r in rows]

    async def verify(self, n: int, *, transactional: bool) -> str | None:
        ident = sql.Identifier(self._schema)
        total, once = await _pg.fetch_one(
            self._conninfo,
            sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1)"
                " FROM {}.jobs"
            ).format(ident),
        )
        if total != n or once != n:
            return f"{once} of {total} jobs succeeded exactly once (expected {n})"
        if transactional:
            (writes,) = await _pg.fetch_one(
                self._conninfo,
                sql.SQL("SELECT count(*) FROM {}.{}").format(ident, sql.Identifier(TX_TABLE)),
            )
            if writes != n:
                return f"{writes} processor writes committed for {n} jobs"
        return None

    async def close(self) -> None:
        await self._store.close()


class _SkiplockWorker:
    def __init__(self, store: Any, worker: Any) -> None:
        self._store = store
        self._worker = worker

    async def run(self) -> None:
        await self._worker.run()

    def stop(self) -> None:
        self._worker.stop()

    async def close(self) -> None:
        await self._store.close()


class SkiplockSystem:
    """skiplock through ``adapter``."""

    name = "skiplock"
    drain_configs: tuple[DrainConfig, ...] = (DrainConfig("concurrency 16", 16),)
    backlog_config = DrainConfig("concurrency 16", 16)

    def __init__(
        self,
        adapter: str = "psycopg",
        dropped: tuple[str, ...] = (),
        dropped_triggers: tuple[str, ...] = (),
    ) -> None:
        self.adapter_name = adapter
        #: Indexes dropped after the schema is applied (``--without-indexes``): what an
        #: index costs the workloads, measured in the same run as the full schema.
        self.dropped = dropped
        #: Triggers of ``jobs`` dropped likewise (``--without-triggers``).
        self.dropped_triggers = dropped_triggers

    @property
    def label(self) -> str:
        """How results name it: ``skiplock/psycopg`` (``... -N indexes`` without some,
        ``... -N triggers``)."""
        base = f"skiplock/{self.adapter_name}"
        if self.dropped:
            base += f" -{len(self.dropped)} indexes"
        if self.dropped_triggers:
            base += f" -{len(self.dropped_triggers)} triggers"
        return base

    def _adapter(self) -> Adapter:
        return get_adapter(self.adapter_name)

    async def install(self, conninfo: str, schema: str) -> Client:
        adapter = self._adapter()
        await adapter.apply_schema(conninfo, schema)
        await drop_objects(conninfo, schema, self.dropped, self.dropped_triggers)
        ident = sql.Identifier(schema)
        await _pg.execute(
            conninfo,
            sql.SQL("CREATE TABLE {}.{} (i int PRIMARY KEY)").format(
                ident, sql.Identifier(TX_TABLE)
            ),
        )
        store = await adapter.open_store(conninfo, schema, 2)
        return _SkiplockClient(self.label, conninfo, schema, store)

    async def open_worker(self, args: WorkerArgs, hooks: Hooks) -> WorkerRunner:
        adapter = self._adapter()
        store = await adapter.open_store(
            args.conninfo, args.schema, args.concurrency + _SPARE_CONNECTIONS
        )
        engine = _engine(store)
        schema = args.schema
        if args.mode == "tx":

            @engine.processor(KIND, transactional=True)
            async def tx(payload: dict[str, int], ctx: JobContext) -> None:
                hooks.started(payload["i"])
                await adapter.tx_write(ctx.connection, schema, payload["i"])

        else:

            @engine.processor(KIND, transactional=False)
            async def noop(payload: dict[str, int], ctx: JobContext) -> None:
                hooks.started(payload["i"])

        # The worker process's own SIGTERM handler calls stop(), as for every system.
        worker = engine.worker(concurrency=args.concurrency, install_signal_handlers=False)
        return _SkiplockWorker(store, worker)
