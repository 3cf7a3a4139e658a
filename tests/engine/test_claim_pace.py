"""When a worker with held jobs claims again, and how many it holds (ClaimPace), on a
controlled clock."""

from __future__ import annotations

import pytest

from skiplock.engine.worker._planner import ClaimPace


class Now:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def paced(prefetch: int, *, claim_took: float, handled: int = 0) -> tuple[ClaimPace, Now]:
    now = Now()
    pace = ClaimPace(prefetch, now=now)
    pace.sent()
    now.t += claim_took
    pace.returned(handled)
    return pace, now


@pytest.mark.parametrize(("prefetch", "point"), [(64, 48), (16, 12), (4, 2), (2, 0)])
def test_without_a_measurement_it_claims_once_a_quarter_of_the_buffer_is_used(
    prefetch: int, point: int
) -> None:
    pace = ClaimPace(prefetch, now=Now())
    assert pace.claim_point(0) == point
    assert pace.due(point, 0)
    assert not pace.due(point + 1, 0)


def test_an_empty_buffer_always_claims() -> None:
    pace, now = paced(64, claim_took=0.002)
    now.t += 0.001
    assert pace.claim_point(0) == 2  # nothing finished since: no hurry
    assert pace.due(0, 0)
    assert not pace.due(3, 0)


def test_held_jobs_need_to_last_three_round_trips_at_the_current_rate() -> None:
    pace, now = paced(64, claim_took=0.002, handled=10)
    now.t += 0.010
    # 10 jobs in 10 ms: 1,000 jobs/s; 3 x 1,000/s x 2 ms = 6 jobs.
    assert pace.claim_point(20) == 6
    assert pace.due(6, 20)
    assert not pace.due(7, 20)


def test_the_claim_point_stays_between_two_and_a_quarter_of_the_buffer() -> None:
    fast, now = paced(64, claim_took=0.005)
    now.t += 0.001
    assert fast.claim_point(100) == 48  # 100,000 jobs/s would need 1,500
    slow, now = paced(64, claim_took=0.001)
    now.t += 1.0
    assert slow.claim_point(1) == 2  # 1 job/s needs a fraction of one


def test_the_round_trip_is_a_moving_average_of_the_claims() -> None:
    pace, now = paced(1000, claim_took=0.010)
    pace.sent()
    now.t += 0.002
    pace.returned(0)
    now.t += 1.0
    # 0.010 + 0.25 x (0.002 - 0.010) = 8 ms; 3 x 900 jobs/s x 8 ms = 21.6.
    assert pace.claim_point(900) == 22


def test_no_time_elapsed_since_the_last_claim_keeps_the_highest_point() -> None:
    pace, _ = paced(64, claim_took=0.0)  # a clock that did not move (a coarse one)
    assert pace.claim_point(5) == 48


def claims(pace: ClaimPace, now: Now, *, took: float, every: float, handled: list[int]) -> None:
    """Claims that each take ``took`` seconds, returned ``every`` seconds apart, with
    ``handled[i]`` jobs handled by the i-th return."""
    for count in handled:
        now.t += every - took
        pace.sent()
        now.t += took
        pace.returned(count)


def test_a_set_prefetch_is_the_buffer_whatever_the_rate() -> None:
    pace = ClaimPace(16, now=(now := Now()))
    claims(pace, now, took=0.001, every=0.01, handled=[0, 1000, 2000, 3000])
    assert pace.buffer() == 16  # 100,000 jobs/s: no ceiling, no growth
    assert pace.claim_point(3000) == 12


def test_without_a_rate_the_buffer_is_the_prefetch() -> None:
    pace = ClaimPace(16, ceiling=256, now=(now := Now()))
    assert pace.buffer() == 16
    claims(pace, now, took=0.001, every=0.01, handled=[0])  # one return: no rate yet
    assert pace.buffer() == 16


# Durations that are exact in binary (2**-10 s is about 1 ms, 2**-6 s about 16 ms), so
# the products below are exact too.
MS = 2.0**-10
TICK = 2.0**-6


def test_the_buffer_holds_what_finishes_in_32_round_trips_within_its_bounds() -> None:
    pace = ClaimPace(16, ceiling=256, now=(now := Now()))
    # 20 jobs between returns one TICK apart: 1,280 jobs/s; 32 x 1,280/s x MS = 40 jobs.
    claims(pace, now, took=MS, every=TICK, handled=[0, 20])
    assert pace.buffer() == 40
    # Its claim point is a quarter of it used up (30), or three round trips at the
    # rate now: 3 x 1,280/s x MS = 3.75.
    now.t += TICK / 2
    assert pace.claim_point(30) == 4
    # 25,600 jobs/s would want 800: the ceiling.
    fast = ClaimPace(16, ceiling=256, now=(now := Now()))
    claims(fast, now, took=MS, every=TICK, handled=[0, 400])
    assert fast.buffer() == 256
    assert fast.claim_point(400) == 192  # a quarter of the ceiling used up, at most
    # 64 jobs/s want 2: the prefetch.
    slow = ClaimPace(16, ceiling=256, now=(now := Now()))
    claims(slow, now, took=MS, every=TICK, handled=[0, 1])
    assert slow.buffer() == 16


def test_the_rate_that_sizes_the_buffer_is_a_moving_average() -> None:
    pace = ClaimPace(16, ceiling=256, now=(now := Now()))
    claims(pace, now, took=MS, every=TICK, handled=[0, 20])  # 1,280 jobs/s
    assert pace.buffer() == 40
    # A return with nothing finished since (an idle worker polling) pulls the rate down
    # by a quarter of the difference, to 960 jobs/s; a long idle stretch to the floor.
    claims(pace, now, took=MS, every=TICK, handled=[20])
    assert pace.buffer() == 30  # 32 x 960/s x MS
    claims(pace, now, took=MS, every=1.0, handled=[20] * 10)
    assert pace.buffer() == 16
    # Jobs that finish together after a long wait (16 slow ones) barely move it.
    claims(pace, now, took=MS, every=10.0, handled=[36])
    assert pace.buffer() == 16
