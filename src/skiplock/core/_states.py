"""The job state machine as data (h11 style). Every rule about states lives here."""

from __future__ import annotations

from collections.abc import Mapping

from ._types import Event, JobState

#: (state, event) -> new state. A pair that is absent is illegal.
TRANSITIONS: Mapping[tuple[JobState, Event], JobState] = {}


def transition(state: JobState, event: Event) -> JobState:
    """Return the state after ``event``; raise InvalidTransitionError if not allowed."""
    raise NotImplementedError


def sources(event: Event) -> frozenset[JobState]:
    """States from which ``event`` is legal (stores use it for compare-and-set updates)."""
    raise NotImplementedError
