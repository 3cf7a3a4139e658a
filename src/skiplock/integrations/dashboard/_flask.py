"""The dashboard as a Flask blueprint (imported on first use: it needs Flask)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flask import Blueprint, request
from flask import Response as FlaskResponse

from skiplock.engine import Engine

from ._neutral import Request, Response
from ._views import Dashboard
from ._views_async import PAGES

if TYPE_CHECKING:
    from ._neutral import Authorize


def neutral_request() -> Request:
    """Flask's current request as the neutral :class:`Request`."""
    headers = request.headers
    return Request(
        method=request.method,
        path=request.script_root + request.path,
        query={key: request.args.getlist(key) for key in request.args},
        headers={name: ", ".join(headers.getlist(name)) for name in set(headers.keys())},
        body=request.get_data(cache=False),
        path_params={name: str(value) for name, value in (request.view_args or {}).items()},
        native=request._get_current_object(),  # type: ignore[attr-defined]
    )


def flask_response(response: Response) -> FlaskResponse:
    """The neutral response as Flask's."""
    return FlaskResponse(
        response.body,
        status=response.status,
        headers=dict(response.headers),
        content_type=response.content_type,
    )


def create_blueprint(
    engine: Engine,
    *,
    authorize: Authorize,
    name: str = "skiplock_dashboard",
    url_prefix: str | None = None,
    **options: Any,
) -> Blueprint:
    """See :func:`skiplock.integrations.flask.create_dashboard_blueprint`."""
    if not isinstance(engine, Engine):
        raise TypeError(
            f"Flask needs a sync skiplock Engine (views are sync), got {type(engine).__name__}"
        )
    dashboard = Dashboard(engine, authorize=authorize, **options)
    blueprint = Blueprint(name, __name__, url_prefix=url_prefix)
    for page, (path, method, _) in PAGES.items():
        rule = path.replace("{job_id}", "<job_id>")
        blueprint.add_url_rule(rule, page, _view(dashboard, page), methods=[method])
    return blueprint


def _view(dashboard: Dashboard, page: str) -> Any:
    def view(**_: str) -> FlaskResponse:
        return flask_response(dashboard.handle(page, neutral_request()))

    return view
