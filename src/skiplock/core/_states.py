"""The job state machine as data (h11 style). Every rule about states lives here.

``succeeded`` is the only state with no way out. ``dead``, ``failed`` and ``cancelled``
are final for the engine but an operator may replay them (``failed`` is the manual stop
flag: the engine itself never moves a job there).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from ._errors import InvalidTransitionError, ValidationError
from ._types import Event, JobState

if TYPE_CHECKING:
    from collections.abc import Mapping

_P, _R = JobState.PENDING, JobState.RUNNING
_S, _F = JobState.SUCCEEDED, JobState.FAILED
_D, _C = JobState.DEAD, JobState.CANCELLED

#: (state, event) -> new state. A pair that is absent is illegal.
TRANSITIONS: Mapping[tuple[JobState, Event], JobState] = MappingProxyType(
    {
        (_P, Event.CLAIM): _R,
        (_R, Event.SUCCEED): _S,
        (_R, Event.RETRY): _P,
        (_R, Event.BURY): _D,
        (_R, Event.RELEASE): _P,
        (_R, Event.RECOVER): _P,
        (_P, Event.CANCEL): _C,
        (_R, Event.CANCEL): _C,
        (_P, Event.MARK_FAILED): _F,
        (_R, Event.MARK_FAILED): _F,
        (_D, Event.MARK_FAILED): _F,
        (_C, Event.MARK_FAILED): _F,
        (_D, Event.REPLAY): _P,
        (_F, Event.REPLAY): _P,
        (_C, Event.REPLAY): _P,
    }
)

#: States no event leaves.
TERMINAL_STATES: frozenset[JobState] = frozenset(
    s for s in JobState if not any(src == s for src, _ in TRANSITIONS)
)

_SOURCES: Mapping[Event, frozenset[JobState]] = {
    e: frozenset(s for (s, ev) in TRANSITIONS if ev == e) for e in Event
}
_LEGAL: Mapping[JobState, frozenset[Event]] = {
    s: frozenset(ev for (st, ev) in TRANSITIONS if st == s) for s in JobState
}


def transition(state: JobState, event: Event) -> JobState:
    """Return the state after ``event``; raise InvalidTransitionError if not allowed."""
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        allowed = ", ".join(sorted(e.value for e in _LEGAL[state])) or "none"
        raise InvalidTransitionError(
            f"cannot {event.value!r} a job in state {state.value!r} (allowed events: {allowed})"
        ) from None


def sources(event: Event) -> frozenset[JobState]:
    """States from which ``event`` is legal (stores use it for compare-and-set updates)."""
    return _SOURCES[event]


#: Events an operator may apply through admin operations; the others belong to workers.
OPERATOR_EVENTS: frozenset[Event] = frozenset({Event.CANCEL, Event.MARK_FAILED, Event.REPLAY})


def check_operator_event(event: Event) -> Event:
    """Return ``event`` if an operator may apply it, else raise ValidationError."""
    if event not in OPERATOR_EVENTS:
        allowed = ", ".join(sorted(e.value for e in OPERATOR_EVENTS))
        raise ValidationError(f"{event.value!r} is not an operator event (allowed: {allowed})")
    return event


def legal_events(state: JobState) -> frozenset[Event]:
    """Events allowed in ``state`` (empty for a terminal state)."""
    return _LEGAL[state]


#: The operator actions of a front door (the dashboard's buttons, bulk actions) and the
#: event each applies; ``discard`` deletes the job (no event).
OPERATOR_ACTIONS: Mapping[str, Event | None] = MappingProxyType(
    {"retry": Event.REPLAY, "cancel": Event.CANCEL, "fail": Event.MARK_FAILED, "discard": None}
)
#: A running job cannot be deleted (cancel it first): the states ``discard`` acts on.
DISCARDABLE: frozenset[JobState] = frozenset(JobState) - {_R}


def action_states(action: str) -> frozenset[JobState]:
    """The states an operator action (a key of :data:`OPERATOR_ACTIONS`) may change;
    ValidationError for another name."""
    if action not in OPERATOR_ACTIONS:
        allowed = ", ".join(OPERATOR_ACTIONS)
        raise ValidationError(f"{action[:40]!r} is not an operator action (allowed: {allowed})")
    event = OPERATOR_ACTIONS[action]
    return DISCARDABLE if event is None else sources(event)
