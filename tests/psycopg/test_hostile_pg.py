"""Hostile enqueue arguments on PostgreSQL through psycopg (issue 9), in any session time
zone: rejected with nothing written and the caller's transaction usable, or a job that
reads back (also from a session in another zone) and is claimable.

The same property runs on the in-memory store in tests/engine/test_hostile_memory.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from skiplock import Engine
from skiplock.adapters.psycopg import PsycopgJobStore
from tests.hostile import ZONES, Args, check_enqueue, enqueue_args
from tests.pgfixtures import empty_statements, execute

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = pytest.mark.postgres


def _with(kind: str = "hostile.job", payload: Any = None, **fields: Any) -> Args:
    return Args(kind=kind, payload=payload, fields=fields)


def _at(when: datetime) -> Args:
    return _with(available_at=when)


@pytest.fixture
def store_in() -> Iterator[Callable[[str, str], PsycopgJobStore]]:
    """A store per (database, session time zone), closed after the test."""
    stores: dict[tuple[str, str], PsycopgJobStore] = {}

    def get(dsn: str, zone: str) -> PsycopgJobStore:
        if (dsn, zone) not in stores:
            conninfo = psycopg.conninfo.make_conninfo(dsn, options=f"-c TimeZone={zone}")
            stores[dsn, zone] = PsycopgJobStore(conninfo, min_size=1, max_size=2)
        return stores[dsn, zone]

    yield get
    for store in stores.values():
        store.close()


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(args=enqueue_args(), writer=st.sampled_from(ZONES), reader=st.sampled_from(ZONES))
# The cases of the issue: each once wrote a row that could not be read back, or reached
# the driver and aborted the caller's transaction.
@example(_at(datetime.min.replace(tzinfo=timezone(timedelta(hours=1)))), "UTC", "UTC")
@example(_at(datetime(1, 1, 1, tzinfo=UTC)), "America/New_York", "America/New_York")
@example(_at(datetime(1, 1, 3, tzinfo=UTC)), "UTC", "America/New_York")
@example(_at(datetime(9999, 12, 31, 20, tzinfo=UTC)), "UTC", "Asia/Tokyo")
@example(_at(datetime(9999, 12, 29, tzinfo=UTC)), "Etc/GMT+12", "Pacific/Kiritimati")
@example(_at(datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=20)))), "UTC", "UTC")
@example(_with(max_attempts=2**31), "UTC", "UTC")
@example(_with(max_attempts=2**31 - 1), "UTC", "UTC")
@example(_with(delay=timedelta.max), "UTC", "UTC")
@example(_with(delay=1e13), "UTC", "UTC")
@example(_with(tenant="t\ud800"), "UTC", "UTC")
@example(_with(idempotency_key="\udfff"), "UTC", "UTC")
@example(_with(payload={"a": "\x00"}), "UTC", "UTC")
@example(_with(payload=1e300), "UTC", "UTC")
@example(_with(kind="k" * 10_000), "UTC", "UTC")
def test_hostile_enqueue_is_rejected_or_round_trips_in_any_time_zone(
    pg_dsn: str,
    store_in: Callable[[str, str], PsycopgJobStore],
    args: Args,
    writer: str,
    reader: str,
) -> None:
    execute(pg_dsn, empty_statements())
    check_enqueue(Engine(store_in(pg_dsn, writer)), store_in(pg_dsn, reader), args)
