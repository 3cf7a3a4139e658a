"""The Django admin of skiplock: jobs (filters by state, kind and tenant; actions retry,
cancel, mark failed, delete, and pause or resume the kinds of the selected jobs),
workers and the audit trail, all read-only views.

The actions go through the admin backend's engine, as its operator acting as the admin
user (``engine.operator(username)``: skiplock's admin operations, their rules and error
messages, the username as the audit trail's actor), one job at a time. They need the
``change`` permission on jobs (delete: ``delete``); pausing and resuming kinds too.
Delete asks for confirmation first, on a page listing the selected jobs (Django's
convention), and deletes only the jobs that page listed.

The job list never counts the table: no ``SELECT count(*)``, neither of every job nor of
the filtered ones (:class:`UncountedPaginator` reads the rows up to the page shown plus
one, and the list says "at least N jobs" until the last page is reached). The kind and
tenant filters offer the kinds and tenants of the engine's ``counts()``, never a
``SELECT DISTINCT`` over the table. Failed, dead and cancelled jobs (by kind or tenant
too) are read through their own indexes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import PAGE_VAR
from django.contrib.auth.models import AnonymousUser, PermissionsMixin
from django.core.paginator import Paginator
from django.template.response import TemplateResponse
from django.utils.functional import cached_property
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


#: At most this many jobs are deleted by one confirmation (its page lists each).
MAX_CONFIRMED = 1000


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


class UncountedPaginator(Paginator):  # type: ignore[type-arg]
    """Pages of a changelist that never count the rows: ``count`` is the number of rows up
    to the page asked for (``page_number``) plus one if another row follows, read with
    ``LIMIT``/``OFFSET`` (the rows shown, and one more). ``exact`` says whether that is
    the real total (the page asked for is the last one) or only a lower bound."""

    def __init__(self, object_list: Any, per_page: int, *, page_number: int, **kwargs: Any):
        super().__init__(object_list, per_page, **kwargs)
        self.page_number = max(page_number, 1)
        self.exact = True

    @cached_property
    def count(self) -> int:
        start = (self.page_number - 1) * self.per_page
        seen = len(self.object_list[start : start + self.per_page + 1])
        self.exact = seen <= self.per_page
        return start + seen


def _kind_tenant_choices(pick: Callable[[str, str | None], str | None]) -> list[tuple[str, str]]:
    """The filter choices from the engine's counts (one row per state, kind and tenant:
    the reads the dashboard and the metrics use, not a scan of the jobs)."""
    counts = admin_task_backend().engine.counts()
    found = {pick(c.kind, c.tenant) for c in counts}
    return [(name, name) for name in sorted(n for n in found if n is not None)]


class KindFilter(admin.SimpleListFilter):
    """Jobs of one kind (``?kind=``), the kinds offered from the engine's counts."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return _kind_tenant_choices(lambda kind, _tenant: kind)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(kind=value)


class TenantFilter(admin.SimpleListFilter):
    """Jobs of one tenant (queue) (``?tenant=``), offered from the engine's counts."""

    title = "tenant (queue)"
    parameter_name = "tenant"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return _kind_tenant_choices(lambda _kind, tenant: tenant)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(tenant=value)


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
    list_filter = ("state", KindFilter, TenantFilter)
    search_fields = ("=id", "kind", "idempotency_key")
    # No count of the table or of the filtered jobs: see UncountedPaginator;
    # and no "show all" (a list as long as the table).
    show_full_result_count = False
    list_max_show_all = 0

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # kind <> '' holds for every job (jobs_kind_check); saying it lets PostgreSQL read
        # failed, dead and cancelled jobs through their list indexes (migration 0012),
        # newest first by id, instead of scanning for them.
        return super().get_queryset(request).exclude(kind="")

    def get_paginator(
        self,
        request: HttpRequest,
        queryset: Any,
        per_page: int,
        orphans: int = 0,
        allow_empty_first_page: bool = True,
    ) -> UncountedPaginator:
        try:
            number = int(request.GET.get(PAGE_VAR, 1))
        except ValueError:
            number = 1
        return UncountedPaginator(
            queryset,
            per_page,
            page_number=number,
            orphans=orphans,
            allow_empty_first_page=allow_empty_first_page,
        )

    actions = ("retry", "cancel", "mark_failed", "delete", "pause_kinds", "resume_kinds")
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
    def delete(self, request: HttpRequest, queryset: QuerySet[Job]) -> TemplateResponse | None:
        """Asks first, as Django's own delete action does: a page listing the selected
        jobs, whose button posts their ids back (``post=yes``); only those are deleted."""
        if request.POST.get("post") == "yes":
            self._each(request, queryset, "deleted", lambda ops, job_id: ops.delete_job(job_id))
            return None
        fields = ("id", "kind", "tenant", "state")
        jobs = list(queryset.order_by("id").values(*fields)[: MAX_CONFIRMED + 1])
        if len(jobs) > MAX_CONFIRMED:
            self.message_user(
                request,
                f"select at most {MAX_CONFIRMED} jobs to delete at once: the confirmation "
                "lists each (the dashboard's bulk actions work on a filter)",
                messages.ERROR,
            )
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete the selected jobs?",
            "subtitle": None,
            "opts": self.model._meta,
            "jobs": jobs,
            "running": sum(1 for job in jobs if job["state"] == "running"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/skiplock/job/delete_confirmation.html", context)

    @admin.action(description="Pause the kinds of the selected jobs", permissions=["operate"])
    def pause_kinds(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        # The kinds of stored jobs, not typed ones: no typo to refuse (unknown kinds).
        self._kinds(
            request,
            queryset,
            "paused",
            lambda ops, kind: ops.pause(kind=kind, allow_unknown_kind=True),
        )

    @admin.action(description="Resume the kinds of the selected jobs", permissions=["operate"])
    def resume_kinds(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        self._kinds(request, queryset, "resumed", lambda ops, kind: ops.resume(kind=kind))

    def _kinds(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        done_verb: str,
        operation: Callable[[Operator, str], object],
    ) -> None:
        """Pause or resume each kind of the selected jobs (every tenant's: the kind-wide
        pause of docs/controls.md, "Tenants, limits and pause"), as the admin user."""
        ops = admin_task_backend().engine.operator(request.user.get_username())
        kinds = sorted(set(queryset.values_list("kind", flat=True)))
        for kind in kinds:
            operation(ops, kind)
        self.message_user(
            request, f"{done_verb} {len(kinds)} kind(s): {', '.join(kinds)}", messages.SUCCESS
        )

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
