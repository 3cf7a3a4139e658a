"""Flask: the web dashboard as a blueprint.

``create_dashboard_blueprint(engine, authorize=...)``: the web dashboard
(docs/dashboard.md). Needs ``pip install 'skiplock[flask]'`` (Flask ships Jinja2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import timedelta

    from flask import Blueprint

    from skiplock.engine import Engine

    from .dashboard import Authorize

__all__ = ["create_dashboard_blueprint"]


def create_dashboard_blueprint(
    engine: Engine,
    *,
    authorize: Authorize,
    name: str = "skiplock_dashboard",
    url_prefix: str | None = None,
    refresh: int | None = None,
    page_size: int = 50,
    window: timedelta | float = 3600,
    bucket: timedelta | float = 60,
) -> Blueprint:
    """The web dashboard of ``engine`` as a Flask blueprint (docs/dashboard.md).

    Deny by default: ``authorize`` is required (TypeError without it). It is called with
    each request (:class:`~skiplock.integrations.dashboard.Request`, whose ``native`` is
    Flask's ``request``) and the :class:`~skiplock.integrations.dashboard.Permission` it
    needs, ``read`` for a page and ``write`` for the Retry and Discard buttons; it
    returns the caller's identity (the audit actor of a button's change), None for a
    401, or raises :class:`~skiplock.integrations.dashboard.Forbidden` for a 403.
    Register it with ``app.register_blueprint(bp, url_prefix="/admin/dashboard")``;
    route names are ``<name>.<page>`` (``overview``, ``dead``, ``job``, ``retry``,
    ``delete``, ``static``). The other options are
    :class:`~skiplock.integrations.dashboard.Dashboard`'s.
    """
    from .dashboard._flask import create_blueprint

    return create_blueprint(
        engine,
        authorize=authorize,
        name=name,
        url_prefix=url_prefix,
        refresh=refresh,
        page_size=page_size,
        window=window,
        bucket=bucket,
    )
