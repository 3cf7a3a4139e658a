"""The opt-in search indexes from Python (docs/search.md, "The opt-in search indexes"):
the store's methods (what a framework's migration calls), and the statements for a
migration tool of one's own. The command line's own tests:
tests/cli/test_cli_search_indexes.py."""

from __future__ import annotations

import psycopg
import pytest

from skiplock.adapters.psycopg import PsycopgJobStore, search_index_sql
from skiplock.core import ValidationError


def test_the_statements_for_a_migration_tool() -> None:
    assert search_index_sql("payload", "my_jobs") == [
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_payload_search_idx ON "my_jobs".jobs'
        " USING gin (payload jsonb_path_ops)"
    ]
    assert search_index_sql("error", create_extension=True) == [
        "CREATE EXTENSION IF NOT EXISTS pg_trgm",
        'CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_error_search_idx ON "skiplock".jobs'
        ' USING gin ("skiplock".job_error_text(last_error, errors) gin_trgm_ops)'
        " WHERE (last_error IS NOT NULL OR errors IS NOT NULL)",
    ]
    assert search_index_sql("error", "my_jobs", drop=True) == [
        'DROP INDEX CONCURRENTLY IF EXISTS "my_jobs".jobs_error_search_idx'
    ]
    with pytest.raises(ValidationError, match="no search index 'names': one of payload, error"):
        search_index_sql("names")
    with pytest.raises(ValidationError, match="invalid identifier"):
        search_index_sql("payload", 'x"; DROP TABLE jobs; --')


@pytest.mark.postgres
def test_the_store_adds_and_drops_on_a_callers_autocommit_connection(pg_dsn: str) -> None:
    store = PsycopgJobStore(pg_dsn)
    try:
        with pytest.raises(ValidationError, match="no search index 'names'"):
            store.add_search_index("names")
        with psycopg.connect(pg_dsn) as conn:  # a transaction: CONCURRENTLY cannot run
            with pytest.raises(ValidationError, match="outside a transaction"):
                store.add_search_index("payload", connection=conn)
            conn.rollback()
            conn.autocommit = True
            assert store.add_search_index("payload", connection=conn)
            assert not store.add_search_index("payload", connection=conn)
            [payload, error] = store.search_indexes(connection=conn)
            assert (payload.state, error.state) == ("present", "absent")
            assert payload.bytes is not None
            assert payload.bytes > 0
            assert store.drop_search_index("payload", connection=conn)
        assert [s.state for s in store.search_indexes()] == ["absent", "absent"]
    finally:
        store.close()
