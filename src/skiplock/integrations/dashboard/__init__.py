"""The web dashboard, framework-neutral: the FastAPI and Flask bindings serve it.

Pages: the overview (queue depth by kind and state, the oldest pending job's age,
throughput and failures over time, the workers), the dead-letter queue with Retry and
Discard buttons, and each job with its audit trail. Server-rendered HTML, one stylesheet
and one script shipped in the package (the script refreshes the pages' live regions in
place; every page works without it): no build step, nothing loaded from elsewhere.
Needs ``jinja2`` (``pip install 'skiplock[dashboard]'``; Flask has it).

Deny by default: :class:`AsyncDashboard` / :class:`Dashboard` refuse to exist without an
authorization hook, the REST API's (:mod:`skiplock.integrations.rest`: its ``Request``,
``Permission``, ``Forbidden`` and ``NotAuthenticated`` are re-exported here), asked for
``read`` on every page and ``write`` for the buttons; the identity it returns is the audit
actor of a button's change. See docs/dashboard.md.
"""

from __future__ import annotations

from ..rest import (
    AsyncAuthorize,
    Authorize,
    Forbidden,
    NotAuthenticated,
    Permission,
    Request,
    Response,
)
from ._csrf import COOKIE as CSRF_COOKIE
from ._csrf import FIELD as CSRF_FIELD
from ._render import DashboardOptions
from ._views import Dashboard
from ._views_async import PAGES, AsyncDashboard, mount_root

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "PAGES",
    "AsyncAuthorize",
    "AsyncDashboard",
    "Authorize",
    "Dashboard",
    "DashboardOptions",
    "Forbidden",
    "NotAuthenticated",
    "Permission",
    "Request",
    "Response",
    "mount_root",
]
