"""When a worker with held jobs claims again (ClaimPace), on a controlled clock."""

from __future__ import annotations

import pytest

from skiplock.engine._planner import ClaimPace


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
