"""Hostile enqueue arguments on the in-memory store (issue 9): rejected with nothing
written, or a job that reads back and is claimable. The PostgreSQL twin of this property
is tests/psycopg/test_hostile_pg.py."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from skiplock import Engine
from skiplock.adapters.memory import InMemoryJobStore
from tests.hostile import Args, check_enqueue, enqueue_args


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=enqueue_args())
def test_hostile_enqueue_is_rejected_or_round_trips(args: Args) -> None:
    store = InMemoryJobStore()
    check_enqueue(Engine(store), store, args)
