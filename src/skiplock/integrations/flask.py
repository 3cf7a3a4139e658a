"""Flask: the ``Skiplock`` extension and the REST admin API as a blueprint.

* ``Skiplock(app, engine=jobs)`` (or ``init_app``) applies the app's ``SKIPLOCK_*``
  config keys over the engine's settings (the syntax of the ``SKIPLOCK_*`` environment
  variables: one rule, :meth:`Settings.from_env <skiplock.Settings.from_env>`), adds the
  ``flask skiplock`` commands (the ``skiplock`` command tree mounted on the app's engine:
  ``worker``, ``schema``, ``health``, ``jobs``, ``dlq``, ``counts``, ``metrics``,
  ``workers``) and, given Flask-SQLAlchemy's ``db``, enqueues in the request's session:
  the job commits with ``db.session.commit()``, or not at all.
* ``create_blueprint(engine, authorize=...)``: the REST admin API (docs/rest.md).
* ``create_dashboard_blueprint(engine, authorize=...)``: the web dashboard
  (docs/dashboard.md), behind the same authorization hook.
* ``create_probes_blueprint(engine)``: ``/livez`` and ``/readyz`` for Kubernetes probes,
  without authorization by design (they reveal nothing).
* ``create_metrics_blueprint(engine)``: the queue's Prometheus metrics at ``/metrics``
  (docs/metrics.md; needs ``skiplock[prometheus]``).

Needs ``pip install 'skiplock[flask]'``; see docs/flask.md.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, Unpack

from flask import Blueprint, Flask, request
from flask import Response as FlaskResponse

from skiplock.core import ValidationError
from skiplock.engine import Engine, Settings

from ._flask_cli import commands
from ._flask_state import EXTENSION, State, current_state
from ._mounts import MountConflict, claims, register
from .rest import Request, RestApi
from .rest._routes import FALLBACK_PATH

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from flask.sansio.app import App

    from skiplock.contrib.prometheus import PrometheusMetrics
    from skiplock.core import EnqueueResult

    from .dashboard import DashboardOptions
    from .rest import Authorize, Route

__all__ = [
    "EXTENSION",
    "MountConflict",
    "Skiplock",
    "create_blueprint",
    "create_dashboard_blueprint",
    "create_metrics_blueprint",
    "create_probes_blueprint",
    "settings_from_config",
]

#: The config prefix: ``SKIPLOCK_CONCURRENCY``, ``SKIPLOCK_MAX_ATTEMPTS``, ...
PREFIX = "SKIPLOCK_"


def settings_from_config(config: Mapping[str, Any], base: Settings) -> Settings:
    """``base`` with the ``SKIPLOCK_*`` keys of a Flask config applied, as
    :meth:`Settings.from_env <skiplock.Settings.from_env>` applies the environment.

    A value is the text the environment variable would hold; a bool, int, float or
    timedelta is turned into that text (``True``: ``"true"``, a timedelta: seconds). A
    ``SKIPLOCK_*`` key that is no setting, or a value of another type, raises
    :class:`~skiplock.ValidationError` naming the key.
    """
    known = Settings.env_names()
    values: dict[str, str] = {}
    for key, value in config.items():
        if not key.startswith(PREFIX):
            continue
        if key not in known:
            raise ValidationError(
                f"{key} is not a skiplock setting (the settings are the SKIPLOCK_* "
                "environment variables of docs/configuration.md)"
            )
        values[key] = _as_text(key, value)
    return Settings.from_env(values, base=base)


def _as_text(key: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, timedelta):
        return str(value.total_seconds())
    raise ValidationError(
        f"{key} must be the text of the environment variable (or a bool, int, float or "
        f"timedelta), got {type(value).__name__}"
    )


class Skiplock:
    """The Flask extension: ``Skiplock(app, engine=jobs)``, or ``Skiplock(engine=jobs)``
    then ``init_app(app)`` in an app factory.

    ``engine`` is the application's sync :class:`~skiplock.Engine` (its processors, its
    store). ``db``, a Flask-SQLAlchemy ``SQLAlchemy`` over the same database, makes
    :meth:`enqueue` join the request's session (the engine's store must then be a
    :class:`~skiplock.adapters.sqlalchemy.SessionJobStore`, which writes on the
    session's connection).
    """

    def __init__(
        self, app: Flask | None = None, *, engine: Engine | None = None, db: Any = None
    ) -> None:
        self._engine = engine
        self._db = db
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Flask, *, engine: Engine | None = None, db: Any = None) -> None:
        """Bind the extension to ``app``: apply its ``SKIPLOCK_*`` config to the engine's
        settings (``engine.configure``; an invalid key raises ValidationError), register
        the ``flask skiplock`` commands, keep the engine (and ``db``) for the app."""
        engine = engine if engine is not None else self._engine
        if engine is None:
            raise TypeError("Skiplock needs the application's engine: Skiplock(app, engine=...)")
        _check_sync(engine)
        settings = settings_from_config(app.config, engine.settings)
        if settings != engine.settings:
            engine.configure(settings)
        app.extensions[EXTENSION] = State(engine, db if db is not None else self._db)
        app.cli.add_command(commands)

    @staticmethod
    def _state() -> State:
        return current_state()

    @property
    def engine(self) -> Engine:
        """The current app's engine (in an app context), else the one given here."""
        if self._engine is not None and not _has_app():
            return self._engine
        return self._state().engine

    @property
    def connection(self) -> Any:
        """The current Flask-SQLAlchemy session, to pass as ``connection=``: the job is
        written in its transaction (RuntimeError without ``db``)."""
        db = self._state().db
        if db is None:
            raise RuntimeError("no Flask-SQLAlchemy db given: Skiplock(app, engine=..., db=db)")
        return db.session()  # the scoped session's Session of this request

    def enqueue(self, kind: str, payload: Any = None, **options: Any) -> EnqueueResult:
        """``engine.enqueue`` for the current app: in the request's Flask-SQLAlchemy
        session when the extension has ``db`` (it exists once you ``db.session.commit()``;
        a rollback, or no commit, leaves no job), else committed at once. The options are
        ``engine.enqueue``'s (``connection=`` wins)."""
        state = self._state()
        if state.db is not None:
            options.setdefault("connection", self.connection)
        return state.engine.enqueue(kind, payload, **options)


def _check_sync(engine: object) -> None:
    if not isinstance(engine, Engine):
        raise TypeError(
            f"Flask needs a sync skiplock Engine (views are sync), got {type(engine).__name__}"
        )


def _has_app() -> bool:
    from flask import has_app_context

    return has_app_context()


# ---- the web doors' blueprints ------------------------------------------------------------


def _neutral_request() -> Request:
    headers = request.headers
    return Request(
        scheme=request.scheme,
        method=request.method,
        path=request.script_root + request.path,
        query={key: request.args.getlist(key) for key in request.args},
        headers={name: ", ".join(headers.getlist(name)) for name in set(headers.keys())},
        body=request.get_data(cache=False),
        path_params={name: str(value) for name, value in (request.view_args or {}).items()},
        native=request._get_current_object(),  # type: ignore[attr-defined]
    )


class _DoorBlueprint(Blueprint):
    """A skiplock door's blueprint: registering it on an app checks that it overlaps no
    other skiplock blueprint of the app (:mod:`._mounts`); MountConflict if it does."""

    def __init__(
        self, name: str, door: str, url_prefix: str | None, routes: Sequence[Route]
    ) -> None:
        super().__init__(name, __name__, url_prefix=url_prefix)
        self.door = door
        self.paths = [route.path for route in routes if route.path != FALLBACK_PATH]
        self.fallback = next((route for route in routes if route.path == FALLBACK_PATH), None)
        for route in routes:
            if route is not self.fallback:
                self._add(route)

    def _add(self, route: Route) -> None:
        # No automatic OPTIONS answer: OPTIONS goes to the fallback, which asks the hook.
        self.add_url_rule(
            route.angle_path(),
            route.name,
            _view(route),
            methods=route.methods,
            provide_automatic_options=False,
        )

    def register(self, app: App, options: dict[str, Any]) -> None:
        prefix = options.get("url_prefix", self.url_prefix) or ""
        if prefix and self.fallback is not None and not self._got_registered_once:
            # Under a prefix only: at the root it would take the app's every unknown path.
            self._add(self.fallback)
            self.fallback = None
        routes = [(path, path) for path in self.paths]
        register(
            claims(self.door, id(self), prefix, routes), app.extensions.setdefault(_MOUNTS, [])
        )
        super().register(app, options)


#: Where an app keeps the skiplock blueprints registered on it (their claims).
_MOUNTS = "skiplock.mounts"


def _blueprint(name: str, url_prefix: str | None, routes: Sequence[Route], door: str) -> Blueprint:
    """A blueprint mounting a door's ``routes``, each named ``<name>.<route name>``;
    ``door`` names it in a MountConflict."""
    return _DoorBlueprint(name, door, url_prefix, routes)


def _view(route: Route) -> Any:
    def view(**_: str) -> FlaskResponse:
        response = route.answer(_neutral_request())
        return FlaskResponse(
            response.body,
            status=response.status,
            headers=dict(response.headers),
            content_type=response.content_type,
        )

    return view


def create_blueprint(
    engine: Engine, *, authorize: Authorize, name: str = "skiplock", url_prefix: str | None = None
) -> Blueprint:
    """The REST admin API of ``engine`` as a Flask blueprint (docs/rest.md).

    Deny by default: ``authorize`` is required (TypeError without it). It is called
    with each request (:class:`~skiplock.integrations.rest.Request`, whose ``native`` is
    Flask's ``request``) and the :class:`~skiplock.integrations.rest.Permission` the
    operation needs; it returns the caller's identity (the actor of the engine's operator
    that answers), None for a 401, or raises
    :class:`~skiplock.integrations.rest.Forbidden` for a 403. Register it with
    ``app.register_blueprint(bp, url_prefix="/admin/jobs")``; the OpenAPI document is
    served at ``<prefix>/openapi.json``. Route names are ``<name>.<operationId>``.
    """
    _check_sync(engine)
    return _blueprint(name, url_prefix, RestApi(engine, authorize=authorize).routes(), "REST API")


def create_dashboard_blueprint(
    engine: Engine,
    *,
    authorize: Authorize,
    name: str = "skiplock_dashboard",
    url_prefix: str | None = None,
    **options: Unpack[DashboardOptions],
) -> Blueprint:
    """The web dashboard of ``engine`` as a Flask blueprint (docs/dashboard.md).

    Deny by default: ``authorize`` is required (TypeError without it), the same hook as
    :func:`create_blueprint`'s, asked for ``read`` on a page and ``write`` for the Retry
    and Discard buttons; the ``options`` (``refresh``, ``page_size``, ``window``,
    ``bucket``) are those of :class:`~skiplock.integrations.dashboard.Dashboard`.
    Register it with ``app.register_blueprint(bp, url_prefix="/admin/dashboard")``;
    route names are ``<name>.<page>`` (``overview``, ``dead``, ``job``, ``retry``,
    ``delete``, ``static``).
    """
    # Imported here: the REST blueprint and the extension need no Jinja2.
    from .dashboard import Dashboard

    _check_sync(engine)
    dashboard = Dashboard(engine, authorize=authorize, **options)
    return _blueprint(name, url_prefix, dashboard.routes(), "dashboard")


def create_probes_blueprint(
    engine: Engine,
    *,
    name: str = "skiplock_probes",
    url_prefix: str | None = None,
    timeout: float | None = None,
) -> Blueprint:
    """Liveness and readiness probes as a Flask blueprint: ``GET <prefix>/livez`` answers
    200 while the app serves requests; ``GET <prefix>/readyz`` answers 200 if the
    engine's database answers a trivial query (the store's clock) within ``timeout``
    seconds (default: the engine's ``Settings.request_timeout``, 2 s), else 503. Bodies
    are ``ok`` / ``unavailable``: no version, host or error (why readiness failed is
    logged on ``skiplock.probes``). One check runs at a time:
    while the database hangs, probes share it and never pile up threads.

    They bypass the admin authorization hook by design: a kubelet or load balancer
    calls them without credentials, and they reveal nothing. Register with
    ``app.register_blueprint(create_probes_blueprint(engine))``; route names are
    ``<name>.livez`` and ``<name>.readyz``.
    """
    from ._monitor import probe_routes

    _check_sync(engine)
    return _blueprint(name, url_prefix, probe_routes(engine, timeout=timeout), "probes")


def create_metrics_blueprint(
    engine: Engine,
    *,
    metrics: PrometheusMetrics | None = None,
    name: str = "skiplock_metrics",
    url_prefix: str | None = None,
    path: str = "/metrics",
) -> Blueprint:
    """The queue's Prometheus metrics as a Flask blueprint: ``GET <prefix><path>``
    answers a scrape in Prometheus' text format, whether or not a worker runs in this
    process (queue depths per kind and tenant, the oldest due job's age, running and
    dead jobs, registered workers, ``skiplock_up``, ``skiplock_healthy``; read from the
    store, cached for the metrics' ``cache_seconds``). ``metrics`` (e.g. the engine's
    own :class:`~skiplock.contrib.prometheus.PrometheusMetrics`) is made to watch the
    engine; default: one on a registry of its own. No authorization hook: mount it where
    only Prometheus reaches it, or guard it with the blueprint's ``before_request``.
    """
    from ._monitor import metrics_routes

    _check_sync(engine)
    routes = metrics_routes(engine, metrics=metrics, path=path)
    return _blueprint(name, url_prefix, routes, "metrics")
