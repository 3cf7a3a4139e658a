"""The doors that enqueue and the job options each offers (skiplock.core.EnqueueFields,
declared once), with the reason for every option a door does not offer. The drift tests
hold each door to it: tests/drift/test_job_options.py (the engine, typed handles,
Django's call, the CLI), tests/integrations/test_job_options_rest.py (the REST body) and
tests/django_integration/test_job_options.py (Django's ``Task.using()``)."""

from __future__ import annotations

from skiplock.core import EnqueueFields

#: Every job option.
OPTIONS = frozenset(EnqueueFields.names())
#: The options of the due time (``enqueue_at``/``enqueue_after`` take it positionally).
DUE_TIME = OPTIONS - frozenset(EnqueueFields.names(due_time=False))

#: Django's ``Task.using()`` parameters that become job options, and which.
DJANGO_USING = {"priority": "priority", "queue_name": "tenant", "run_after": "available_at"}
#: ``Task.using()`` parameters that are no job option.
DJANGO_USING_OTHER = frozenset({"backend"})
#: Options the Django backend sets itself, never the application.
DJANGO_OWN = {
    "idempotency_key": "the backend's own in ON_COMMIT mode: the task result's id",
}
#: Options a Django task cannot set: Django's ``Task`` has no field for them (its fields
#: are Django's API, not skiplock's), so the kind's declaration and policy apply.
DJANGO_WITHOUT = {
    "delay": "Django's run_after is a point in time (available_at)",
    "max_attempts": "no Task field: the kind's policy (Settings.kinds) applies",
    "idempotency_scope": "the application sets no idempotency key",
    "idempotency_conflict": "the application sets no idempotency key",
    "concurrency_key": "no Task field: the kind's declared key applies, if any",
    "concurrency_limit": "no Task field: the kind's declared key applies, if any",
}

#: Why the command line offers none: it has no enqueue command (jobs come from
#: applications, the CLI acts on them). A new command that enqueues offers every option.
CLI_WITHOUT = "no command of the CLI enqueues"
