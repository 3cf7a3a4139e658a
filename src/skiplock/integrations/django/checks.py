"""System checks of the ``skiplock`` app (``manage.py check``; docs/django-admin.md,
"Health and checks").

- ``skiplock.W001``: the app is installed but no ``settings.TASKS`` backend is a
  ``SkiplockBackend``.
- ``skiplock.W002`` (database check: ``check --database <alias>``, and ``migrate``): a
  backend's schema is older than this skiplock, or missing although the app's migration
  is applied (run ``manage.py migrate``); ``skiplock.W003``: it cannot be read.

Each backend's own configuration is checked by ``SkiplockBackend.check()``, which Django
runs with every ``check``: ``skiplock.E001`` (invalid ``OPTIONS``), ``E002`` (not
PostgreSQL), ``E003`` (psycopg2 instead of psycopg 3) and ``E004`` (a pool
``statement_timeout`` through PgBouncer's transaction pooling).

- ``skiplock.E006`` (URL check): a door of :mod:`skiplock.integrations.django.urls`
  (the REST API, the dashboard, the probes) with a path that another door, included
  before it in the root URLconf, answers: the REST API and the dashboard answer every
  path under their prefix, the probes their own paths, and Django takes the first
  pattern that matches. The FastAPI and Flask bindings refuse overlapping mounts at
  mount time (``MountConflict``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.db.migrations.recorder import MigrationRecorder
from django.urls import URLPattern, URLResolver, get_resolver

from skiplock.integrations._mounts import Mount, mount

from . import _schema
from ._config import parse_options

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence

    from django.apps import AppConfig


def check_backend_configured(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """W001: the app without any skiplock backend."""
    if _schema.skiplock_backends():
        return []
    return [
        checks.Warning(
            "the skiplock app is installed but no settings.TASKS backend is "
            "'skiplock.integrations.django.SkiplockBackend'",
            hint="Add one to settings.TASKS (docs/django.md, 'Settings').",
            id="skiplock.W001",
        )
    ]


def check_schema_version(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Iterable[str] | None = None,
    **kwargs: Any,
) -> list[checks.CheckMessage]:
    """W002/W003: each backend's schema, on the databases the check was asked about."""
    if not databases:
        return []
    wanted = set(databases)
    messages: list[checks.CheckMessage] = []
    for alias, params in _schema.skiplock_backends().items():
        try:
            config = parse_options(alias, params.get("OPTIONS", {}))
        except ImproperlyConfigured:
            continue  # skiplock.E001 says what is wrong
        if config.database not in wanted:
            continue
        connection = connections[config.database]
        try:
            applied = MigrationRecorder(connection).applied_migrations()
            if (_schema.APP_LABEL, _schema.INITIAL) not in applied:
                continue  # migrate has not run: Django lists the unapplied migration
            status = _schema.status(connection, config.schema)
        except DatabaseError as exc:
            messages.append(
                checks.Warning(
                    f"TASKS[{alias!r}]: cannot read skiplock's schema {config.schema!r} on "
                    f"database {config.database!r}: {exc}".strip(),
                    id="skiplock.W003",
                )
            )
            continue
        if not status.installed or status.pending:
            state = (
                "is not installed"
                if not status.installed
                else f"is at version {status.version}, older than this skiplock "
                f"(pending: {', '.join(status.pending)})"
            )
            messages.append(
                checks.Warning(
                    f"TASKS[{alias!r}]: skiplock's schema {config.schema!r} on database "
                    f"{config.database!r} {state}",
                    hint=f"Run `manage.py migrate --database {config.database}`.",
                    id="skiplock.W002",
                )
            )
    return messages


class DoorView(NamedTuple):
    """What a view of :mod:`.urls` tells the mount check: its ``door`` (``REST API``,
    ``dashboard``, ``probes``), a ``token`` shared by the patterns of one ``include()``
    list, and whether it is the door's fallback (``<path:path>``, no claim of its own)."""

    door: str
    token: int
    fallback: bool


def check_mounts(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E006: a skiplock door of the root URLconf with a route that a door Django tries
    before it answers (Django takes the first pattern that matches)."""
    try:
        patterns = get_resolver().url_patterns
    except Exception:  # Django's own URL checks report a broken URLconf
        return []
    doors: dict[tuple[int, str], tuple[Mount, list[str]]] = {}
    for prefix, pattern in _patterns_of(patterns, ""):
        door: DoorView | None = getattr(pattern.callback, "skiplock_mount", None)
        if door is None or door.fallback:
            continue
        route = f"/{prefix}{_route(pattern)}"
        claim = mount(door.door, "/" + prefix, door.token, route)
        doors.setdefault((door.token, claim.prefix), (claim, []))[1].append(route)
    messages: list[checks.CheckMessage] = []
    ordered = list(doors.values())
    for n, (later, routes) in enumerate(ordered):
        for earlier, _ in ordered[:n]:
            taken = next((route for route in routes if _claims(earlier, route)), None)
            if taken is None:
                continue
            messages.append(
                checks.Error(
                    f"skiplock: the {later.door} included at {later.where!r} overlaps the "
                    f"{earlier.door} included at {earlier.where!r}, which Django tries first "
                    f"and which answers {taken!r}",
                    hint="Include each of skiplock's URL lists at its own prefix, e.g. "
                    "the REST API at ops/jobs/api/ before the dashboard at ops/jobs/ "
                    "(docs/django-admin.md, 'The REST API, the dashboard and probes').",
                    id="skiplock.E006",
                )
            )
            break
    return messages


def _claims(door: Mount, route: str) -> bool:
    """Whether ``door`` answers the path of ``route`` (a path parameter, ``<...>``, on
    either side is any one segment): a tree door every path under its prefix, another
    door its exact path."""
    where = _segments(door.prefix if door.path is None else door.path)
    wanted = _segments(route)
    if len(wanted) < len(where) or (door.path is not None and len(wanted) != len(where)):
        return False
    return all(
        a == b or a.startswith("<") or b.startswith("<")
        for a, b in zip(where, wanted, strict=False)
    )


def _segments(path: str) -> list[str]:
    return [segment for segment in path.split("/") if segment]


def _patterns_of(
    patterns: Iterable[URLPattern | URLResolver], prefix: str
) -> Iterator[tuple[str, URLPattern]]:
    """Every URL pattern of ``patterns`` with the path prefix of the includes above it."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _patterns_of(entry.url_patterns, prefix + _route(entry))
        else:
            yield prefix, entry


def _route(entry: URLPattern | URLResolver) -> str:
    """The path text of a pattern (``re_path``'s regex without its anchors)."""
    text = str(entry.pattern)
    return text.removeprefix("^").removesuffix("$").removesuffix(r"\Z")
