"""Parameters of the admin role (``skiplock.ports.AdminRole``): operator transitions
and their audit. See ``_rows.py`` for the shared rules."""

from __future__ import annotations

import json
from typing import Any

from skiplock.core import (
    Event,
    operator_action,
    operator_extra,
    sources,
    transition,
)


def apply_params(event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """The transition table's slice for an operator event, as ``sources``/``targets``."""
    allowed = sorted(sources(event))
    return {
        "sources": [s.value for s in allowed],
        "targets": [transition(s, event).value for s in allowed],
        "reset_attempts": reset_attempts,
    }


def operator_audit_params(event: Event, *, reset_attempts: bool) -> dict[str, Any]:
    """The action and extra details of ``apply_audited``."""
    return {
        "action": operator_action(event).value,
        "details": json.dumps(operator_extra(event, reset_attempts=reset_attempts)),
    }
