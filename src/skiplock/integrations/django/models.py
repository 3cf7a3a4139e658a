"""Read-only views of skiplock's tables for the admin and your queries.

Unmanaged: skiplock's migrations own the tables (Django creates or alters none of them).
The tables are those of the admin's backend (:func:`admin_backend`: ``schema``.jobs,
.workers, .audit), read on its ``OPTIONS["DATABASE"]`` (``Job.objects`` queries it).
Saving or deleting through these models is refused: change jobs through the engine's
admin operations (``backend.engine.retry_job(...)``), which keep skiplock's rules (a
running job is not deleted, a transition must be allowed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from django.db import models

from skiplock.core import JobState

from ._schema import admin_backend, database, table

if TYPE_CHECKING:
    from datetime import datetime


if TYPE_CHECKING:
    _TextArrayBase = models.Field[list[str] | None, list[str] | None]
else:  # Django's fields are generic for type checkers only
    _TextArrayBase = models.Field


class TextArrayField(_TextArrayBase):
    """A PostgreSQL ``text[]`` column read as a list of str (or None); without
    ``django.contrib.postgres``, which ``ArrayField`` needs in ``INSTALLED_APPS``."""

    description = "text[]"

    def db_type(self, connection: Any) -> str:
        return "text[]"


_M = TypeVar("_M", bound=models.Model)


class SkiplockManager(models.Manager[_M]):
    """Queries on the database that holds skiplock's tables (``OPTIONS["DATABASE"]`` of
    the admin's backend): ``Job.objects.filter(...)`` needs no ``.using()``."""

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().using(database())


class ReadOnlyModel(models.Model):
    """A view of a skiplock table: never saved or deleted through Django."""

    class Meta:
        abstract = True
        managed = False  # skiplock's migrations own the tables

    def save(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is read-only: change jobs through skiplock's admin "
            "operations (e.g. backend.engine.retry_job(job_id))"
        )

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(
            f"{type(self).__name__} is read-only: delete jobs with "
            "backend.engine.delete_job(job_id)"
        )


class Job(ReadOnlyModel):
    """A job (``schema``.jobs): a Django task's has the task's module path as ``kind`` and
    its queue name as ``tenant``."""

    objects: ClassVar[SkiplockManager[Job]] = SkiplockManager()

    STATES: ClassVar[list[tuple[str, str]]] = [(s.value, s.value) for s in JobState]

    id: models.BigIntegerField[int, int] = models.BigIntegerField(primary_key=True)
    kind: models.TextField[str, str] = models.TextField()
    tenant: models.TextField[str | None, str | None] = models.TextField(
        db_column="tenant_id", null=True, verbose_name="tenant (queue)"
    )
    state: models.TextField[str, str] = models.TextField(db_column="status", choices=STATES)
    priority: models.SmallIntegerField[int, int] = models.SmallIntegerField()
    payload: models.JSONField[Any, Any] = models.JSONField(null=True)
    attempts: models.IntegerField[int, int] = models.IntegerField()
    max_attempts: models.IntegerField[int, int] = models.IntegerField()
    available_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    created_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    claimed_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    claimed_by: models.TextField[str | None, str | None] = models.TextField(null=True)
    completed_at: models.DateTimeField[datetime | None, datetime | None] = models.DateTimeField(
        null=True
    )
    last_error: models.TextField[str | None, str | None] = models.TextField(null=True)
    idempotency_key: models.TextField[str | None, str | None] = models.TextField(null=True)

    class Meta(ReadOnlyModel.Meta):
        db_table = table("jobs")
        ordering: ClassVar[list[str]] = ["-id"]
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} ({self.kind}, {self.state})"


class Worker(ReadOnlyModel):
    """A registered worker (``schema``.workers), kept alive by its heartbeats."""

    objects: ClassVar[SkiplockManager[Worker]] = SkiplockManager()

    id: models.TextField[str, str] = models.TextField(primary_key=True)
    host: models.TextField[str, str] = models.TextField()
    pid: models.IntegerField[int, int] = models.IntegerField()
    started_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    heartbeat_at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    kinds: TextArrayField = TextArrayField(null=True)
    tenants: TextArrayField = TextArrayField(null=True, verbose_name="tenants (queues)")

    class Meta(ReadOnlyModel.Meta):
        db_table = table("workers")
        ordering: ClassVar[list[str]] = ["id"]
        verbose_name = "worker"

    def __str__(self) -> str:
        return str(self.id)


class AuditEvent(ReadOnlyModel):
    """One audited change of a job (``schema``.audit), with the actor that made it."""

    objects: ClassVar[SkiplockManager[AuditEvent]] = SkiplockManager()

    id: models.BigIntegerField[int, int] = models.BigIntegerField(primary_key=True)
    at: models.DateTimeField[datetime, datetime] = models.DateTimeField()
    job_id: models.BigIntegerField[int | None, int | None] = models.BigIntegerField(null=True)
    action: models.TextField[str, str] = models.TextField()
    actor: models.TextField[str | None, str | None] = models.TextField(null=True)
    details: models.JSONField[Any, Any] = models.JSONField(null=True)

    class Meta(ReadOnlyModel.Meta):
        db_table = table("audit")
        ordering: ClassVar[list[str]] = ["-id"]
        verbose_name = "audit event"

    def __str__(self) -> str:
        return f"{self.action} of job {self.job_id} by {self.actor}"


__all__ = ["AuditEvent", "Job", "Worker", "admin_backend", "database", "table"]
