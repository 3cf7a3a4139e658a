"""Pieces of the SQLAlchemy adapter that need no database."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.ext.asyncio import create_async_engine

from skiplock.adapters._pg._sql import convert
from skiplock.adapters.asyncpg import AsyncpgNotifier
from skiplock.adapters.psycopg import AsyncPsycopgNotifier, PsycopgNotifier
from skiplock.adapters.sqlalchemy import AsyncSessionJobStore, SessionJobStore
from skiplock.adapters.sqlalchemy._common import (
    asyncpg_connect_kwargs,
    psycopg_conninfo,
    run_copy,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

_URL = "postgresql+{}://app:s%40cret@db.invalid:6543/shop?application_name=web"


def test_psycopg_conninfo_keeps_the_url_parameters_and_password() -> None:
    engine = sa.create_engine(_URL.format("psycopg"))
    info = conninfo_to_dict(psycopg_conninfo(engine.dialect, engine.url))
    assert info == {
        "host": "db.invalid",
        "port": "6543",
        "user": "app",
        "password": "s@cret",
        "dbname": "shop",
        "application_name": "web",
    }


def test_asyncpg_connect_kwargs_drop_sqlalchemy_only_options() -> None:
    engine = create_async_engine(_URL.format("asyncpg") + "&prepared_statement_cache_size=0")
    kwargs = asyncpg_connect_kwargs(engine.dialect, engine.url)
    assert kwargs["host"] == "db.invalid"
    assert kwargs["password"] == "s@cret"
    assert "prepared_statement_cache_size" not in kwargs


def test_notifier_follows_the_engine_driver() -> None:
    store = AsyncSessionJobStore(create_async_engine(_URL.format("asyncpg")), schema="shop")
    notifier = store.notifier()
    assert isinstance(notifier, AsyncpgNotifier)
    assert notifier.channel == "shop_jobs"
    store = AsyncSessionJobStore(create_async_engine(_URL.format("psycopg")))
    assert isinstance(store.notifier(), AsyncPsycopgNotifier)
    assert isinstance(
        SessionJobStore(sa.create_engine(_URL.format("psycopg"))).notifier(), PsycopgNotifier
    )


def test_store_needs_a_postgresql_engine() -> None:
    with pytest.raises(ValueError, match="needs PostgreSQL"):
        SessionJobStore(sa.create_engine("sqlite://"))


@pytest.mark.postgres
def test_run_copy_falls_back_to_insert_for_other_drivers(sa_url: URL) -> None:
    engine = sa.create_engine(sa_url, poolclass=sa.NullPool)
    engine.dialect.driver = "elsewhere"  # neither psycopg nor asyncpg: no COPY
    try:
        with engine.begin() as conn:
            run_copy(conn, ("public", "receipts"), ["id", "order_id"], [(1, 10), (2, 20)])
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, order_id FROM receipts ORDER BY id")).all()
        assert [tuple(r) for r in rows] == [(1, 10), (2, 20)]
    finally:
        engine.dispose()


def test_named_style_gives_text_a_bind_for_every_parameter() -> None:
    query = convert("SELECT :a::int[], :b, x::text, :a::int[], '100%'", "named")
    binds = sa.text(query.text).compile().binds
    assert set(binds) == {"a", "b"}
    assert query.params == ("a", "b")
