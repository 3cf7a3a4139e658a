"""A skiplock backend's ``OPTIONS``, read and checked once (docs/django.md, "Settings")."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Literal

import attrs
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from skiplock.core import ValidationError, validate_identifier
from skiplock.core.rules import check_kind
from skiplock.engine import Settings, declare

#: The keys ``OPTIONS`` may have.
OPTION_KEYS = frozenset(
    {"DATABASE", "SCHEMA", "ON_COMMIT", "DSN", "POOL", "PGBOUNCER", "SETTINGS", "TASKS", "MODULES"}
)
#: The keywords of ``OPTIONS["POOL"]`` (those of ``PsycopgJobStore``).
POOL_KEYS = frozenset({"min_size", "max_size", "timeout", "statement_timeout"})
#: Per-task options Django sets itself (``priority``) or that cannot apply to a Django task
#: (its ORM writes go through Django's connection, never the job's own).
NOT_TASK_OPTIONS = frozenset({"priority", "transactional", "autocommit"})

PgBouncerMode = Literal["session", "transaction"]


@attrs.frozen
class BackendConfig:
    """What a :class:`~skiplock.integrations.django.SkiplockBackend` was configured with."""

    alias: str
    #: The database alias (``DATABASES``) holding the queue; enqueue writes on its connection.
    database: str = "default"
    schema: str = "skiplock"
    #: None: enqueue joins the transaction of ``database``'s connection. Else the alias
    #: whose transaction commit writes the job (``transaction.on_commit``).
    on_commit: str | None = None
    #: The connection string of the store's own pool (workers, admin actions); None: made
    #: from ``DATABASES[database]``.
    dsn: str | None = None
    pool: Mapping[str, Any] = attrs.field(factory=lambda: MappingProxyType({}))
    pgbouncer: PgBouncerMode | None = None
    settings: Settings = attrs.field(factory=Settings)
    #: Per-task policy by the task's module path (``TaskOptions`` keywords).
    tasks: Mapping[str, Mapping[str, Any]] = attrs.field(factory=lambda: MappingProxyType({}))
    #: Modules a worker imports (besides every installed app's ``tasks`` module).
    modules: tuple[str, ...] = ()

    @property
    def pgbouncer_mode(self) -> PgBouncerMode | None:
        """The PgBouncer pooling mode of ``database``: ``OPTIONS["PGBOUNCER"]``, else
        ``transaction`` when its ``DATABASES`` entry sets ``DISABLE_SERVER_SIDE_CURSORS``
        (what Django asks for under transaction pooling), else None."""
        if self.pgbouncer is not None:
            return self.pgbouncer
        entry = django_settings.DATABASES.get(self.database, {})
        return "transaction" if entry.get("DISABLE_SERVER_SIDE_CURSORS") else None


def _where(alias: str, key: str | None = None) -> str:
    base = f"TASKS[{alias!r}]['OPTIONS']"
    return base if key is None else f"{base}[{key!r}]"


def parse_options(alias: str, options: object) -> BackendConfig:
    """The backend ``alias``'s ``OPTIONS`` as a :class:`BackendConfig`; ImproperlyConfigured
    naming the key for anything wrong."""
    options = _dict_of(_where(alias), options, OPTION_KEYS)
    values: dict[str, Any] = {"alias": alias}
    database = options.get("DATABASE", "default")
    if not isinstance(database, str) or database not in django_settings.DATABASES:
        raise ImproperlyConfigured(
            f"{_where(alias, 'DATABASE')}: {database!r} is not an alias of settings.DATABASES"
        )
    values["database"] = database
    try:
        values["schema"] = validate_identifier(options.get("SCHEMA", "skiplock"))
    except ValidationError as exc:
        raise ImproperlyConfigured(f"{_where(alias, 'SCHEMA')}: {exc}") from None
    on_commit = options.get("ON_COMMIT")
    if on_commit is not None and (
        not isinstance(on_commit, str) or on_commit not in django_settings.DATABASES
    ):
        raise ImproperlyConfigured(
            f"{_where(alias, 'ON_COMMIT')}: {on_commit!r} is not an alias of settings.DATABASES"
        )
    values["on_commit"] = on_commit
    dsn = options.get("DSN")
    if dsn is not None and (not isinstance(dsn, str) or not dsn.strip()):
        raise ImproperlyConfigured(f"{_where(alias, 'DSN')} must be a connection string")
    values["dsn"] = dsn
    values["pool"] = _pool(alias, options.get("POOL", {}))
    pgbouncer = options.get("PGBOUNCER")
    if pgbouncer not in (None, "session", "transaction"):
        raise ImproperlyConfigured(
            f"{_where(alias, 'PGBOUNCER')} must be 'session', 'transaction' or None, "
            f"got {pgbouncer!r}"
        )
    values["pgbouncer"] = pgbouncer
    values["settings"] = settings = _settings(alias, options.get("SETTINGS"))
    values["tasks"] = _tasks(alias, options.get("TASKS", {}), settings)
    modules = options.get("MODULES", ())
    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        raise ImproperlyConfigured(f"{_where(alias, 'MODULES')} must be a list of module names")
    values["modules"] = tuple(modules)
    return BackendConfig(**values)


def _dict_of(where: str, value: object, known: frozenset[str]) -> Mapping[Any, Any]:
    """``value`` if it is a mapping with only ``known`` keys, else ImproperlyConfigured."""
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(f"{where} must be a dict, got {value!r}")
    unknown = sorted(str(key) for key in set(value) - known)
    if unknown:
        raise ImproperlyConfigured(f"{where}: unknown key(s) {unknown}; known: {sorted(known)}")
    return value


def _pool(alias: str, pool: object) -> Mapping[str, Any]:
    return MappingProxyType(dict(_dict_of(_where(alias, "POOL"), pool, POOL_KEYS)))


#: What ``OPTIONS["SETTINGS"]`` changes from skiplock's defaults: a task's ``SystemExit``
#: or ``KeyboardInterrupt`` fails its attempt and the worker keeps serving, as Django's
#: own backends do.
DJANGO_DEFAULTS: Mapping[str, Any] = MappingProxyType({"processor_exits": "fail"})


def _settings(alias: str, value: object) -> Settings:
    if value is None:
        return Settings(**DJANGO_DEFAULTS)
    if isinstance(value, Settings):
        return value  # taken as given, skiplock's defaults included
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(
            f"{_where(alias, 'SETTINGS')} must be a dict of skiplock.Settings fields or a "
            f"skiplock.Settings, got {value!r}"
        )
    try:
        return Settings(**{**DJANGO_DEFAULTS, **value})
    except (ValidationError, TypeError) as exc:
        raise ImproperlyConfigured(f"{_where(alias, 'SETTINGS')}: {exc}") from None


def _tasks(alias: str, value: object, settings: Settings) -> Mapping[str, Mapping[str, Any]]:
    if not isinstance(value, Mapping):
        raise ImproperlyConfigured(
            f"{_where(alias, 'TASKS')} must be a dict of task module paths to options, "
            f"got {value!r}"
        )
    tasks: dict[str, Mapping[str, Any]] = {}
    for path, options in value.items():
        where = f"{_where(alias, 'TASKS')}[{path!r}]"
        if not isinstance(options, Mapping):
            raise ImproperlyConfigured(f"{where} must be a dict of options, got {options!r}")
        refused = sorted(set(options) & NOT_TASK_OPTIONS)
        if refused:
            raise ImproperlyConfigured(
                f"{where}: {refused} cannot be set here (a task's priority is Django's "
                "@task(priority=...); a Django task's writes go through Django's own "
                "connection, so transactional/autocommit do not apply)"
            )
        try:
            check_kind(path)
            declared = declare(path, **options)
            settings.policy_for(path, declared.overrides)
        except (ValidationError, TypeError) as exc:
            raise ImproperlyConfigured(f"{where}: {exc}") from None
        tasks[path] = MappingProxyType(dict(options))
    return MappingProxyType(tasks)
