"""examples/aa_jobs end to end on PostgreSQL: every kind of the AA_JOB spec through the
app's own endpoints, its embedded worker and skiplock's REST API (issue 33).

Retries are fast (settings on top of the app's), and every wait is a condition with a
deadline."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psycopg
import pytest
from fastapi.testclient import TestClient

from examples.aa_jobs.app import create_app
from examples.aa_jobs.jobs import AaJobs, Services, build, make_settings
from examples.aa_jobs.schema import setup
from skiplock import RateLimit

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres

EXAMPLE = Path(__file__).parents[2] / "examples" / "aa_jobs"
FAST = {"backoff_base": 0.05, "backoff_cap": 0.2, "backoff_jitter": 0}
KINDS = ("email_send", "outbox_dispatch", "bulk_import", "virus_scan", "cleanup_jobs")
INDEX_KINDS = ("index_sync", "gin_backfill", "reindex")
ALICE = {"Authorization": "Bearer alice-token"}


@attrs.define
class Harness:
    dsn: str
    jobs: AaJobs

    def client(self) -> TestClient:
        app = create_app(self.jobs, tokens={"alice-token": "alice"}, concurrency=4)
        return TestClient(app)

    def rows(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()

    def value(self, query: str, *params: Any) -> Any:
        return self.rows(query, *params)[0][0]

    def execute(self, *statements: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


@pytest.fixture
def make_aa(make_database: Callable[[], str]) -> Callable[..., Harness]:
    """Harnesses on fresh databases: the app's settings with fast retries, ``changes`` on top."""

    def make(**changes: Any) -> Harness:
        dsn = make_database()
        setup(dsn)
        setup(dsn)  # idempotent
        kinds: dict[str, dict[str, Any]] = {kind: dict(FAST) for kind in KINDS + INDEX_KINDS}
        kinds["email_send"] |= {"timeout": 1, "rate_limit": RateLimit(rps=2, burst=2)}
        kinds["virus_scan"] |= {"timeout": 0.5}
        for kind, overrides in changes.pop("kinds", {}).items():
            kinds[kind] |= overrides
        settings = make_settings(poll_interval=0.05, heartbeat_interval=0.2, kinds=kinds, **changes)
        return Harness(dsn, build(dsn, settings, Services(import_batch=2)))

    return make


@pytest.fixture
def aa(make_aa: Callable[..., Harness]) -> Harness:
    return make_aa()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20) -> Any:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return result


def job(client: TestClient, job_id: int) -> dict[str, Any]:
    answer = client.get(f"/admin/jobs/jobs/{job_id}", headers=ALICE)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def wait_state(client: TestClient, job_id: int, state: str, timeout: float = 20) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        f"job {job_id} {state}",
        lambda: (j := job(client, job_id))["state"] == state and j,
        timeout,
    )
    return found


def ended_job(client: TestClient, job_id: int) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        found = job(client, job_id)
        return found if found["state"] in ("succeeded", "dead") else None

    return check


def onboard(client: TestClient, *tenants: str) -> None:
    for tenant in tenants:
        answer = client.post("/tenants", json={"id": tenant, "name": tenant.title()})
        assert answer.status_code == 201, answer.text
        assert answer.json()["rate_limit"]["email_send"] == {"rps": 5.0, "burst": 10}


def sign_up(client: TestClient, tenant: str, email: str) -> dict[str, int]:
    answer = client.post(f"/tenants/{tenant}/users", json={"email": email})
    assert answer.status_code == 201, answer.text
    body: dict[str, int] = answer.json()
    return body


def switch(client: TestClient, service: str, mode: str) -> None:
    answer = client.put(f"/ops/switches/{service}", json={"mode": mode}, headers=ALICE)
    assert answer.status_code == 200, answer.text


def test_the_example_imports_only_public_api() -> None:
    for path in EXAMPLE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules, names = [node.module], [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                modules, names = [alias.name for alias in node.names], []
            else:
                continue
            for module in modules:
                if module.split(".")[0] == "skiplock":
                    private = [p for p in module.split(".") + names if p.startswith("_")]
                    assert not private, f"{path.name}:{node.lineno} imports {private}"


def test_the_example_stays_small() -> None:
    code = [
        line
        for path in EXAMPLE.glob("*.py")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) < 1000


def test_email_provider_failure_retries_dead_replay_sent_once(aa: Harness) -> None:
    provider = aa.jobs.services.provider
    with aa.client() as client:
        onboard(client, "acme")
        switch(client, "provider", "fail")
        ids = sign_up(client, "acme", "ann@acme.test")
        dead = wait_state(client, ids["email_job"], "dead")
        assert dead["attempts"] == 5
        assert "switch: fail" in dead["last_error"]
        assert provider.calls == 5
        assert not provider.delivered
        assert aa.value("SELECT count(*) FROM aa.email_log") == 0
        # The DLQ view shows it; replay it as an operator.
        dlq = client.get("/admin/jobs/dlq", headers=ALICE).json()["jobs"]
        assert [j["id"] for j in dlq] == [ids["email_job"]]
        switch(client, "provider", "ok")
        assert client.post(f"/admin/jobs/jobs/{ids['email_job']}/retry", headers=ALICE).is_success
        done = wait_state(client, ids["email_job"], "succeeded")
        assert done["result"]["status"] == "sent"
        assert list(provider.delivered.values()) == [1]
        logged = aa.rows("SELECT status, provider_message_id, tenant FROM aa.email_log")
        assert logged == [("sent", done["result"]["provider_message_id"], "acme")]
        assert aa.value("SELECT count(*) FROM aa.audit_log WHERE action = 'email_sent'") == 1
        trail = [(e["action"], e["actor"]) for e in done["audit_trail"]]
        assert trail[0] == ("job_enqueued", "aa-service")
        assert ("job_dlq", dead["claimed_by"]) in trail
        assert ("job_replay", "alice") in trail
        assert trail[-1][0] == "job_done"


def test_a_lost_commit_after_the_provider_answered_sends_no_second_email(aa: Harness) -> None:
    # The first COMMIT of an email_log row fails (a deferred trigger): the provider has
    # sent, the job's transaction (log row and completion) is lost, the job runs again.
    aa.execute(
        "CREATE SEQUENCE aa.lose_once;"
        " CREATE FUNCTION aa.lose_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN IF nextval('aa.lose_once') = 1 THEN RAISE 'commit lost'; END IF;"
        " RETURN NULL; END $$;"
        " CREATE CONSTRAINT TRIGGER lose AFTER INSERT ON aa.email_log"
        " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION aa.lose_commit()"
    )
    provider = aa.jobs.services.provider
    with aa.client() as client:
        onboard(client, "acme")
        ids = sign_up(client, "acme", "bob@acme.test")
        done = wait_state(client, ids["email_job"], "succeeded")
        assert done["attempts"] == 2
        assert "commit lost" in done["errors"][0]["error"]
    assert provider.calls == 2  # asked twice ...
    assert list(provider.delivered.values()) == [1]  # ... sent once
    assert aa.value("SELECT count(*) FROM aa.email_log") == 1


def test_suppressed_recipients_get_nothing(aa: Harness) -> None:
    with aa.client() as client:
        onboard(client, "acme")
        client.post("/tenants/acme/suppressions", json={"email": "no@acme.test"})
        ids = sign_up(client, "acme", "no@acme.test")
        assert wait_state(client, ids["email_job"], "succeeded")["result"]["status"] == "suppressed"
    assert aa.jobs.services.provider.calls == 0
    assert aa.rows("SELECT status FROM aa.email_log") == [("suppressed",)]


def test_outbox_dispatch_retries_dead_replay_delivers_each_event(aa: Harness) -> None:
    webhooks = aa.jobs.services.webhooks
    with aa.client() as client:
        onboard(client, "acme")
        switch(client, "webhooks", "fail")
        ids = [sign_up(client, "acme", f"u{n}@acme.test")["outbox_job"] for n in range(3)]
        # Dispatchers of one tenant share its events (SKIP LOCKED): one that found them all
        # locked by another succeeds with nothing to do; the others use up their attempts.
        ended = [wait_for(f"job {i} to end", ended_job(client, i)) for i in ids]
        dead = [j["id"] for j in ended if j["state"] == "dead"]
        assert dead
        assert all(j["result"] == {"dispatched": 0} for j in ended if j["id"] not in dead)
        assert aa.value("SELECT count(*) FROM aa.outbox_event WHERE status = 'pending'") == 3
        assert not webhooks.received
        switch(client, "webhooks", "ok")
        replay = client.post(
            "/admin/jobs/dlq/retry", json={"kind": ["outbox_dispatch"]}, headers=ALICE
        )
        assert replay.is_success, replay.text
        results = [wait_state(client, job_id, "succeeded")["result"] for job_id in dead]
    assert sum(r["dispatched"] for r in results) == 3
    assert aa.value("SELECT count(*) FROM aa.outbox_event WHERE status = 'dispatched'") == 3
    assert sorted(webhooks.received.values()) == [1, 1, 1]


def test_bulk_import_commits_in_batches_with_progress(aa: Harness) -> None:
    rows = [{"key": f"p{n}", "attributes": {"name": f"part {n}"}} for n in range(5)]
    with aa.client() as client:
        onboard(client, "acme")
        assert client.post("/types/product").status_code == 201
        upload = client.post(
            "/tenants/acme/imports", json={"type_key": "product", "rows": [*rows, {"oops": 1}]}
        ).json()
        done = wait_state(client, upload["job"], "succeeded")
        progress = client.get(f"/imports/{upload['import']}").json()
    assert done["result"] == {"committed": 5, "invalid": 1}
    assert progress == {
        "status": "done",
        "total": 6,
        "committed": 5,
        "invalid": 1,
        "job": upload["job"],
    }
    assert aa.value("SELECT count(*) FROM aa.entity WHERE tenant = 'acme'") == 5


def test_index_built_concurrently_while_writes_continue(aa: Harness) -> None:
    aa.execute(
        "INSERT INTO aa.entity_type VALUES ('product')",
        "INSERT INTO aa.entity (tenant, type_key, key, attributes) SELECT 'acme', 'product',"
        " 'seed' || n, jsonb_build_object('sku', 'sku-' || n) FROM generate_series(1, 200000) n",
    )
    with aa.client() as client, psycopg.connect(aa.dsn, autocommit=True) as writer:
        ids = client.put("/types/product/attributes/sku", json={"searchable": True}).json()
        written = 0
        while job(client, ids["job"])["state"] != "succeeded":  # write on, one row at a time
            writer.execute(
                "INSERT INTO aa.entity (tenant, type_key, key, attributes) VALUES ('acme',"
                " 'product', %s, jsonb_build_object('sku', %s::text, 'at', clock_timestamp()))",
                [f"live{written}", f"live-{written}"],
            )
            written += 1
            assert written < 100_000, "the index job did not finish"
        done = job(client, ids["job"])
        status = client.get("/types/product").json()
    during = aa.value(
        "SELECT count(*) FROM aa.entity WHERE (attributes ->> 'at')::timestamptz"
        " BETWEEN %s::timestamptz AND %s::timestamptz",
        done["started_at"],
        done["completed_at"],
    )
    assert during > 0, "no write committed while the index was built"
    assert status == {"gin_status": "none", "index_status": {"sku": "active"}}
    assert aa.value(
        "SELECT indisvalid FROM pg_index WHERE indexrelid = 'aa.ix_entity_product_sku'::regclass"
    )
    with psycopg.connect(aa.dsn) as conn:  # the rows written during the build are in it
        conn.execute("SET LOCAL enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN SELECT 1 FROM aa.entity WHERE type_key = 'product'"
            " AND (attributes ->> 'sku')::text = %s",
            [f"live-{written - 1}"],
        ).fetchall()
        assert "ix_entity_product_sku" in str(plan)
        found = conn.execute(
            "SELECT count(*) FROM aa.entity WHERE type_key = 'product'"
            " AND (attributes ->> 'sku')::text = %s",
            [f"live-{written - 1}"],
        ).fetchone()
        assert found == (1,)
    assert done["priority"] == -200
    assert done["max_attempts"] == 3


def test_index_drop_and_a_build_that_cannot_succeed(aa: Harness) -> None:
    with aa.client() as client:
        client.post("/types/product")
        client.post("/tenants", json={"id": "acme", "name": "Acme"})
        client.post(
            "/tenants/acme/imports",
            json={"type_key": "product", "rows": [{"key": "a", "attributes": {"size": "large"}}]},
        )
        first = client.put("/types/product/attributes/size", json={"searchable": True}).json()
        wait_state(client, first["job"], "succeeded")
        gone = client.put("/types/product/attributes/size", json={"searchable": False}).json()
        assert wait_state(client, gone["job"], "succeeded")["result"] == "dropped"
        # 'large' does not cast to numeric: three attempts, then failed, nothing left behind.
        wait_for("the import", lambda: aa.value("SELECT count(*) FROM aa.entity") == 1)
        broken = client.put(
            "/types/product/attributes/size", json={"searchable": True, "data_type": "numeric"}
        ).json()
        dead = wait_state(client, broken["job"], "dead")
        assert dead["attempts"] == 3
        assert client.get("/types/product").json()["index_status"] == {"size": "failed"}
    assert aa.value("SELECT to_regclass('aa.ix_entity_product_size')") is None


def test_gin_backfill_and_reindex(aa: Harness) -> None:
    rows = [{"key": f"p{n}", "attributes": {"name": f"bolt {n}"}} for n in range(3)]
    with aa.client() as client:
        onboard(client, "acme")
        client.post("/types/product")
        upload = client.post(
            "/tenants/acme/imports", json={"type_key": "product", "rows": rows}
        ).json()
        wait_state(client, upload["job"], "succeeded")
        backfill = client.put("/types/product/external-source", params={"enabled": True}).json()
        assert wait_state(client, backfill["job"], "succeeded")["result"] == "active"
        assert client.get("/types/product").json()["gin_status"] == "active"
        rebuild = client.post("/tenants/acme/reindex/product").json()
        assert wait_state(client, rebuild["job"], "succeeded")["result"] == {"reindexed": 3}
    definition = aa.value("SELECT pg_get_indexdef('aa.ix_entity_attributes_gin_product'::regclass)")
    assert "gin (attributes jsonb_path_ops)" in definition
    assert "WHERE" in definition
    assert aa.value("SELECT count(*) FROM aa.entity WHERE search_vector @@ 'bolt'::tsquery") == 3


def test_index_builds_on_one_table_run_one_at_a_time(aa: Harness) -> None:
    # index_sync and gin_backfill at the same moment on one table: two concurrent
    # CREATE INDEX CONCURRENTLY deadlock (issue 41). They share the table's concurrency
    # key, so one waits for the other: both succeed at their first attempt, one after
    # the other.
    aa.execute(
        "INSERT INTO aa.entity_type VALUES ('product')",
        "INSERT INTO aa.entity (tenant, type_key, key, attributes) SELECT 'acme', 'product',"
        " 'seed' || n, jsonb_build_object('sku', 'sku-' || n, 'n', n)"
        " FROM generate_series(1, 50000) n",
    )
    # The jobs' started_at and completed_at are their transactions' now(): the second's
    # claim transaction may begin a moment before the first's completion transaction
    # does, and still count the key after that completion committed. So the runs are
    # watched in the table itself: never two running jobs of the key.
    most = 0
    watched = threading.Event()

    def watch() -> None:
        nonlocal most
        with psycopg.connect(aa.dsn, autocommit=True) as conn:
            while not watched.is_set():
                row = conn.execute(
                    "SELECT count(*) FROM skiplock.jobs"
                    " WHERE concurrency_key = 'table:aa.entity' AND status = 'running'"
                ).fetchone()
                most = max(most, row[0] if row else 0)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with aa.client() as client:
            sync = client.put("/types/product/attributes/sku", json={"searchable": True}).json()
            gin = client.put("/types/product/external-source", params={"enabled": True}).json()
            first = wait_state(client, sync["job"], "succeeded", timeout=60)
            second = wait_state(client, gin["job"], "succeeded", timeout=60)
            status = client.get("/types/product").json()
    finally:
        watched.set()
        watcher.join()
    assert status == {"gin_status": "active", "index_status": {"sku": "active"}}
    assert most <= 1, f"{most} builds of one table ran at once"
    assert (first["attempts"], second["attempts"]) == (1, 1)
    assert first["concurrency_key"] == second["concurrency_key"] == "table:aa.entity"


def test_virus_scan_times_out_then_patches_the_attachment(aa: Harness) -> None:
    with aa.client() as client:
        onboard(client, "acme")
        switch(client, "scanner", "stall")
        clean = client.post(
            "/tenants/acme/attachments", json={"name": "a.txt", "content": "hi"}
        ).json()
        wait_for("a timed-out attempt", lambda: job(client, clean["job"])["attempts"] >= 2)
        assert (
            client.get(f"/attachments/{clean['attachment']}").json()["virus_scan_status"]
            == "pending"
        )
        switch(client, "scanner", "ok")
        done = wait_state(client, clean["job"], "succeeded")
        assert "ran longer than 0.5 s" in done["errors"][0]["error"]
        bad = client.post(
            "/tenants/acme/attachments", json={"name": "b.exe", "content": "X5O EICAR"}
        ).json()
        assert wait_state(client, bad["job"], "succeeded")["result"] == "infected"
        statuses = [
            client.get(f"/attachments/{a['attachment']}").json()["virus_scan_status"]
            for a in (clean, bad)
        ]
    assert statuses == ["clean", "infected"]


def test_cleanup_jobs_runs_every_five_minutes(aa: Harness) -> None:
    aa.execute(
        "INSERT INTO aa.tenant VALUES ('acme', 'Acme')",
        "INSERT INTO aa.outbox_event (tenant, topic, body, status, dispatched_at)"
        " VALUES ('acme', 'old', '{}', 'dispatched', now() - interval '8 days')",
    )
    with aa.client() as client:  # the worker's scheduler enqueues the latest tick at start
        found = wait_for(
            "a cleanup job",
            lambda: client.get(
                "/admin/jobs/jobs",
                params={"kind": "cleanup_jobs", "state": "succeeded"},
                headers=ALICE,
            ).json()["jobs"],
        )
        assert found[0]["idempotency_key"].startswith("periodic:cleanup_jobs:")
        assert job(client, found[0]["id"])["result"]["outbox_compacted"] == 1


def test_a_tenant_over_its_limit_while_another_tenants_jobs_run(aa: Harness) -> None:
    # email_send: 2 per second, burst 2, per tenant (the tests' settings).
    with aa.client() as client:
        onboard(client, "big", "small")
        start = time.monotonic()
        big = [sign_up(client, "big", f"b{n}@big.test")["email_job"] for n in range(10)]
        small = [sign_up(client, "small", f"s{n}@small.test")["email_job"] for n in range(2)]
        for job_id in small:
            wait_state(client, job_id, "succeeded")
        elapsed = time.monotonic() - start
        big_sent = aa.value("SELECT count(*) FROM aa.email_log WHERE tenant = 'big'")
        assert big_sent <= 2 + 2 * elapsed + 1
        assert big_sent < 10
        for job_id in big:
            wait_state(client, job_id, "succeeded")
        scrape = client.get("/metrics", headers=ALICE).text
        assert client.get("/metrics").status_code == 401
    for name in (
        "mdm_jobs_pending",
        "mdm_jobs_running",
        "mdm_jobs_dlq",
        "mdm_jobs_claim_latency_seconds_bucket",
        "mdm_jobs_processing_seconds_bucket",
        "mdm_jobs_attempts_total",
    ):
        assert f"\n{name}{{" in scrape, name
    assert (
        aa.jobs.metrics.registry.get_sample_value(
            "mdm_jobs_attempts_total", {"kind": "email_send", "outcome": "succeeded"}
        )
        == 12
    )


def test_the_provider_cap_holds_across_tenants(make_aa: Callable[..., Harness]) -> None:
    # Every tenant may send 50/s, the provider account only 2/s (burst 2), all tenants together.
    kinds = {"email_send": {"rate_limit": RateLimit(rps=50, burst=50)}}
    aa = make_aa(caps={"email_provider": RateLimit(rps=2, burst=2)}, kinds=kinds)
    with aa.client() as client:
        onboard(client, "one", "two")
        start = time.monotonic()
        ids = [
            sign_up(client, t, f"{n}@{t}.test")["email_job"]
            for n in range(4)
            for t in ("one", "two")
        ]
        for job_id in ids:
            wait_state(client, job_id, "succeeded")
        elapsed = time.monotonic() - start
    sent_at = [row[0] for row in aa.rows("SELECT logged_at FROM aa.email_log ORDER BY logged_at")]
    assert sorted({r[0] for r in aa.rows("SELECT tenant FROM aa.email_log")}) == ["one", "two"]
    # 8 e-mails at 2/s after a burst of 2: at least 3 s from the first to the last.
    assert (sent_at[-1] - sent_at[0]).total_seconds() >= 2.5
    assert elapsed >= 2.5


def test_the_worker_entry_point_serves_until_sigterm(aa: Harness) -> None:
    aa.execute("INSERT INTO aa.tenant VALUES ('acme', 'Acme')")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "examples.aa_jobs.worker",
            "--dsn",
            aa.dsn,
            "--kinds",
            "cleanup_jobs",
        ],
        cwd=EXAMPLE.parents[1],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            "the worker's first cleanup tick",
            lambda: aa.rows(
                "SELECT 1 FROM skiplock.jobs WHERE kind = 'cleanup_jobs' AND status = 'succeeded'"
            ),
        )
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, log
    assert "SIGTERM received" in log


def test_admin_surfaces_need_the_token(aa: Harness) -> None:
    with aa.client() as client:
        assert client.get("/admin/jobs/jobs").status_code == 401
        assert client.get("/admin/dashboard/").status_code == 401
        assert client.get("/admin/dashboard/", auth=("alice", "alice-token")).status_code == 200
        assert client.get("/admin/dashboard/", auth=("bob", "alice-token")).status_code == 401
        assert client.put("/ops/switches/provider", json={"mode": "fail"}).status_code == 401
        assert client.get("/readyz").status_code == 200


def test_stalled_provider_pause_and_resume(aa: Harness) -> None:
    provider = aa.jobs.services.provider
    with aa.client() as client:
        onboard(client, "acme")
        switch(client, "provider", "stall")
        first = sign_up(client, "acme", "a@acme.test")["email_job"]
        wait_for("a stalled attempt", lambda: provider.calls >= 1)
        assert client.post("/ops/pause", json={"kind": "email_send"}, headers=ALICE).is_success
        later = [sign_up(client, "acme", f"{n}@acme.test")["email_job"] for n in range(3)]
        # Paused: the stalled attempt times out and nothing is claimed any more.
        wait_for("the stalled attempt to end", lambda: job(client, first)["state"] == "pending")
        calls = provider.calls
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            assert all(job(client, j)["attempts"] == 0 for j in later)
            assert provider.calls == calls
        switch(client, "provider", "ok")
        assert client.post("/ops/resume", json={"kind": "email_send"}, headers=ALICE).is_success
        for job_id in [first, *later]:
            wait_state(client, job_id, "succeeded")
    assert sorted(provider.delivered.values()) == [1, 1, 1, 1]


def test_a_tenant_limit_changed_at_run_time(aa: Harness) -> None:
    with aa.client() as client:
        onboard(client, "big")
        answer = client.put(
            "/tenants/big/limits/email_send", json={"rps": 50, "burst": 50}, headers=ALICE
        )
        assert answer.status_code == 200, answer.text
        start = time.monotonic()
        jobs = [sign_up(client, "big", f"b{n}@big.test")["email_job"] for n in range(10)]
        for job_id in jobs:
            wait_state(client, job_id, "succeeded")
        assert time.monotonic() - start < 2  # the default (2/s, burst 2) would need 4 s


def test_operator_endpoints_answer_bad_input_with_a_4xx_and_change_nothing(aa: Harness) -> None:
    # Issue 41 item 9: these answered 500, or 200 for what did not happen.
    with aa.client() as client:
        onboard(client, "acme")
        blank = client.post("/ops/pause", json={}, headers=ALICE)
        assert blank.status_code == 422, blank.text
        assert blank.json() == {"detail": "a pause names a kind, a tenant or both"}
        typo = client.post("/ops/pause", json={"kind": "emial_send"}, headers=ALICE)
        assert typo.status_code == 422
        assert "Did you mean 'email_send'?" in typo.json()["detail"]
        assert client.get("/ops/paused", headers=ALICE).json() == []
        never = client.post("/ops/resume", json={"kind": "email_send"}, headers=ALICE)
        assert never.status_code == 404
        assert never.json() == {"detail": "no pause of kind=email_send tenant=*"}
        limit = {"rps": 50, "burst": 50}
        nobody = client.put("/tenants/nobody/limits/email_send", json=limit, headers=ALICE)
        assert nobody.status_code == 404
        assert nobody.json() == {"detail": "no tenant 'nobody'"}
        typo = client.put("/tenants/acme/limits/emial_send", json=limit, headers=ALICE)
        assert typo.status_code == 422
        assert "Did you mean 'email_send'?" in typo.json()["detail"]
        stranger = client.post("/tenants/nobody/users", json={"email": "x@nobody.test"})
        assert stranger.status_code == 404
        assert stranger.json() == {"detail": "no tenant 'nobody'"}
    # Nothing was written: no user, no job, no limit, the tenant's metadata as onboarded.
    assert aa.value("SELECT count(*) FROM aa.app_user") == 0
    assert aa.value("SELECT count(*) FROM skiplock.jobs WHERE kind = 'email_send'") == 0
    assert aa.value("SELECT count(*) FROM skiplock.limits") == 0
    assert (
        "emial_send"
        not in aa.value("SELECT metadata FROM aa.tenant WHERE id = 'acme'")["rate_limit"]
    )
