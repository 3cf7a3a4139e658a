"""Changing a payload type across a rolling deploy (docs/keys.md, "Changing a payload
type"): a field added with a default reads the jobs enqueued before it, a payload with a
field the worker's type does not know is decoded without it, and a required field added
at once sends the old jobs to ``dead``, from where ``retry_dead`` replays them once a
worker that reads them is deployed."""

from __future__ import annotations

import dataclasses
from typing import Any

import attrs
import pydantic
import pytest

from skiplock import Engine, JobState
from skiplock.adapters.memory import InMemoryJobStore


@attrs.frozen
class WelcomeV1:
    user_id: int


@attrs.frozen
class WelcomeV2:
    user_id: int
    locale: str = "en"  # added in release 2: a default, so release 1's jobs still read


@dataclasses.dataclass(frozen=True)
class WelcomeV2Dataclass:
    user_id: int
    locale: str = "en"


class WelcomeV2Model(pydantic.BaseModel):
    user_id: int
    locale: str = "en"


@attrs.frozen
class WelcomeV2Required:
    user_id: int
    locale: str  # added without a default: release 1's jobs cannot be read


def _run(payload_type: type[Any], payloads: list[dict[str, Any]]) -> tuple[list[Any], Engine]:
    """Enqueue ``payloads`` as stored JSON (what an older or newer release wrote), then run
    a worker whose processor takes ``payload_type``; what it received, and the engine."""
    engine = Engine(InMemoryJobStore())
    received: list[Any] = []

    def welcome(payload: object) -> None:
        received.append(payload)

    welcome.__annotations__["payload"] = payload_type  # the release's type, as if written
    engine.processor("email.welcome")(welcome)

    for payload in payloads:
        engine.enqueue("email.welcome", payload)
    engine.worker().run_until_idle()
    return received, engine


@pytest.mark.parametrize(
    ("payload_type", "expected"),
    [
        (WelcomeV2, WelcomeV2(7, "en")),
        (WelcomeV2Dataclass, WelcomeV2Dataclass(7, "en")),
        (WelcomeV2Model, WelcomeV2Model(user_id=7, locale="en")),
    ],
)
def test_a_field_added_with_a_default_reads_the_old_jobs(
    payload_type: type[Any], expected: object
) -> None:
    received, engine = _run(payload_type, [{"user_id": 7}])
    assert received == [expected]
    assert [job.state for job in engine.list_jobs()] == [JobState.SUCCEEDED]


def test_an_old_worker_reads_a_new_payload_without_the_field_it_does_not_know() -> None:
    received, _ = _run(WelcomeV1, [{"user_id": 7, "locale": "fr"}])
    assert received == [WelcomeV1(7)]


def test_a_required_field_buries_the_old_jobs_and_retry_dead_replays_them() -> None:
    engine = Engine(InMemoryJobStore())
    received: list[object] = []

    @engine.processor("email.welcome", max_attempts=5)
    def strict(payload: WelcomeV2Required) -> None:
        received.append(payload)

    old = engine.enqueue("email.welcome", {"user_id": 7}).id
    engine.worker().run_until_idle()
    job = engine.get_job(old)
    assert job.state is JobState.DEAD
    assert job.attempts == 1  # no retries: the payload would never decode
    assert "locale" in (job.last_error or "")
    assert received == []

    # The fix: a release whose type reads the old jobs (a default), then the replay.
    fixed = Engine(engine.store)

    @fixed.processor("email.welcome")
    def lenient(payload: WelcomeV2) -> None:
        received.append(payload)

    assert fixed.retry_dead(kind="email.welcome") == [old]
    fixed.worker().run_until_idle()
    assert fixed.get_job(old).state is JobState.SUCCEEDED
    assert received == [WelcomeV2(7, "en")]
