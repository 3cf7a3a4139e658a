"""``SkiplockBackend``: Django's task backend API over skiplock (docs/django.md)."""

from __future__ import annotations

import contextlib
import difflib
import functools
import importlib
import uuid
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import autodiscover_modules

from skiplock.core import ValidationError
from skiplock.core.rules import check_kind, check_tenant

from ._config import BackendConfig, parse_options
from ._results import TaskCall, stored_time, task_result
from ._runtime import (
    Runtime,
    known_tasks,
    remember_task,
    resolve_task,
    run_after_text,
    runtime_for,
    task_for,
    tasks_in_module,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from datetime import datetime

    from django.tasks.base import Task

    from skiplock.adapters.psycopg import PsycopgJobStore
    from skiplock.core import Job
    from skiplock.engine import Engine, Worker

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The idempotency-key prefix of jobs enqueued in ``ON_COMMIT`` mode (their result id is
#: the rest of the key).
ON_COMMIT_KEY_PREFIX = "django-task:"


class SkiplockBackend(BaseTaskBackend):
    """A ``django.tasks`` backend storing tasks as skiplock jobs in PostgreSQL.

    Configure it in ``settings.TASKS`` (``OPTIONS`` in docs/django.md). A task's job has
    the task function's module path as its kind, the task's queue name as its tenant and
    its priority (Django's [-100, 100], larger runs sooner, as in skiplock). Enqueue
    writes on Django's connection of ``OPTIONS["DATABASE"]``: inside ``atomic()`` the job
    commits or rolls back with the block. With ``OPTIONS["ON_COMMIT"]`` naming another
    alias, the job is written when that alias's transaction commits instead.

    Results are read back from the job (:meth:`get_result`): READY (pending), RUNNING,
    SUCCESSFUL, or FAILED (dead, failed or cancelled), with the return value, one error
    per failed attempt and the workers' ids. Run workers with ``manage.py
    skiplock_worker``, or :meth:`worker` in code and tests.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._params = params

    # ---- configuration ------------------------------------------------------------------

    @functools.cached_property
    def config(self) -> BackendConfig:
        """The parsed ``OPTIONS``; ImproperlyConfigured (naming the key) if invalid."""
        return parse_options(self.alias, self.options)

    @property
    def runtime(self) -> Runtime:
        return runtime_for(self.config)

    @property
    def engine(self) -> Engine:
        """The skiplock engine of this backend (admin operations, ``engine.health()``)."""
        return self.runtime.engine

    @property
    def store(self) -> PsycopgJobStore:
        """The engine's store (its own pool, made from ``OPTIONS["DSN"]`` or Django's
        settings of the queue's database)."""
        return self.runtime.store

    # ---- Django's backend API ---------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        """Django's checks, then skiplock's: the module path must be a valid kind and the
        queue name a valid tenant. A valid task is remembered: workers of this process
        run its jobs."""
        super().validate_task(task)
        try:
            check_kind(task.module_path)
            check_tenant("queue_name", task.queue_name)
        except ValidationError as exc:
            raise InvalidTask(str(exc)) from None
        remember_task(task)

    def enqueue(
        self, task: Task[_P, _R], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> TaskResult[_P, _R]:
        """Create ``task``'s job and return its READY result.

        The job joins the transaction of Django's connection to ``OPTIONS["DATABASE"]``
        (never committed here), and ``task_enqueued`` is sent once it is written. In
        ``ON_COMMIT`` mode it is written when that alias's transaction commits (at once
        outside one); the result's id exists already.
        """
        self.validate_task(task)
        config = self.config
        call = TaskCall(
            args=cast("list[Any]", normalize_json(list(args))),
            kwargs=cast("dict[str, Any]", normalize_json(dict(kwargs))),
            run_after=run_after_text(task.run_after),
        )
        runtime = self.runtime
        if config.on_commit is None:
            written = runtime.write(task, call)
            # The time the row was written with: what get_result() reads back.
            enqueued_at = written.created_at
            result = self._new_result(task, call, str(written.id), enqueued_at)
            task_enqueued.send(type(self), task_result=result)
            return result
        key = uuid.uuid4().hex
        result = self._new_result(task, call, key)

        def write() -> None:
            written = runtime.write(task, call, idempotency_key=ON_COMMIT_KEY_PREFIX + key)
            # The hook knows the id: get_result() of this key needs no lookup by key.
            runtime.wrote(key, written.id)
            task_enqueued.send(type(self), task_result=result)

        transaction.on_commit(write, using=config.on_commit)
        return result

    def _new_result(
        self,
        task: Task[_P, _R],
        call: TaskCall,
        result_id: str,
        enqueued_at: datetime | None = None,
    ) -> TaskResult[_P, _R]:
        return TaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus.READY,
            enqueued_at=timezone.now() if enqueued_at is None else stored_time(enqueued_at),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=call.args,
            kwargs=call.kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The result of the job ``result_id`` names, read on Django's connection (so
        inside ``atomic()`` it sees the block's own enqueues). TaskResultDoesNotExist if
        there is no such job (purged by retention, deleted) or it is no Django task."""
        runtime = self.runtime
        text = str(result_id)
        job = None
        if text.isdigit():
            job_id = int(text)
            job = None if job_id > 2**63 - 1 else runtime.read(job_id)
        elif len(text) == 32 and all(c in "0123456789abcdef" for c in text):
            job = self._on_commit_job(runtime, text)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        base = resolve_task(job.kind)
        if base is None or not isinstance(job.payload, dict):
            raise TaskResultDoesNotExist(f"{result_id}: job {job.id} is not a Django task")
        try:
            call = TaskCall(**job.payload)
        except TypeError:
            raise TaskResultDoesNotExist(
                f"{result_id}: job {job.id} has no Django task payload"
            ) from None
        task = task_for(base, job, call, backend=self.alias)
        return task_result(job, task, backend=self.alias, result_id=text)

    @staticmethod
    def _on_commit_job(runtime: Runtime, key: str) -> Job | None:
        """The job an ``ON_COMMIT`` enqueue wrote with ``key``: by the id its write in
        this process returned, else (written by another process) looked up by key."""
        full = ON_COMMIT_KEY_PREFIX + key
        known = runtime.written_id(key)
        if known is not None:
            job = runtime.read(known)
            if job is not None and job.idempotency_key == full:
                return job
        job_id = runtime.job_id_for_key(full)
        return None if job_id is None else runtime.read(job_id)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """The backend's configuration (run by ``manage.py check``): ``OPTIONS``, the
        queue's database (PostgreSQL through psycopg 3) and its PgBouncer mode."""
        messages: list[checks.CheckMessage] = list(super().check(**kwargs))
        try:
            config = self.config
        except ImproperlyConfigured as exc:
            return [*messages, checks.Error(str(exc), obj=self.alias, id="skiplock.E001")]
        return [*messages, *_database_checks(self.alias, config), *_task_checks(self.alias, config)]

    def close(self) -> None:
        """Close the store's pool (workers, admin actions and health checks open it) in
        this process; the next use opens a new one. Call it before dropping the
        database, e.g. at the end of a test run."""
        self.runtime.close()

    # ---- workers -----------------------------------------------------------------------------

    def worker_engine(self) -> Engine:
        """The backend's engine with a processor for every Django task this process knows
        (import your tasks modules first): what ``manage.py skiplock_worker`` runs."""
        return self.runtime.worker_engine()

    def worker(
        self,
        *,
        queues: Iterable[str] | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
        install_signal_handlers: bool = False,
    ) -> Worker:
        """A skiplock :class:`~skiplock.Worker` running the jobs of every Django task this
        process knows (import your tasks modules first), only those in ``queues`` if
        given. ``worker.run_until_idle()`` runs what is due (tests);
        ``with worker.in_background():`` runs it beside your code."""
        return self.worker_engine().worker(
            concurrency=concurrency,
            tenants=None if queues is None else frozenset(queues),
            worker_id=worker_id,
            install_signal_handlers=install_signal_handlers,
        )


def _task_checks(alias: str, config: BackendConfig) -> Iterable[checks.CheckMessage]:
    """E005: an ``OPTIONS["TASKS"]`` key that names no Django task (its policy would never
    apply), with the close matches among the tasks of the installed apps."""
    unknown = [path for path in config.tasks if resolve_task(path) is None]
    if not unknown:
        return
    autodiscover_modules("tasks")  # the tasks a worker would know
    for module in config.modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    candidates = set(known_tasks())
    for path in unknown:
        candidates |= set(tasks_in_module(path.rpartition(".")[0]))
    for path in unknown:
        close = _close_matches(path, candidates)
        yield checks.Error(
            f"TASKS[{alias!r}]['OPTIONS']['TASKS'] has options for {path!r}, which is no "
            "Django task: they never apply",
            hint=(
                f"Did you mean {' or '.join(map(repr, close))}? "
                if close
                else "Keys are the module paths of @task functions (task.module_path). "
            )
            + "Remove the entry or fix the path.",
            obj=alias,
            id="skiplock.E005",
        )


def _close_matches(path: str, candidates: set[str]) -> list[str]:
    """The task paths ``path`` may have meant: by name among the tasks of its module, else
    by the whole path (paths share long prefixes, so the bar is high)."""
    module, _, name = path.rpartition(".")
    siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == module}
    close = [siblings[found] for found in difflib.get_close_matches(name, siblings, n=3)]
    return close or difflib.get_close_matches(path, sorted(candidates), n=3, cutoff=0.85)


def _database_checks(alias: str, config: BackendConfig) -> Iterable[checks.CheckMessage]:
    for database in dict.fromkeys(filter(None, (config.database, config.on_commit))):
        vendor = connections[database].vendor
        if vendor != "postgresql":
            yield checks.Error(
                f"TASKS[{alias!r}]: database {database!r} is {vendor}; skiplock needs PostgreSQL",
                obj=alias,
                id="skiplock.E002",
            )
            return
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        yield checks.Error(
            f"TASKS[{alias!r}]: Django connects with psycopg2; skiplock enqueues on Django's "
            "connection through psycopg 3",
            hint="pip install 'skiplock[psycopg]' (psycopg 3); Django prefers it when installed",
            obj=alias,
            id="skiplock.E003",
        )
    if (
        config.pgbouncer_mode == "transaction"
        and config.dsn is None
        and config.pool.get("statement_timeout") is not None
    ):
        yield checks.Error(
            f"TASKS[{alias!r}]: database {config.database!r} goes through PgBouncer in "
            "transaction pooling, where skiplock's pool cannot set "
            "OPTIONS['POOL']['statement_timeout'] (a session setting)",
            hint=(
                "Set statement_timeout on the role or database (ALTER ROLE ... SET "
                "statement_timeout), or set OPTIONS['DSN'] to a direct connection to "
                "PostgreSQL. Set OPTIONS['PGBOUNCER'] = 'session' if "
                "DISABLE_SERVER_SIDE_CURSORS is set for another reason."
            ),
            obj=alias,
            id="skiplock.E004",
        )
