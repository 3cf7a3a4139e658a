"""The app of the uvicorn acceptance test (``test_fastapi_lifespan.py``), served by a real
``python -m uvicorn tests.integrations.uvicorn_app:app`` in a subprocess.

An embedded worker in a FastAPI lifespan composed with the app's own (the store outlives
the worker). Its one processor runs until the worker drains (uvicorn got SIGTERM) and
the test then releases it by creating a file, so the job is surely running at SIGTERM
and surely still running during the drain. The database and the marker folder come from
the environment.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from skiplock import AsyncEngine, JobContext, Settings
from skiplock.adapters.psycopg import AsyncPsycopgJobStore
from skiplock.integrations.fastapi import worker_lifespan

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

DSN = os.environ["SKIPLOCK_UVICORN_TEST_DSN"]
MARKERS = Path(os.environ["SKIPLOCK_UVICORN_TEST_MARKERS"])
#: Seconds the processor waits for each condition before it fails (the test gives up first).
DEADLINE = 60.0

store = AsyncPsycopgJobStore(DSN)
engine = AsyncEngine(store, Settings(shutdown_timeout=30, poll_interval=0.1))
jobs = worker_lifespan(engine, concurrency=2)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with store, jobs(app):  # the worker stops first, then the store closes
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health() -> dict[str, str]:
    worker = jobs.worker
    return {"worker": "none" if worker is None else worker.state}


@app.post("/jobs")
async def enqueue() -> dict[str, int]:
    return {"id": (await engine.enqueue("hold", {})).id}


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


def draining() -> bool:
    worker = jobs.worker
    return worker is not None and worker.state == "draining"


@engine.processor("hold")
async def hold(payload: Any, ctx: JobContext) -> None:
    (MARKERS / "started").touch()
    await wait_for(draining, "the worker to drain")
    (MARKERS / "draining").touch()
    await wait_for((MARKERS / "release").exists, "the test's release")
