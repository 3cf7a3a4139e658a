"""The Prometheus scrape endpoint of the FastAPI and Flask bindings (issue 29, point 6):
the queue's gauges with no worker in the process, from a sync or an async engine."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

pytest.importorskip("prometheus_client", reason="needs the prometheus extra")

from fastapi import FastAPI
from fastapi.testclient import TestClient
from flask import Flask
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from skiplock import AsyncEngine, Engine
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.contrib.prometheus import CONTENT_TYPE, PrometheusMetrics
from skiplock.integrations.fastapi import create_metrics_router, mount
from skiplock.integrations.flask import create_metrics_blueprint

if TYPE_CHECKING:
    from collections.abc import Callable


def pending(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.labels["kind"], s.labels["tenant"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "skiplock_jobs_pending"
    }


def up(text: str) -> float:
    [value] = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "skiplock_up"
    ]
    return value


def test_fastapi_async_engine() -> None:
    engine = AsyncEngine(AsyncInMemoryJobStore())
    api = FastAPI()
    mount(api, create_metrics_router(engine, prefix="/ops"))

    @api.post("/enqueue")
    async def enqueue() -> None:
        await engine.enqueue("mail.send", {}, tenant="acme")

    with TestClient(api) as client:
        client.post("/enqueue")
        response = client.get("/ops/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == CONTENT_TYPE
    assert pending(response.text) == {("mail.send", "acme"): 1}
    assert up(response.text) == 1


def sync_engine() -> Engine:
    engine = Engine(InMemoryJobStore())
    engine.enqueue("report.build", {})
    return engine


def fastapi_get(engine: Engine, metrics: PrometheusMetrics | None) -> Callable[[], str]:
    api = FastAPI()
    mount(api, create_metrics_router(engine, metrics=metrics, path="/scrape"))
    client = TestClient(api)
    return lambda: client.get("/scrape").text


def flask_get(engine: Engine, metrics: PrometheusMetrics | None) -> Callable[[], str]:
    app = Flask(__name__)
    app.register_blueprint(create_metrics_blueprint(engine, metrics=metrics, path="/scrape"))
    client = app.test_client()
    return lambda: client.get("/scrape").get_data(as_text=True)


@pytest.mark.parametrize("binding", [fastapi_get, flask_get])
def test_sync_engine(
    binding: Callable[[Engine, PrometheusMetrics | None], Callable[[], str]],
) -> None:
    text = binding(sync_engine(), None)()
    assert pending(text) == {("report.build", ""): 1}


@pytest.mark.parametrize("binding", [fastapi_get, flask_get])
def test_the_engines_own_metrics_gain_the_depths(
    binding: Callable[[Engine, PrometheusMetrics | None], Callable[[], str]],
) -> None:
    metrics = PrometheusMetrics(registry=CollectorRegistry(), cache_seconds=0)
    metrics.job_claimed("report.build", None, 0.2)  # what a worker in this process records
    text = binding(sync_engine(), metrics)()
    assert pending(text) == {("report.build", ""): 1}
    assert 'skiplock_jobs_claim_latency_seconds_count{kind="report.build"} 1.0' in text


def test_metrics_must_be_prometheus_metrics() -> None:
    with pytest.raises(TypeError, match="PrometheusMetrics"):
        create_metrics_router(sync_engine(), metrics=object())  # type: ignore[arg-type]
