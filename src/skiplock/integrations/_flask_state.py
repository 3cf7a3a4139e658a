"""What the Flask extension keeps per app, shared by the extension (``flask.py``) and its
``flask skiplock`` commands (``_flask_cli.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import current_app

if TYPE_CHECKING:
    from skiplock.engine import Engine

#: The key of the extension's state in ``app.extensions``.
EXTENSION = "skiplock"


class State:
    """What the extension keeps per app (``app.extensions["skiplock"]``)."""

    def __init__(self, engine: Engine, db: Any) -> None:
        self.engine = engine
        self.db = db


def current_state() -> State:
    """The current app's state; RuntimeError if the extension is not initialised."""
    state = current_app.extensions.get(EXTENSION)
    if not isinstance(state, State):
        raise RuntimeError("Skiplock is not initialised for this app: call init_app(app)")
    return state
