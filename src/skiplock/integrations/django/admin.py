"""The Django admin of skiplock: jobs (filters by state, kind and tenant; actions retry,
cancel, mark failed and delete), workers and the audit trail, all read-only views.

The actions go through the admin backend's engine, as its operator acting as the admin
user (``engine.operator(username)``: skiplock's admin operations, their rules and error
messages, the username as the audit trail's actor), one job at a time. They need the
``change`` permission on jobs (delete: ``delete``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.auth.models import AnonymousUser, PermissionsMixin
from django.utils.html import format_html, format_html_join

from skiplock.core import InvalidTransitionError, JobNotFoundError, StoreError

from ._schema import admin_backend
from .models import AuditEvent, Job, Worker

if TYPE_CHECKING:
    from collections.abc import Callable

    from django.db.models import QuerySet
    from django.http import HttpRequest
    from django.utils.safestring import SafeString

    from skiplock.engine import Operator

    from ._backend import SkiplockBackend


def admin_task_backend() -> SkiplockBackend:
    """The skiplock backend whose jobs the admin shows (see ``admin_backend``)."""
    from django.tasks import task_backends

    from ._backend import SkiplockBackend

    alias = admin_backend()[0]
    backend = task_backends[alias or "default"]
    if not isinstance(backend, SkiplockBackend):
        raise TypeError("settings.TASKS has no skiplock backend")
    return backend


def _has_perm(request: HttpRequest, permission: str) -> bool:
    user = request.user
    return isinstance(user, PermissionsMixin | AnonymousUser) and user.has_perm(permission)


class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Lists and detail pages only: skiplock's tables change through skiplock."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(admin_backend()[1])

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "kind",
        "tenant",
        "state",
        "priority",
        "attempts",
        "max_attempts",
        "available_at",
        "created_at",
        "completed_at",
    )
    list_filter = ("state", "kind", "tenant")
    search_fields = ("=id", "kind", "idempotency_key")
    actions = ("retry", "cancel", "mark_failed", "delete")
    readonly_fields = ("django_task",)

    # ---- permissions of the actions -----------------------------------------------------

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Retry, cancel, mark failed: the ``change`` permission on jobs."""
        return _has_perm(request, "skiplock.change_job")

    def has_remove_permission(self, request: HttpRequest) -> bool:
        """Delete: the ``delete`` permission on jobs."""
        return _has_perm(request, "skiplock.delete_job")

    # ---- actions ---------------------------------------------------------------------------

    @admin.action(description="Retry the selected jobs (start over)", permissions=["operate"])
    def retry(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, "retried", lambda ops, job_id: ops.retry_job(job_id))

    @admin.action(description="Cancel the selected jobs", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, "cancelled", lambda ops, job_id: ops.cancel_job(job_id))

    @admin.action(description="Mark the selected jobs failed", permissions=["operate"])
    def mark_failed(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, "marked failed", lambda ops, job_id: ops.fail_job(job_id))

    @admin.action(description="Delete the selected jobs (not running)", permissions=["remove"])
    def delete(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._each(request, queryset, "deleted", lambda ops, job_id: ops.delete_job(job_id))

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        done_verb: str,
        operation: Callable[[Operator, int], object],
    ) -> None:
        # The engine's operator acting as the admin user: the audit trail names them.
        ops = admin_task_backend().engine.operator(request.user.get_username())
        done: list[int] = []
        refused: list[str] = []
        for job_id in sorted(queryset.values_list("id", flat=True)):
            try:
                operation(ops, job_id)
            except (InvalidTransitionError, JobNotFoundError, StoreError) as exc:
                refused.append(f"job {job_id}: {exc}")
            else:
                done.append(job_id)
        if done:
            ids = ", ".join(map(str, done))
            self.message_user(request, f"{done_verb} {len(done)} job(s): {ids}", messages.SUCCESS)
        for problem in refused:
            self.message_user(request, problem, messages.WARNING)

    # ---- the detail page -------------------------------------------------------------------

    @admin.display(description="Django task")
    def django_task(self, job: Job) -> SafeString | str:
        """The job as Django's TaskResult: status, workers, return value, errors."""
        from django.tasks.exceptions import TaskResultDoesNotExist

        try:
            result = admin_task_backend().get_result(str(job.id))
        except (TaskResultDoesNotExist, TypeError):
            return "-"
        value = result.return_value if result.status == "SUCCESSFUL" else None
        errors = format_html_join(
            "",
            "<p>{}</p><pre>{}</pre>",
            ((e.exception_class_path, e.traceback) for e in result.errors),
        )
        return format_html(
            "<p>{} {} (status {}, {} attempt(s); workers: {})</p><p>return value: {}</p>{}",
            result.task.module_path,
            result.task.queue_name,
            result.status,
            result.attempts,
            ", ".join(result.worker_ids) or "-",
            repr(value),
            errors,
        )


@admin.register(Worker)
class WorkerAdmin(ReadOnlyAdmin):
    list_display = ("id", "host", "pid", "kinds", "tenants", "started_at", "heartbeat_at")
    search_fields = ("id", "host")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "at", "job_id", "action", "actor")
    list_filter = ("action", "actor")
    search_fields = ("=job_id", "actor")
