"""The transition table, checked pair by pair."""

from __future__ import annotations

import itertools

import pytest

from skiplock.core import (
    TERMINAL_STATES,
    Event,
    InvalidTransitionError,
    JobState,
    ValidationError,
    check_operator_event,
    sources,
    transition,
)
from skiplock.core._states import TRANSITIONS, legal_events

P, R, S = JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED
F, D, C = JobState.FAILED, JobState.DEAD, JobState.CANCELLED

# Written out independently of the implementation: this is the specification.
EXPECTED: dict[tuple[JobState, Event], JobState] = {
    (P, Event.CLAIM): R,
    (R, Event.SUCCEED): S,
    (R, Event.RETRY): P,
    (R, Event.BURY): D,
    (R, Event.RELEASE): P,
    (R, Event.RECOVER): P,
    (P, Event.CANCEL): C,
    (R, Event.CANCEL): C,
    (P, Event.MARK_FAILED): F,
    (R, Event.MARK_FAILED): F,
    (D, Event.MARK_FAILED): F,
    (C, Event.MARK_FAILED): F,
    (D, Event.REPLAY): P,
    (F, Event.REPLAY): P,
    (C, Event.REPLAY): P,
}

ALL_PAIRS = list(itertools.product(JobState, Event))
LEGAL = [pair for pair in ALL_PAIRS if pair in EXPECTED]
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in EXPECTED]


def test_transitions_table_matches_specification() -> None:
    assert dict(TRANSITIONS) == EXPECTED


def test_transitions_table_is_read_only() -> None:
    with pytest.raises(TypeError):
        TRANSITIONS[(S, Event.REPLAY)] = P  # type: ignore[index]
    assert (S, Event.REPLAY) not in TRANSITIONS


@pytest.mark.parametrize(("state", "event"), LEGAL)
def test_transition_legal_pair_gives_target(state: JobState, event: Event) -> None:
    assert transition(state, event) is EXPECTED[(state, event)]


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_transition_illegal_pair_raises_and_changes_nothing(state: JobState, event: Event) -> None:
    before = state
    with pytest.raises(InvalidTransitionError) as info:
        transition(state, event)
    message = str(info.value)
    assert repr(state.value) in message
    assert repr(event.value) in message
    for allowed in legal_events(state):
        assert allowed.value in message
    if not legal_events(state):
        assert "allowed events: none" in message
    assert state is before
    assert state is JobState(before.value)
    assert dict(TRANSITIONS) == EXPECTED


def test_transition_count_covers_every_pair() -> None:
    assert len(LEGAL) + len(ILLEGAL) == len(JobState) * len(Event)
    assert len(LEGAL) == len(EXPECTED)


@pytest.mark.parametrize("event", list(Event))
def test_sources_agree_with_table(event: Event) -> None:
    assert sources(event) == frozenset(s for (s, e) in EXPECTED if e == event)


@pytest.mark.parametrize("state", list(JobState))
def test_legal_events_agree_with_table(state: JobState) -> None:
    assert legal_events(state) == frozenset(e for (s, e) in EXPECTED if s == state)


def test_sources_cancel_and_mark_failed() -> None:
    assert sources(Event.CANCEL) == {P, R}
    assert sources(Event.MARK_FAILED) == {P, R, D, C}
    assert sources(Event.REPLAY) == {D, F, C}


def test_terminal_states_only_succeeded() -> None:
    assert frozenset({S}) == TERMINAL_STATES
    assert legal_events(S) == frozenset()


def test_transition_failed_only_by_operator_flag() -> None:
    # The engine's own events never lead to ``failed``: it is a manual stop flag only
    # (docs/requirements.md, "States").
    into_failed = {e for (_, e), target in TRANSITIONS.items() if target is F}
    assert into_failed == {Event.MARK_FAILED}


def test_invalid_transition_error_is_skiplock_error() -> None:
    from skiplock.core import SkiplockError

    with pytest.raises(SkiplockError):
        transition(S, Event.CLAIM)


@pytest.mark.parametrize("event", list(Event))
def test_check_operator_event_admits_only_operator_events(event: Event) -> None:
    if event in {Event.CANCEL, Event.MARK_FAILED, Event.REPLAY}:
        assert check_operator_event(event) is event
    else:
        with pytest.raises(ValidationError, match="not an operator event"):
            check_operator_event(event)
