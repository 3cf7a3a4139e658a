"""What a skiplock backend shares across threads: its engine and store, the Django tasks
this process knows, and how a worker runs them.

Django makes one backend object per thread (``django.tasks.task_backends`` is
thread-local); the engine, its store and the store's pool are made once per process and
backend alias here, on first use (never at import: a test database may not be set up yet).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
from collections import OrderedDict
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections, reset_queries, transaction
from django.tasks.base import Task, TaskContext, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.asyncio import async_unsafe
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from skiplock.adapters.psycopg import quote_identifier
from skiplock.core import Release
from skiplock.engine import Engine, JobContext

from ._results import DEFAULT_QUEUE, TaskCall, error_from_exception, task_result
from ._store import DjangoJobStore, migrate_hint

if TYPE_CHECKING:
    from collections.abc import Callable

    from skiplock.core import EnqueueResult, Job

    from ._config import BackendConfig

#: Every Django task this process has seen defined, by module path (its job's kind): the
#: first definition of each (``Task.using()`` copies differ only in what a job records).
_known_tasks: dict[str, Task[..., Any]] = {}
_known_lock = threading.Lock()

#: How many ``ON_COMMIT`` keys a runtime remembers the ids of (the latest writes).
_WRITTEN_KEYS = 4096

#: Connection-string keys of ``get_connection_params()`` that are psycopg objects, not
#: libpq parameters.
_NOT_CONNINFO = frozenset({"cursor_factory", "context", "prepare_threshold", "autocommit"})


def remember_task(task: Task[..., Any]) -> None:
    """Know ``task`` here, so that a worker of this process can run its jobs."""
    path = task.module_path
    if path not in _known_tasks:
        with _known_lock:
            _known_tasks.setdefault(path, task)


def known_tasks() -> dict[str, Task[..., Any]]:
    """The Django tasks this process has seen defined, by module path (a copy)."""
    with _known_lock:
        return dict(_known_tasks)


def resolve_task(kind: str) -> Task[..., Any] | None:
    """The Django task whose jobs have ``kind`` (its module path), imported if need be;
    None if ``kind`` names no Django task."""
    task = _known_tasks.get(kind)
    if task is not None:
        return task
    try:
        found = import_string(kind)
    except ImportError:
        return None
    return found if isinstance(found, Task) else None


def tasks_in_module(name: str) -> list[str]:
    """The module paths of the Django tasks defined in module ``name`` (none if it cannot
    be imported)."""
    try:
        module = importlib.import_module(name)
    except ImportError:
        return []
    return [
        value.module_path
        for value in vars(module).values()
        if isinstance(value, Task) and value.module_path.startswith(f"{name}.")
    ]


def conninfo_for(alias: str) -> str:
    """A libpq connection string for Django's database ``alias`` (its current settings:
    a test run's database once the test runner has set it up)."""
    from psycopg.conninfo import make_conninfo

    params = connections[alias].get_connection_params()
    return make_conninfo(
        "",
        **{
            key: str(value)
            for key, value in params.items()
            if key not in _NOT_CONNINFO and isinstance(value, str | int | float)
        },
    )


class Runtime:
    """The engine, store and worker side of one backend alias in this process."""

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._engine: Engine | None = None
        self._processors: set[str] = set()  # kinds with a processor in the engine
        self._declared: set[str] = set()  # kinds the engine knows (enqueue-only)
        # ON_COMMIT keys of the jobs this process wrote, with the id the enqueue returned
        # (the latest ones): their results are found without a lookup by key.
        self._written: OrderedDict[str, int] = OrderedDict()

    @property
    def dsn(self) -> str:
        """The connection string of the store's own pool: ``OPTIONS["DSN"]``, else made
        from Django's settings of the queue's database."""
        config = self.config
        return config.dsn if config.dsn is not None else conninfo_for(config.database)

    @property
    def engine(self) -> Engine:
        """The backend's skiplock engine (made on first use): its store writes through
        Django's connection when enqueueing and reads jobs, and its own pool serves the
        worker and the admin actions."""
        engine = self._engine
        if engine is None:
            with self._lock:
                if self._engine is None:
                    config = self.config
                    # Through PgBouncer's transaction pooling (no direct DSN): the
                    # store's mode for it; workers poll unless SKIPLOCK_LISTEN_DSN is set.
                    bounced = config.dsn is None and config.pgbouncer_mode == "transaction"
                    store = DjangoJobStore(
                        self.dsn,
                        database=config.database,
                        schema=config.schema,
                        pgbouncer=bounced,
                        **config.pool,
                    )
                    # Its workers' claims bring each job's earlier errors: a task's
                    # TaskResult lists them (no read of the job per run).
                    self._engine = Engine(store, config.settings, claim_errors=True)
                engine = self._engine
        return engine

    @property
    def store(self) -> DjangoJobStore:
        """The engine's store."""
        store = self.engine.store
        assert isinstance(store, DjangoJobStore)
        return store

    def close(self) -> None:
        """Close the store's pool if it was made (a backend replaced by new settings)."""
        with self._lock:
            engine, self._engine = self._engine, None
            self._processors.clear()  # the next engine registers them again
            self._declared.clear()
        if engine is not None:
            engine.store.close()

    # ---- web side: Django's connection ----------------------------------------------

    @async_unsafe
    def write(
        self, task: Task[..., Any], call: TaskCall, *, idempotency_key: str | None = None
    ) -> EnqueueResult:
        """Create ``task``'s job on the connection of the queue's database alias, in its
        transaction if one is open (never committed here); returns its id and, for a job
        without an idempotency key, its ``created_at`` (from the insert).

        An error inside an ``atomic()`` block marks it for rollback, as the ORM does.
        """
        engine = self.engine
        kind = task.module_path
        if kind not in self._declared:  # a kind this engine knows (Settings.unknown_kinds)
            engine.declare_kind(kind)
            self._declared.add(kind)
        alias = self.config.database
        with transaction.mark_for_rollback_on_error(using=alias), migrate_hint(alias):
            result = engine.enqueue(
                kind,
                call,
                priority=task.priority,
                tenant=task.queue_name,
                available_at=_aware(task.run_after),
                idempotency_key=idempotency_key,
                connection=connections[alias],
            )
        return result

    @async_unsafe
    def read(self, job_id: int) -> Job | None:
        """Job ``job_id`` read on Django's connection (what its transaction sees)."""
        alias = self.config.database
        with transaction.mark_for_rollback_on_error(using=alias), migrate_hint(alias):
            return self.store.get(job_id, connection=connections[alias])

    def wrote(self, key: str, job_id: int) -> None:
        """Remember that the ``ON_COMMIT`` write of key ``key`` made job ``job_id``."""
        with self._lock:
            self._written[key] = job_id
            if len(self._written) > _WRITTEN_KEYS:
                self._written.popitem(last=False)

    def written_id(self, key: str) -> int | None:
        """The id an ``ON_COMMIT`` write of this process returned for ``key``, if known."""
        with self._lock:
            return self._written.get(key)

    @async_unsafe
    def job_id_for_key(self, key: str) -> int | None:
        """The id of the job enqueued with idempotency key ``key`` (``ON_COMMIT`` mode),
        read from the table: for a job another process wrote (this process's own writes
        say their ids, :meth:`written_id`)."""
        alias = self.config.database
        with connections[alias].cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {quote_identifier(self.config.schema)}.jobs "
                "WHERE idempotency_key = %s",
                [key],
            )
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    # ---- worker side ----------------------------------------------------------------

    def worker_engine(self) -> Engine:
        """The engine with a processor for every Django task this process knows."""
        engine = self.engine
        with self._lock:
            for path in sorted(set(known_tasks()) - self._processors):
                options = dict(self.config.tasks.get(path, {}))
                engine.processor(path, **options)(self._processor(path))
                self._processors.add(path)
        return engine

    def _processor(self, path: str) -> Callable[[TaskCall, JobContext], Any]:
        def process(call: TaskCall, ctx: JobContext) -> Any:
            return self.run(path, call, ctx)

        process.__qualname__ = process.__name__ = f"run[{path}]"
        return process

    def run(self, path: str, call: TaskCall, ctx: JobContext) -> Any:
        """Run one attempt of the Django task ``path`` in a worker thread, sending
        ``task_started`` and ``task_finished`` around it; returns its JSON-normalised
        return value (stored as the job's result)."""
        from django.tasks import task_backends

        backend = task_backends[self.config.alias]
        sender = type(backend)
        task = task_for(known_tasks()[path], ctx.job, call, backend=self.config.alias)
        # As around a request: a worker thread lives long, and with DEBUG each of its
        # connections would keep a log of its queries.
        close_old_connections()
        reset_queries()
        try:
            # The claimed job has its history: the engine's claims bring the errors.
            result = task_result(ctx.job, task, backend=self.config.alias)
            task_started.send(sender=sender, task_result=result)
            try:
                if task.takes_context:
                    value = task.call(TaskContext(task_result=result), *call.args, **call.kwargs)
                else:
                    value = task.call(*call.args, **call.kwargs)
                value = normalize_json(value)
            except BaseException as exc:
                # Sent inside the handler, as Django's backends do (receivers see exc_info).
                # The worker's own decision says what follows (the very outcome it
                # writes): a release (a shutdown: no attempt used, no error), a retry, or
                # the end of the job.
                outcome = ctx.failure_outcome(exc)
                if isinstance(outcome, Release):
                    status = TaskResultStatus.READY
                else:
                    result.errors.append(error_from_exception(exc))
                    status = TaskResultStatus.FAILED if outcome.final else TaskResultStatus.READY
                _finish(result, status)
                task_finished.send(sender=sender, task_result=result)
                raise
            _finish(result, TaskResultStatus.SUCCESSFUL, value)
            task_finished.send(sender=sender, task_result=result)
            return value
        finally:
            close_old_connections()


def _finish(result: Any, status: TaskResultStatus, value: Any = None) -> None:
    object.__setattr__(result, "status", status)
    if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED):
        object.__setattr__(result, "finished_at", timezone.now())
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", value)


def task_for(base: Task[..., Any], job: Job, call: TaskCall, *, backend: str) -> Task[..., Any]:
    """``base`` as ``job`` was enqueued: its priority, queue, ``run_after`` and backend."""
    run_after = None if call.run_after is None else datetime.fromisoformat(call.run_after)
    if run_after is not None and not _use_tz():
        run_after = timezone.make_naive(run_after)
    values: dict[str, Any] = {
        "priority": job.priority,
        "queue_name": job.tenant or DEFAULT_QUEUE,
        "run_after": run_after,
        "backend": backend,
    }
    changed = {key: value for key, value in values.items() if getattr(base, key) != value}
    if not changed:
        return base
    # Not Task.using(): it validates again, and a job stays readable after a task's
    # queue was removed from QUEUES.
    task = object.__new__(type(base))
    for field in dataclasses.fields(base):
        object.__setattr__(task, field.name, changed.get(field.name, getattr(base, field.name)))
    return task


def _use_tz() -> bool:
    from django.conf import settings

    return bool(settings.USE_TZ)


def _aware(value: datetime | None) -> datetime | None:
    """``run_after`` as skiplock takes due times: aware (a naive one is in Django's
    current time zone, as with ``USE_TZ = False``)."""
    if value is None or timezone.is_aware(value):
        return value
    return timezone.make_aware(value)


def run_after_text(value: datetime | None) -> str | None:
    """``run_after`` as the job's payload keeps it (ISO 8601, aware)."""
    aware = _aware(value)
    return None if aware is None else aware.isoformat()


# ---- one runtime per backend alias and configuration --------------------------------------

_runtimes: dict[str, Runtime] = {}
_runtimes_lock = threading.Lock()


def runtime_for(config: BackendConfig) -> Runtime:
    """The process's runtime of ``config``'s backend alias; a new one (the previous one's
    pool closed) when the alias's configuration changed (``override_settings``)."""
    runtime = _runtimes.get(config.alias)
    if runtime is not None and runtime.config == config:
        return runtime
    with _runtimes_lock:
        runtime = _runtimes.get(config.alias)
        if runtime is None or runtime.config != config:
            old, runtime = runtime, Runtime(config)
            _runtimes[config.alias] = runtime
            if old is not None:
                with contextlib.suppress(Exception):
                    old.close()
        return runtime
