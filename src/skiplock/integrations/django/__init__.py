"""Django: a ``django.tasks`` backend that enqueues in the view's transaction, and the
``skiplock`` app (migrations, read-only models, admin, management commands, checks).

``TASKS = {"default": {"BACKEND": "skiplock.integrations.django.SkiplockBackend"}}``
and ``"skiplock.integrations.django"`` in ``INSTALLED_APPS``; see docs/django.md. Needs
Django 6 (Python 3.12+) and psycopg 3 (``pip install 'skiplock[django]'``).
"""

from __future__ import annotations

from ._requires import require

require()  # before Django is imported: an ImportError that says what to install

from ._backend import SkiplockBackend  # noqa: E402
from ._results import TaskCall, error_from_text, task_result  # noqa: E402

__all__ = ["SkiplockBackend", "TaskCall", "error_from_text", "task_result"]
