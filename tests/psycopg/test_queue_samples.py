"""The queue samples folded per bucket in SQL (the ``queue_samples`` query, migration
0017) equal the core's rule (``skiplock.core._history.fold_samples``), on random samples
written straight into the table: minutes with and without the all-kinds row, kinds that
come and go, claims with and without latencies."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import psycopg
import pytest

from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.core._history import ALL_KINDS, QueueSample, fold_samples

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.postgres

START = datetime(2030, 5, 6, 7, 0, tzinfo=UTC)


def _random_samples(seed: int) -> list[QueueSample]:
    rnd = random.Random(seed)
    samples = []
    for minute in range(90):
        if rnd.random() < 0.2:
            continue  # no roll-up ran this minute
        at = START + timedelta(minutes=minute)
        kinds = [k for k in ("a", "b", "c") if rnd.random() < 0.6]
        if rnd.random() < 0.9:
            kinds.append(ALL_KINDS)  # else: a kind row without its minute's sum
        for kind in kinds:
            claims = rnd.choice([0, 0, 3, 40, 200])
            samples.append(
                QueueSample(
                    minute=at,
                    kind=kind,
                    pending=rnd.randrange(100),
                    due=rnd.randrange(50),
                    running=rnd.randrange(5),
                    due_bounded=rnd.random() < 0.1,
                    claims=claims,
                    claim_p50=rnd.uniform(0, 2) if claims else None,
                    claim_p99=rnd.uniform(2, 9) if claims else None,
                )
            )
    return samples


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PsycopgJobStore]:
    with PsycopgJobStore(pg_dsn) as store:
        yield store


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_fold_in_sql_is_the_cores(store: PsycopgJobStore, pg_dsn: str, seed: int) -> None:
    samples = _random_samples(seed)
    with psycopg.connect(pg_dsn, autocommit=True) as conn, conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO skiplock.queue_samples (minute, kind, pending, due, due_bounded,"
            " running, claims, claim_p50, claim_p99) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                (
                    *(s.minute, s.kind, s.pending, s.due, s.due_bounded, s.running),
                    *(s.claims, s.claim_p50, s.claim_p99),
                )
                for s in samples
            ],
        )
    for since, bucket in [
        (START, timedelta(minutes=1)),
        (START, timedelta(minutes=15)),
        (START + timedelta(minutes=3), timedelta(minutes=7)),
        (START - timedelta(hours=1), timedelta(hours=1)),
    ]:
        expected = fold_samples(samples, since, bucket)
        got = store.queue_samples(since, bucket)
        assert [(s.minute, s.kind) for s in got] == [(s.minute, s.kind) for s in expected]
        for mine, theirs in zip(got, expected, strict=True):
            fields = ("pending", "due", "running", "due_bounded", "claims", "claim_p99")
            assert [getattr(mine, f) for f in fields] == [getattr(theirs, f) for f in fields]
            assert mine.claim_p50 == (
                None if theirs.claim_p50 is None else pytest.approx(theirs.claim_p50)
            )
