"""The routes a web door hands its bindings: what each framework mounts, whatever the
door (the REST API, the dashboard).

A binding turns each route into one of its own (a FastAPI route, a Flask URL rule) whose
view converts the framework's request into a :class:`~._http.Request`, calls
``route.answer`` and sends the :class:`~._http.Response` back: :class:`AsyncRoute`
answers are awaited, :class:`Route` answers are plain calls (an async framework runs them
in its thread pool). The names and paths come from the door, so every binding mounts
the same routes.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ._http import Request, Response
from ._spec import Operation

_PARAMETER = re.compile(r"\{(\w+)\}")


@attrs.frozen(kw_only=True)
class _Mount:
    #: The route's name in its door: an operation id, ``openapi``, a dashboard page.
    name: str
    method: str
    #: Relative to the mount point, parameters in braces (``/jobs/{job_id}``).
    path: str
    #: The REST operation it serves (its OpenAPI description), None for another route.
    operation: Operation[Any] | None = None

    def angle_path(self) -> str:
        """The path with ``<name>`` parameters (Flask's and Django's syntax)."""
        return _PARAMETER.sub(r"<\1>", self.path)


@attrs.frozen(kw_only=True)
class AsyncRoute(_Mount):
    """A route of an async door (``AsyncRestApi``, ``AsyncDashboard``)."""

    answer: Callable[[Request], Awaitable[Response]]


@attrs.frozen(kw_only=True)
class Route(_Mount):
    """A route of a sync door (``RestApi``, ``Dashboard``)."""

    answer: Callable[[Request], Response]
