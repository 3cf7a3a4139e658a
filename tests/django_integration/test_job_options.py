"""Django's door to the job options: ``Task.using()`` takes what becomes a job's
priority, tenant and due time, and nothing else of skiplock's (tests/job_options.py says
why the other options do not apply; tests/drift/test_job_options.py checks that the
backend passes these on)."""

from __future__ import annotations

import inspect

from django.tasks import Task

from tests.job_options import DJANGO_USING, DJANGO_USING_OTHER


def test_task_using_takes_the_mapped_options_and_the_backend() -> None:
    parameters = set(inspect.signature(Task.using).parameters) - {"self"}
    assert parameters == set(DJANGO_USING) | DJANGO_USING_OTHER
