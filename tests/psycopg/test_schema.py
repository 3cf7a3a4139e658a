"""Schema files and migrations on a real server (R1, X2)."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from skiplock import cli
from skiplock.adapters._pg import _migrate, latest_version, migrations
from skiplock.adapters.psycopg import (
    AsyncPsycopgJobStore,
    PsycopgJobStore,
    apply_schema,
    schema_sql,
    schema_status,
)
from skiplock.core import (
    ClaimRequest,
    Completion,
    JobState,
    Lease,
    Retry,
    SchemaVersionError,
    Succeeded,
    ValidationError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.postgres

# The catalog as seen through pg_catalog: every object a migration may create, in a form
# that does not depend on OIDs or creation order.
_CATALOG_QUERIES = {
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attnum
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND a.attnum > 0 AND NOT a.attisdropped
          AND c.relkind IN ('r', 'p')
        ORDER BY 1, 7""",
    "relations": """
        SELECT c.relname, c.relkind, c.reloptions
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s ORDER BY 1""",
    "constraints": """
        SELECT cl.relname, co.conname, pg_get_constraintdef(co.oid)
        FROM pg_constraint co
        JOIN pg_class cl ON cl.oid = co.conrelid
        JOIN pg_namespace n ON n.oid = cl.relnamespace
        WHERE n.nspname = %(schema)s ORDER BY 1, 2""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(schema)s ORDER BY 1""",
    "triggers": """
        SELECT t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal ORDER BY 1""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s ORDER BY 1, 2""",
}


#: The name of every migration, in order: what applying to an empty database applies.
ALL_MIGRATIONS = [m.name for m in migrations()]


def catalog(dsn: str, schema: str = "skiplock") -> dict[str, list[tuple[Any, ...]]]:
    """Tables, columns, constraints, indexes, triggers, functions and recorded versions."""
    with psycopg.connect(dsn) as conn:
        dump = {
            name: conn.execute(query, {"schema": schema}).fetchall()
            for name, query in _CATALOG_QUERIES.items()
        }
        dump["versions"] = conn.execute(
            psycopg.sql.SQL("SELECT version, name FROM {}.schema_migrations ORDER BY 1").format(
                psycopg.sql.Identifier(schema)
            )
        ).fetchall()
    return dump


def test_schema_sql_equals_the_migrations_applied_in_order(
    make_database: Callable[[], str],
) -> None:
    migrated, standalone = make_database(), make_database()
    assert apply_schema(migrated) == [m.name for m in migrations()]
    with psycopg.connect(standalone, autocommit=True) as conn:
        conn.execute(schema_sql())
    expected = catalog(migrated)
    assert expected["indexes"], "the catalog dump found nothing"
    assert catalog(standalone) == expected


def migrate_to(dsn: str, version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bring ``dsn`` to schema ``version`` with the migrator of a release whose last
    migration was ``version``."""
    shipped = migrations()[:version]
    with monkeypatch.context() as patch:
        patch.setattr(_migrate, "migrations", lambda: shipped)
        assert apply_schema(dsn) == [m.name for m in shipped]


def upgrade_script(from_version: int, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``skiplock schema sql --from N`` prints."""
    assert cli.main(["schema", "sql", "--from", str(from_version)]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("from_version", range(1, latest_version() + 1))
def test_schema_sql_from_n_upgrades_to_the_fresh_schema(
    make_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    from_version: int,
) -> None:
    """The upgrade script from version N, run as a plain script (no migrator) on a
    database at N, gives the schema and version records of a fresh install."""
    fresh, old = make_database(), make_database()
    apply_schema(fresh)
    migrate_to(old, from_version, monkeypatch)
    assert schema_status(old).pending == tuple(m.name for m in migrations()[from_version:])
    script = upgrade_script(from_version, capsys)
    with psycopg.connect(old, autocommit=True) as conn:
        conn.execute(script)
    assert catalog(old) == catalog(fresh)
    assert schema_status(old).up_to_date


@pytest.mark.parametrize("wrong", ["older", "newer"])
def test_schema_sql_from_n_refuses_a_database_at_another_version(
    make_database: Callable[[], str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    wrong: str,
) -> None:
    """Run on a database not at version N, the script changes nothing: it would skip or
    repeat migrations."""
    dsn = make_database()
    migrate_to(dsn, 2 if wrong == "older" else 4, monkeypatch)
    before = catalog(dsn)
    script = upgrade_script(3, capsys)
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        pytest.raises(psycopg.errors.RaiseException, match=r"is at version [24], not 3"),
    ):
        conn.execute(script)
    assert catalog(dsn) == before


def test_schema_has_every_table_index_and_trigger(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    apply_schema(dsn)
    dump = catalog(dsn)
    tables = {name for name, kind, _ in dump["relations"] if kind == "r"}
    assert tables == {
        "jobs",
        "workers",
        "audit",
        "jobs_archive",
        "maintenance",
        "schema_migrations",
        "job_counts",
        "job_count_deltas",
        "job_finished_minutes",
        "pauses",
        "limits",
        "idempotency_keys",
        "rate_buckets",
        "queue_samples",
        "purge_runs",
        "concurrency_limits",
    }
    indexes = {name for name, _ in dump["indexes"]}
    assert {
        "idempotency_keys_key",
        "idempotency_keys_purged_at_idx",
        "jobs_tenant_idempotency_key_idx",
        "jobs_claim_idx",
        "jobs_running_kind_idx",
        "jobs_running_worker_idx",
        "jobs_succeeded_completed_idx",
        "jobs_idempotency_key_idx",
        "jobs_pending_group_idx",
        "pauses_scope_idx",
        "limits_scope_idx",
    } <= indexes
    claim = dict(dump["indexes"])["jobs_claim_idx"]
    assert "(priority DESC, available_at, id)" in claim
    assert "WHERE (status = 'pending'::text)" in claim
    assert {name for name, _ in dump["triggers"]} == {
        "jobs_notify_insert",
        "jobs_notify_update",
        "jobs_count_insert",
        "jobs_count_update",
        "jobs_count_delete",
        "jobs_count_truncate",
    }
    jobs_options = next(opts for name, _, opts in dump["relations"] if name == "jobs")
    assert "fillfactor=80" in jobs_options
    archive = {col for table, col, *_ in dump["columns"] if table == "jobs_archive"}
    jobs = {col for table, col, *_ in dump["columns"] if table == "jobs"}
    assert archive == jobs | {"archived_at"}


def test_apply_twice_is_a_no_op(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    assert apply_schema(dsn) == ALL_MIGRATIONS
    before = catalog(dsn)
    assert apply_schema(dsn) == []
    assert catalog(dsn) == before


def test_concurrent_applies_apply_once(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    start = threading.Barrier(6)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def apply() -> None:
        start.wait(10)
        try:
            results.append(apply_schema(dsn))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=apply) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(results, key=len) == [[]] * 5 + [ALL_MIGRATIONS]
    assert schema_status(dsn).up_to_date


def test_status_reports_pending_then_applied(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    before = schema_status(dsn)
    assert not before.installed
    assert before.pending == tuple(m.name for m in migrations())
    assert "not installed" in str(before)
    apply_schema(dsn)
    after = schema_status(dsn)
    assert after.installed
    assert after.up_to_date
    assert after.applied == tuple(m.name for m in migrations())
    assert "up to date" in str(after)
    assert latest_version() == len(after.applied)


def test_two_schemas_live_side_by_side(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    assert apply_schema(dsn, schema="tenant_a") == ALL_MIGRATIONS
    assert apply_schema(dsn, schema="tenant_b") == ALL_MIGRATIONS
    assert apply_schema(dsn, schema="tenant_a") == []
    assert catalog(dsn, "tenant_a")["indexes"]
    assert schema_status(dsn).pending  # the default schema is still missing


def test_store_refuses_a_missing_schema(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    store = PsycopgJobStore(dsn)
    try:
        with pytest.raises(SchemaVersionError, match=r"skiplock schema apply --dsn \.\.\."):
            store.open()
        with pytest.raises(SchemaVersionError, match="not installed"):
            store.counts()
    finally:
        store.close()


def test_store_refuses_an_older_schema(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    apply_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Pretend the last migration was never applied.
        conn.execute(
            "DELETE FROM skiplock.schema_migrations WHERE version = %s", [latest_version()]
        )
    store = PsycopgJobStore(dsn)
    try:
        with pytest.raises(
            SchemaVersionError, match=r"older than this code.*`skiplock schema apply --dsn \.\.\.`"
        ):
            store.open()
        with pytest.raises(SchemaVersionError):
            store.check_schema()
        assert store.schema_status().pending == (migrations()[-1].name,)
    finally:
        store.close()


def test_the_due_time_bounds_migration_clamps_rows_written_before(
    make_database: Callable[[], str],
) -> None:
    """0005 adds the due-time CHECK on a table holding rows outside it (plain SQL): they
    move to the nearest bound, keeping what they meant (due at once, or never)."""
    dsn = make_database()
    apply_schema(dsn)
    bounds = migrations()[4]
    assert bounds.name == "0005_available_at_bounds"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Back to the schema before 0005.
        conn.execute("ALTER TABLE skiplock.jobs DROP CONSTRAINT jobs_available_at_check")
        conn.execute("DELETE FROM skiplock.schema_migrations WHERE version = 5")
        for when in ("-infinity", "0044-03-15 BC", "0001-01-02 23:59:59+00", "2030-05-06 UTC"):
            conn.execute(
                "INSERT INTO skiplock.jobs (kind, available_at) VALUES ('early', %s)", [when]
            )
        for when in ("infinity", "20000-01-01 UTC", "9999-12-29 00:00:01+00"):
            conn.execute(
                "INSERT INTO skiplock.jobs (kind, available_at) VALUES ('late', %s)", [when]
            )
    assert apply_schema(dsn) == [bounds.name]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        rows = conn.execute(
            "SELECT kind, available_at::text FROM skiplock.jobs ORDER BY id"
        ).fetchall()
    low, high = "0001-01-03 00:00:00+00", "9999-12-29 00:00:00+00"
    assert rows == [
        ("early", low),
        ("early", low),
        ("early", low),
        ("early", "2030-05-06 00:00:00+00"),
        ("late", high),
        ("late", high),
        ("late", high),
    ]
    with PsycopgJobStore(dsn) as store:
        assert store.check_schema().up_to_date
        # The rows that were due before are due now, and read back.
        jobs = store.claim(ClaimRequest(worker_id="w", limit=10, kinds=frozenset({"early"})))
        assert [job.available_at.year for job in jobs] == [1, 1, 1]


def test_the_results_migration_keeps_jobs_written_before(
    make_database: Callable[[], str],
) -> None:
    """0009 (X5) only adds: jobs from before it read back without a history, and a job
    that was running across the upgrade records its failure and its result."""
    dsn = make_database()
    apply_schema(dsn)
    results = migrations()[8]
    assert results.name == "0009_job_results"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Back to the schema before 0009.
        conn.execute("DROP FUNCTION skiplock.recorded_errors")
        for table in ("jobs", "jobs_archive"):
            conn.execute(
                f"ALTER TABLE skiplock.{table} "
                "DROP COLUMN started_at, DROP COLUMN result, DROP COLUMN errors"
            )
        conn.execute("DELETE FROM skiplock.schema_migrations WHERE version = 9")
        conn.execute(
            "INSERT INTO skiplock.jobs (id, kind, status, claimed_by, claimed_at, attempts, "
            "claims, started, completed_at) VALUES "
            "(1, 'old', 'succeeded', 'w', now(), 1, 1, false, now()), "
            "(2, 'old', 'running', 'w', now(), 1, 1, true, NULL), "
            "(3, 'old', 'running', 'w', now(), 1, 1, true, NULL)"
        )
    assert apply_schema(dsn) == [results.name]
    with PsycopgJobStore(dsn) as store:
        done = store.get(1)
        assert done is not None
        assert (done.state, done.started_at, done.result, done.errors) == (
            JobState.SUCCEEDED,
            None,
            None,
            (),
        )
        failing, returning = (
            Lease(job_id=job_id, worker_id="w", attempt=1, claim=1) for job_id in (2, 3)
        )
        outcomes = [
            Completion(failing, Retry(delay=timedelta(0), error="after the upgrade")),
            Completion(returning, Succeeded(result={"upgraded": True})),
        ]
        assert store.complete(outcomes) == [True, True]
        failed, succeeded = store.get(2), store.get(3)
        assert failed is not None
        assert succeeded is not None
        assert [(e.attempt, e.error) for e in failed.errors] == [(1, "after the upgrade")]
        assert succeeded.result == {"upgraded": True}
        # Running across the upgrade: dated by its current claim, the best known.
        assert failed.started_at is not None
        assert succeeded.started_at == succeeded.claimed_at


def test_store_accepts_a_newer_schema(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    apply_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO skiplock.schema_migrations VALUES (9999, '9999_future')")
    with PsycopgJobStore(dsn) as store:
        status = store.check_schema()
        assert status.unknown == ("9999_future",)
        assert store.counts() == []


def test_store_apply_schema_then_works(make_database: Callable[[], str]) -> None:
    dsn = make_database()
    store = PsycopgJobStore(dsn, schema="fresh")
    try:
        assert store.apply_schema() == ALL_MIGRATIONS
        assert store.check_schema().up_to_date
        assert store.counts() == []
    finally:
        store.close()


_BAD_NAMES = [
    'x"; DROP TABLE jobs; --',
    "Public",
    "a-b",
    "1abc",
    "",
    "x" * 64,
    "skiplock\n",
    "ünïcode",
]


@pytest.mark.parametrize("name", _BAD_NAMES)
def test_schema_name_injection_is_rejected(pg_dsn: str, name: str) -> None:
    before = _schemas(pg_dsn)
    with pytest.raises(ValidationError, match="invalid identifier"):
        apply_schema(pg_dsn, schema=name)
    with pytest.raises(ValidationError, match="invalid identifier"):
        schema_sql(name)
    with pytest.raises(ValidationError, match="invalid identifier"):
        schema_status(pg_dsn, schema=name)
    with pytest.raises(ValidationError, match="invalid identifier"):
        PsycopgJobStore(pg_dsn, schema=name)
    with pytest.raises(ValidationError, match="invalid identifier"):
        AsyncPsycopgJobStore(pg_dsn, schema=name)
    assert _schemas(pg_dsn) == before
    assert "skiplock" in before


def _schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
    return {name for (name,) in rows}


def test_schema_sql_uses_the_given_schema_everywhere() -> None:
    ddl = schema_sql("elsewhere")
    assert '"elsewhere".jobs' in ddl
    assert '"skiplock"' not in ddl
    assert "skiplock_jobs" not in ddl
    assert "'elsewhere_jobs'" in ddl  # the NOTIFY channel
    assert ddl.strip().startswith("--")
    assert "BEGIN;" in ddl
    assert ddl.rstrip().endswith("COMMIT;")


def test_health_of_a_schema_without_the_running_totals_reports_it(
    make_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a schema older than migration 0011 the health report names the migrations to
    apply and lists the workers; it has no queues (and no error reading them)."""
    from skiplock.adapters._pg._rows_reads import COUNTS_MIGRATION

    dsn = make_database()
    migrate_to(dsn, COUNTS_MIGRATION - 1, monkeypatch)
    store = PsycopgJobStore(dsn)  # not opened: opening refuses an older schema
    try:
        snapshot = store.health_snapshot()
    finally:
        store.close()
    assert snapshot.queues == ()
    assert snapshot.schema is not None
    assert snapshot.schema.pending[0] == migrations()[COUNTS_MIGRATION - 1].name


def test_health_workers_is_one_query_whose_worker_columns_the_version_chooses() -> None:
    """The columns migration 0021 added to workers are a fragment of ``health_workers``
    chosen by the schema's version: NULLs before it, the columns from it on."""
    from skiplock.adapters._pg._sql import queries, versioned_query

    current = versioned_query("health_workers", "skiplock", "pyformat", latest_version())
    assert current == queries("skiplock", "pyformat")["health_workers"]
    assert "w.slots, w.version, w.request" in current.text
    older = versioned_query("health_workers", "skiplock", "pyformat", 20)
    assert "NULL::integer AS slots" in older.text
    assert "w.slots" not in older.text
    assert versioned_query("health_workers", "skiplock", "pyformat", 21) == current


def test_health_of_a_schema_before_the_worker_requests_lists_its_workers(
    make_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a schema older than migration 0021 the workers are listed without the columns
    it added (no slots, version or request)."""
    dsn = make_database()
    migrate_to(dsn, 20, monkeypatch)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO skiplock.workers (id, host, pid) VALUES ('w-old', 'h', 7)")
    store = PsycopgJobStore(dsn)  # not opened: opening refuses an older schema
    try:
        snapshot = store.health_snapshot()
    finally:
        store.close()
    [worker] = snapshot.workers
    assert (worker.id, worker.host, worker.pid, worker.running) == ("w-old", "h", 7, 0)
    assert (worker.slots, worker.version, worker.request) == (None, None, None)


def test_claim_candidates_still_answers_the_previous_releases_call(
    make_database: Callable[[], str],
) -> None:
    # A worker of the release before migration 0014 names the parameters it knows:
    # excluded_tenants must stay optional so it keeps claiming during a rolling upgrade.
    dsn = make_database()
    apply_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO skiplock.jobs (kind, payload) VALUES ('old.kind', '{}'::jsonb)")
        rows = conn.execute(
            "SELECT c.kind FROM skiplock.claim_candidates("
            "batch => 5, only_kinds => NULL, excluded_kinds => '{}', only_tenants => NULL,"
            " excluded_pair_kinds => '{}', excluded_pair_tenants => '{}',"
            " capped_kinds => '{}', caps => '{}', pair_kinds => '{}', pair_tenants => '{}',"
            " pair_caps => '{}') AS c"
        ).fetchall()
    assert rows == [("old.kind",)]


def test_list_job_page_still_answers_the_previous_releases_call(
    make_database: Callable[[], str],
) -> None:
    # The operator reads of the release before migration 0022 (the search) call the
    # page function with their fourteen arguments: it answers as before, without a search.
    dsn = make_database()
    apply_schema(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO skiplock.jobs (kind, payload) VALUES ('old.kind', '{}')")
        rows = conn.execute(
            "SELECT p.id, p.resume_after FROM skiplock.list_job_page("
            "NULL::bigint[], NULL::text[], ARRAY['old.kind'], NULL::text[], NULL::int,"
            " NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz,"
            " NULL::timestamptz, NULL::bigint, 10::bigint, false, 200::bigint) AS p"
        ).fetchall()
    assert [row[1] for row in rows] == [None]
    assert rows[0][0] is not None


def test_the_queue_history_migration_counts_the_finished_minutes_per_kind(
    make_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """0017 rebuilds the folded finished minutes per kind from the jobs minus the deltas
    not yet folded: after it, throughput per kind equals a recount, folded or not."""
    history = migrations()[16]
    assert history.name == "0017_queue_history"
    dsn = make_database()
    migrate_to(dsn, 16, monkeypatch)
    insert = (
        "INSERT INTO skiplock.jobs (kind, status, attempts, claimed_at, completed_at) "
        "SELECT k, s, 1, now() - interval '10 minutes', now() - i * interval '1 minute' "
        "FROM generate_series(1, %s) AS i, unnest(%s::text[]) AS k, "
        "unnest(ARRAY['succeeded', 'dead']) AS s"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(insert, [5, ["mail", "scan"]])
        conn.execute("SELECT skiplock.roll_up_job_counts(1)")  # folded
        conn.execute(insert, [3, ["mail", "index"]])  # left as deltas
    assert apply_schema(dsn)[0] == history.name  # and any migration after it
    recount = (
        "SELECT date_bin('1 minute', completed_at, %(since)s), kind, status, count(*) "
        "FROM skiplock.jobs WHERE completed_at >= %(since)s GROUP BY 1, 2, 3"
    )
    read = "SELECT * FROM skiplock.finished_kind_counts(%(since)s, interval '1 minute')"
    with psycopg.connect(dsn, autocommit=True) as conn:
        [(since,)] = conn.execute(
            "SELECT date_bin('1 minute', now(), 'epoch') - interval '1 hour'"
        ).fetchall()
        expected = sorted(conn.execute(recount, {"since": since}).fetchall())
        assert {row[1] for row in expected} == {"mail", "scan", "index"}
        assert sorted(conn.execute(read, {"since": since}).fetchall()) == expected
        conn.execute("SELECT skiplock.roll_up_job_counts(1)")
        assert sorted(conn.execute(read, {"since": since}).fetchall()) == expected
        [(deltas,)] = conn.execute("SELECT count(*) FROM skiplock.job_count_deltas").fetchall()
        assert deltas == 0


def test_the_concurrency_keys_migration_keeps_jobs_written_before(
    make_database: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """0018 adds the keys: the jobs written before have none and are claimed as before;
    the table refuses a key without a limit (plain SQL), and keyed jobs written after it
    run one at a time per key."""
    keys = migrations()[17]
    assert keys.name == "0018_concurrency_keys"
    dsn = make_database()
    migrate_to(dsn, 17, monkeypatch)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO skiplock.jobs (kind, payload) SELECT 'old', to_jsonb(n)"
            " FROM generate_series(1, 3) n"
        )
    assert apply_schema(dsn)[0] == keys.name
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO skiplock.jobs (kind, concurrency_key) VALUES ('plain', 'k')")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(
                "INSERT INTO skiplock.jobs (kind, concurrency_key, concurrency_limit)"
                " VALUES ('plain', '', 1)"
            )
        conn.execute(
            "INSERT INTO skiplock.jobs (kind, concurrency_key, concurrency_limit)"
            " VALUES ('new', 'table:t', 1), ('new', 'table:t', 1)"
        )
    store = PsycopgJobStore(dsn)
    try:
        claimed = store.claim(ClaimRequest(worker_id="w", limit=10))
        assert sorted(job.kind for job in claimed) == ["new", "old", "old", "old"]
        assert [job.concurrency_key for job in claimed if job.kind == "old"] == [None] * 3
        assert store.claim(ClaimRequest(worker_id="w2", limit=10)) == []
    finally:
        store.close()
