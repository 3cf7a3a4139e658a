"""The Alembic helper: skiplock's migrations from a revision, autogenerate filters."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from skiplock.adapters._pg import migrations
from skiplock.adapters.sqlalchemy import SessionJobStore
from skiplock.adapters.sqlalchemy.alembic import (
    apply_skiplock_migrations,
    include_name,
    include_object,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sqlalchemy.engine import URL

ALL_MIGRATIONS = [m.name for m in migrations()]


def _app_metadata() -> sa.MetaData:
    """An application's models: one table of its own, none of skiplock's."""
    metadata = sa.MetaData()
    sa.Table("invoices", metadata, sa.Column("id", sa.Integer, primary_key=True))
    return metadata


def _skiplock_tables(diffs: list[Any]) -> list[str]:
    """Names of skiplock tables (and objects of them) that a diff would touch."""
    touched = []
    for diff in diffs:
        for part in diff if isinstance(diff, list) else [diff]:
            for item in part[1:]:
                table = item if isinstance(item, sa.Table) else getattr(item, "table", None)
                if isinstance(table, sa.Table) and table.schema == "skiplock":
                    touched.append(f"{part[0]} {table.name}")
    return touched


# ---- filters, called directly -------------------------------------------------------------


def test_include_name_hides_the_schema_and_what_is_in_it() -> None:
    keep = include_name()
    assert not keep("skiplock", "schema", {})
    assert not keep("jobs", "table", {"schema_name": "skiplock"})
    assert not keep("kind", "column", {"schema_name": "skiplock", "table_name": "jobs"})
    assert keep("public", "schema", {})
    assert keep(None, "schema", {})
    assert keep("jobs", "table", {"schema_name": None})
    assert keep("jobs", "table", {"schema_name": "billing"})


def test_include_name_passes_other_names_to_then() -> None:
    seen: list[str | None] = []

    def then(name: str | None, type_: Any, parent_names: Any) -> bool:
        seen.append(name)
        return name != "legacy"

    keep = include_name("jobs_schema", then=then)
    assert not keep("jobs_schema", "schema", {})
    assert keep("orders", "table", {"schema_name": None})
    assert not keep("legacy", "table", {"schema_name": None})
    assert seen == ["orders", "legacy"]


def test_include_object_skips_tables_and_their_parts_in_the_schema() -> None:
    metadata = sa.MetaData()
    jobs = sa.Table("jobs", metadata, sa.Column("id", sa.Integer), schema="skiplock")
    index = sa.Index("jobs_id_idx", jobs.c.id)
    mine = sa.Table("jobs", metadata, sa.Column("id", sa.Integer))
    keep = include_object()
    assert not keep(jobs, "jobs", "table", True, None)
    assert not keep(jobs.c.id, "id", "column", True, None)
    assert not keep(index, "jobs_id_idx", "index", True, None)
    assert not keep(mine, "jobs", "table", False, jobs)  # compared against skiplock's table
    assert keep(mine, "jobs", "table", False, None)
    assert keep(mine.c.id, "id", "column", False, None)


def test_include_object_passes_other_objects_to_then() -> None:
    metadata = sa.MetaData()
    mine = sa.Table("orders", metadata, sa.Column("id", sa.Integer))
    keep = include_object(then=lambda obj, name, type_, reflected, compare_to: not reflected)
    assert keep(mine, "orders", "table", False, None)
    assert not keep(mine, "orders", "table", True, None)


def test_filters_validate_the_schema_name() -> None:
    with pytest.raises(ValueError, match="Robert"):
        include_name('Robert"); DROP TABLE students;--')


# ---- against a database ---------------------------------------------------------------------


@pytest.mark.postgres
def test_apply_from_a_revision_then_autogenerate_leaves_skiplock_alone(
    make_database: Callable[[], URL],
) -> None:
    engine = sa.create_engine(make_database(), poolclass=sa.NullPool)
    try:
        with engine.begin() as conn:
            op = Operations(MigrationContext.configure(conn))
            assert apply_skiplock_migrations(op) == ALL_MIGRATIONS
        with engine.begin() as conn:
            assert apply_skiplock_migrations(conn) == []  # idempotent
        assert SessionJobStore(engine).check_schema().up_to_date

        with engine.connect() as conn:
            unfiltered = compare_metadata(
                MigrationContext.configure(conn, opts={"include_schemas": True}),
                _app_metadata(),
            )
            filtered = compare_metadata(
                MigrationContext.configure(
                    conn,
                    opts={
                        "include_schemas": True,
                        "include_name": include_name(),
                        "include_object": include_object(),
                    },
                ),
                _app_metadata(),
            )
        # Without the filters autogenerate would drop skiplock's tables ...
        assert "remove_table jobs" in _skiplock_tables(unfiltered)
        # ... with them it only sees the application's own change.
        assert _skiplock_tables(filtered) == []
        assert [d[0] for d in filtered] == ["add_table"]
    finally:
        engine.dispose()


@pytest.mark.postgres
@pytest.mark.anyio
async def test_apply_on_an_asyncpg_engine_through_run_sync(
    make_database: Callable[[], URL],
) -> None:
    # Alembic's async env.py template runs migrations in AsyncConnection.run_sync.
    engine = create_async_engine(make_database().set(drivername="postgresql+asyncpg"))
    try:
        async with engine.begin() as conn:
            applied = await conn.run_sync(
                lambda sync: apply_skiplock_migrations(
                    Operations(MigrationContext.configure(sync)), schema="other"
                )
            )
        assert applied == ALL_MIGRATIONS
        async with engine.connect() as conn:
            tables = await conn.scalars(
                sa.text("SELECT tablename FROM pg_tables WHERE schemaname = 'other'")
            )
            names = sorted(tables)
        assert names == [
            "audit",
            "concurrency_limits",
            "idempotency_keys",
            "job_count_deltas",
            "job_counts",
            "job_finished_minutes",
            "jobs",
            "jobs_archive",
            "limits",
            "maintenance",
            "pauses",
            "purge_runs",
            "queue_samples",
            "rate_buckets",
            "schema_migrations",
            "workers",
        ]
    finally:
        await engine.dispose()


def test_apply_in_offline_mode_says_what_to_do_instead() -> None:
    context = MigrationContext.configure(
        dialect_name="postgresql", opts={"as_sql": True, "output_buffer": io.StringIO()}
    )
    with pytest.raises(RuntimeError, match="skiplock schema sql"):
        apply_skiplock_migrations(Operations(context))


# ---- the opt-in search indexes from a revision (docs/search.md) -----------------------------

#: Alembic's own ``env.py`` reduced to online mode: one connection, Alembic's transaction.
_ENV_PY = """
import sqlalchemy as sa
from alembic import context

engine = sa.create_engine(context.config.get_main_option("sqlalchemy.url"), poolclass=sa.NullPool)
with engine.connect() as connection:
    context.configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
"""

#: A revision applying skiplock's migrations, then one adding the search indexes as
#: docs/search.md has it ("The opt-in search indexes").
_REVISIONS = {
    "a1_skiplock.py": """
from alembic import op
from skiplock.adapters.sqlalchemy.alembic import apply_skiplock_migrations

revision, down_revision, branch_labels, depends_on = "a1", None, None, None

def upgrade():
    apply_skiplock_migrations(op)

def downgrade():
    pass
""",
    "a2_search_indexes.py": """
from alembic import op
from skiplock.adapters.psycopg import search_index_sql

revision, down_revision, branch_labels, depends_on = "a2", "a1", None, None

def upgrade():
    with op.get_context().autocommit_block():
        for statement in search_index_sql("payload"):
            op.execute(statement)
        for statement in search_index_sql("error", create_extension=True):
            op.execute(statement)

def downgrade():
    with op.get_context().autocommit_block():
        for name in ("error", "payload"):
            for statement in search_index_sql(name, drop=True):
                op.execute(statement)
""",
}


def _alembic_config(folder: Path, url: URL) -> Config:
    """An Alembic project in ``folder`` (env.py and the two revisions) on ``url``."""
    (folder / "versions").mkdir()
    (folder / "env.py").write_text(_ENV_PY)
    for name, text in _REVISIONS.items():
        (folder / "versions" / name).write_text(text)
    config = Config()
    config.set_main_option("script_location", str(folder))
    config.set_main_option("sqlalchemy.url", url.render_as_string(hide_password=False))
    return config


@pytest.mark.postgres
def test_a_revision_adds_and_drops_the_search_indexes_as_documented(
    make_database: Callable[[], URL], tmp_path: Path
) -> None:
    url = make_database()
    config = _alembic_config(tmp_path, url)
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    store = SessionJobStore(engine)

    def validity() -> dict[str, bool]:
        # Each search index in the schema (by its name there) and whether it is valid.
        return {s.index: s.valid for s in store.search_indexes() if s.present}

    try:
        # Both revisions in one run: the indexes' block commits Alembic's transaction
        # (CREATE INDEX CONCURRENTLY refuses to run in one) and the run goes on after it.
        command.upgrade(config, "head")
        assert validity() == {
            "jobs_payload_search_idx": True,
            "jobs_error_search_idx": True,
        }
        assert [(s.name, s.state) for s in store.search_indexes()] == [
            ("payload", "present"),
            ("error", "present"),
        ]
        with engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT version_num FROM alembic_version")) == "a2"
        command.upgrade(config, "head")  # at head: nothing to run

        command.downgrade(config, "a1")
        assert validity() == {}
        assert [s.state for s in store.search_indexes()] == ["absent", "absent"]
        with engine.connect() as conn:
            assert conn.scalar(sa.text("SELECT version_num FROM alembic_version")) == "a1"
            # The extension stays, as `skiplock schema index drop` leaves it.
            assert conn.scalar(sa.text("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'"))
    finally:
        engine.dispose()
