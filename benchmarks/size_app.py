"""The web app ``benchmarks.size`` measures, served by uvicorn in a process of its own:
``uvicorn --factory benchmarks.size_app:create_app`` with ``SKIPLOCK_SIZE_DSN`` set.

One FastAPI app over one ``AsyncEngine`` (psycopg, the ``bench`` schema, the store's
default pool of 10 connections), mounted as docs/dashboard.md, docs/rest.md and
docs/metrics.md show: the dashboard at ``/admin``, the REST admin API at ``/api``
and the metrics at ``/internal/metrics`` (cache off: every scrape reads the store).
The authorization hook lets everyone in, as ``bench``.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from benchmarks._scenarios import SCHEMA
from skiplock import AsyncEngine, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.contrib.prometheus import PrometheusMetrics
from skiplock.integrations.fastapi import (
    create_dashboard_router,
    create_metrics_router,
    create_router,
    mount,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from skiplock.integrations.rest import Permission, Request

DSN_VARIABLE = "SKIPLOCK_SIZE_DSN"


def allow_all(request: Request, permission: Permission) -> str:
    """The benchmark's authorization hook: everyone may read (and write), as ``bench``."""
    return "bench"


def create_app() -> FastAPI:
    """The app over the database ``SKIPLOCK_SIZE_DSN`` names."""
    store = AsyncPsycopgJobStore(os.environ[DSN_VARIABLE], schema=SCHEMA)
    engine = AsyncEngine(store, Settings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await store.open()
        try:
            yield
        finally:
            await store.close()

    app = FastAPI(lifespan=lifespan)
    mount(app, create_dashboard_router(engine, authorize=allow_all), prefix="/admin")
    mount(app, create_router(engine, authorize=allow_all), prefix="/api")
    metrics = PrometheusMetrics(registry=CollectorRegistry(), cache_seconds=0)
    mount(app, create_metrics_router(engine, metrics=metrics), prefix="/internal")
    return app
