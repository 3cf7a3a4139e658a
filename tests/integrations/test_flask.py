"""Flask end to end on PostgreSQL: the extension (SKIPLOCK_* config, Flask-SQLAlchemy
session sharing), a view that writes a row and enqueues in the request's session (an
error leaves neither, a commit both, and a worker runs the job), and the ``flask
skiplock worker|schema|health`` commands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from flask import Flask, abort, request
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from skiplock import AsyncEngine, Engine, JobContext, Settings, ValidationError
from skiplock.adapters.memory import AsyncInMemoryJobStore, InMemoryJobStore
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.adapters.sqlalchemy import SessionJobStore
from skiplock.integrations.flask import Skiplock, settings_from_config
from tests.pgfixtures import fetch

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

DEADLINE = 20.0
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sqlalchemy_url(dsn: str) -> str:
    return dsn.replace("postgresql://", "postgresql+psycopg://", 1)


# ---- configuration ------------------------------------------------------------------------


def test_skiplock_config_keys_are_the_environment_variables() -> None:
    base = Settings(concurrency=2)
    settings = settings_from_config(
        {
            "SKIPLOCK_CONCURRENCY": 8,
            "SKIPLOCK_POLL_INTERVAL": "250ms",
            "SKIPLOCK_SHUTDOWN_TIMEOUT": timedelta(seconds=12),
            "SKIPLOCK_MAX_ATTEMPTS": "7",
            "SKIPLOCK_TRANSACTIONAL": True,
            "SKIPLOCK_TIMEOUTS": "report.build=30s",
            "SECRET_KEY": "not ours",
        },
        base,
    )
    assert settings == Settings.from_env(
        {
            "SKIPLOCK_CONCURRENCY": "8",
            "SKIPLOCK_POLL_INTERVAL": "250ms",
            "SKIPLOCK_SHUTDOWN_TIMEOUT": "12",
            "SKIPLOCK_MAX_ATTEMPTS": "7",
            "SKIPLOCK_TRANSACTIONAL": "true",
            "SKIPLOCK_TIMEOUTS": "report.build=30s",
        },
        base=base,
    )
    assert (settings.concurrency, settings.max_attempts, settings.shutdown_timeout) == (8, 7, 12)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"SKIPLOCK_CONCURENCY": 4}, "SKIPLOCK_CONCURENCY is not a skiplock setting"),
        ({"SKIPLOCK_DSN": "postgresql://x"}, "SKIPLOCK_DSN is not a skiplock setting"),
        ({"SKIPLOCK_CONCURRENCY": 0}, "SKIPLOCK_CONCURRENCY"),
        ({"SKIPLOCK_CONCURRENCY": "many"}, "SKIPLOCK_CONCURRENCY"),
        ({"SKIPLOCK_CONCURRENCY": [4]}, "SKIPLOCK_CONCURRENCY must be the text"),
    ],
)
def test_bad_config_is_refused_naming_the_key(config: dict[str, Any], message: str) -> None:
    engine = Engine(InMemoryJobStore(), Settings(concurrency=3))
    app = Flask(__name__)
    app.config.update(config)
    with pytest.raises(ValidationError, match=message):
        Skiplock(app, engine=engine)
    assert engine.settings == Settings(concurrency=3)  # left as it was
    assert "skiplock" not in app.extensions


def test_init_app_configures_the_engine_and_keeps_it_per_app() -> None:
    engine = Engine(InMemoryJobStore())
    ext = Skiplock(engine=engine)
    app = Flask(__name__)
    app.config["SKIPLOCK_CONCURRENCY"] = "6"
    ext.init_app(app)
    assert engine.settings.concurrency == 6
    with app.app_context():
        assert ext.engine is engine
        with pytest.raises(RuntimeError, match="no Flask-SQLAlchemy db"):
            _ = ext.connection
        assert ext.enqueue("report.build", {"n": 1}).created  # at once, no db
    assert engine.list_jobs()[0].payload == {"n": 1}
    with pytest.raises(TypeError, match="needs the application's engine"):
        Skiplock(Flask(__name__))
    async_engine = AsyncEngine(AsyncInMemoryJobStore())
    with pytest.raises(TypeError, match="sync skiplock Engine"):
        Skiplock(Flask(__name__), engine=async_engine)  # type: ignore[arg-type]


# ---- transactional enqueue through Flask-SQLAlchemy ------------------------------------------


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "flask_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    confirmed: Mapped[bool] = mapped_column(default=False)


@pytest.fixture
def shop(pg_dsn: str) -> Iterator[tuple[Flask, Engine, SQLAlchemy]]:
    """A Flask app with Flask-SQLAlchemy and the extension sharing its session."""
    db = SQLAlchemy(model_class=Base)
    app = Flask("shop")
    app.config["SQLALCHEMY_DATABASE_URI"] = sqlalchemy_url(pg_dsn)
    db.init_app(app)
    # The store's own engine (its pool for workers and admin calls); enqueues with the
    # request's session run on that session's connection.
    store_engine = create_engine(sqlalchemy_url(pg_dsn))
    jobs = Engine(SessionJobStore(store_engine))
    skiplock = Skiplock(app, engine=jobs, db=db)

    @jobs.processor("order.confirm", transactional=True)
    def confirm(payload: dict[str, int], ctx: JobContext) -> None:
        ctx.session.get(Order, payload["order"]).confirmed = True

    @app.post("/orders/<item>")
    def order(item: str) -> dict[str, int]:
        placed = Order(item=item)
        db.session.add(placed)
        db.session.flush()
        job = skiplock.enqueue("order.confirm", {"order": placed.id})
        if request.args.get("fail"):
            abort(409)
        if request.args.get("crash"):
            raise RuntimeError("after the writes")
        db.session.commit()
        return {"order": placed.id, "job": job.id}

    with app.app_context():
        db.drop_all()
        db.create_all()
    yield app, jobs, db
    with app.app_context():
        db.drop_all()
        db.engine.dispose()
    jobs.store.close()  # its listener's connection; the engine is the app's to dispose
    store_engine.dispose()


@pytest.mark.postgres
def test_a_view_writes_its_row_and_its_job_in_one_transaction(
    shop: tuple[Flask, Engine, SQLAlchemy], pg_dsn: str
) -> None:
    app, jobs, _ = shop
    client = app.test_client()
    app.testing = False  # a crash is a 500, as in production

    def orders() -> list[tuple[Any, ...]]:
        return fetch(pg_dsn, "SELECT item, confirmed FROM public.flask_orders ORDER BY id")

    assert client.post("/orders/desk", query_string={"fail": 1}).status_code == 409
    assert client.post("/orders/desk", query_string={"crash": 1}).status_code == 500
    assert orders() == []
    assert jobs.list_jobs() == []

    reply = client.post("/orders/lamp")
    assert reply.status_code == 200
    assert orders() == [("lamp", False)]
    [job] = jobs.list_jobs()
    body = reply.get_json()
    assert (job.id, job.payload) == (body["job"], {"order": body["order"]})

    assert jobs.worker().run_until_idle() == 1
    assert orders() == [("lamp", True)]
    assert jobs.get_job(job.id).state.value == "succeeded"


# ---- flask skiplock ---------------------------------------------------------------------------


@pytest.mark.postgres
def test_flask_skiplock_schema_and_health(make_database: Any) -> None:
    dsn = make_database()  # empty: no schema yet
    store = PsycopgJobStore(dsn, max_size=2, schema="shop_jobs")
    app = Flask("cli_app")
    Skiplock(app, engine=Engine(store))
    runner = app.test_cli_runner()
    try:
        status = runner.invoke(args=["skiplock", "schema", "status"])
        assert status.exit_code == 1
        assert "not installed" in status.output
        applied = runner.invoke(args=["skiplock", "schema", "apply"])
        assert applied.exit_code == 0, applied.output
        assert "applied 0001" in applied.output
        assert runner.invoke(args=["skiplock", "schema", "status"]).exit_code == 0
        sql = runner.invoke(args=["skiplock", "schema", "sql"])
        assert sql.exit_code == 0
        assert 'CREATE TABLE "shop_jobs".jobs' in sql.output or "shop_jobs" in sql.output
        with app.app_context():
            Skiplock._state().engine.enqueue("report.build", {})
        health = runner.invoke(args=["skiplock", "health", "--json"])
        assert health.exit_code == 1  # a due job and no worker
        report = json.loads(health.output)
        assert report["schema"]["name"] == "shop_jobs"
        assert report["uncovered_kinds"] == ["report.build"]
        assert runner.invoke(args=["skiplock", "health", "--max-dead", "-1"]).exit_code == 2
        helped = runner.invoke(args=["skiplock", "worker", "--help"])
        assert helped.exit_code == 0
        assert "usage: flask skiplock worker" in helped.output
        assert "--concurrency" in helped.output
    finally:
        store.close()


@pytest.mark.postgres
def test_flask_skiplock_schema_index_adds_lists_and_drops(make_database: Any) -> None:
    store = PsycopgJobStore(make_database(), max_size=2, schema="shop_jobs")
    store.apply_schema()
    app = Flask("cli_app")
    Skiplock(app, engine=Engine(store))
    runner = app.test_cli_runner()
    try:
        added = runner.invoke(args=["skiplock", "schema", "index", "add", "payload"])
        assert added.exit_code == 0, added.output
        assert "(jobs_payload_search_idx) built" in added.output
        listed = runner.invoke(args=["skiplock", "schema", "index"])
        assert listed.exit_code == 0, listed.output
        states = {line.split()[0]: line.split()[2] for line in listed.output.splitlines()[2:]}
        assert states == {"payload": "present", "error": "absent"}
        # On the extension's store: its schema, not the default one.
        assert [s.state for s in store.search_indexes()] == ["present", "absent"]
        dropped = runner.invoke(args=["skiplock", "schema", "index", "drop", "payload"])
        assert dropped.exit_code == 0, dropped.output
        assert "(jobs_payload_search_idx) dropped" in dropped.output
    finally:
        store.close()


APP_MODULE = """
import os
from flask import Flask
from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.integrations.flask import Skiplock

jobs = Engine(PsycopgJobStore(os.environ["SHOP_DSN"], max_size=4))

@jobs.processor("report.build")
def build(payload: dict) -> None:
    with open(os.environ["SHOP_MARKER"], "a") as marker:
        marker.write(f"{payload['n']}\\n")

def create_app() -> Flask:
    app = Flask(__name__)
    app.config["SKIPLOCK_POLL_INTERVAL"] = "0.05"
    Skiplock(app, engine=jobs)
    return app
"""


@pytest.mark.postgres
def test_flask_skiplock_worker_runs_jobs_until_sigterm(pg_dsn: str, tmp_path: Path) -> None:
    (tmp_path / "shop_app.py").write_text(textwrap.dedent(APP_MODULE), encoding="utf-8")
    marker = tmp_path / "done.txt"
    store = PsycopgJobStore(pg_dsn, max_size=2)
    try:
        Engine(store).enqueue("report.build", {"n": 7})
    finally:
        store.close()
    env = {
        **os.environ,
        "SHOP_DSN": pg_dsn,
        "SHOP_MARKER": os.fspath(marker),
        "PYTHONPATH": os.pathsep.join([os.fspath(tmp_path), ROOT]),
    }
    command = [
        sys.executable, "-m", "flask", "--app", "shop_app:create_app",
        "skiplock", "worker", "--concurrency", "2",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while not (marker.exists() and marker.read_text().strip() == "7"):
            assert process.poll() is None, process.communicate()[0].decode()
            assert time.monotonic() < deadline, "the job did not run"
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=DEADLINE)[0].decode()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    assert fetch(pg_dsn, "SELECT status FROM skiplock.jobs") == [("succeeded",)]
    assert fetch(pg_dsn, "SELECT count(*) FROM skiplock.workers") == [(0,)]
