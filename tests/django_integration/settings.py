"""The Django project of the skiplock integration tests (pytest-django, real PostgreSQL).

The server is ``SKIPLOCK_TEST_DSN`` (as for every test); the database name is random per
test session (the test runner creates ``test_<name>``), or ``DJANGO_SKIPLOCK_TEST_DB`` for a
process that must use an existing one (a worker subprocess of a test).
"""

from __future__ import annotations

import os
import urllib.parse
import uuid
from typing import Any

_url = urllib.parse.urlsplit(
    os.environ.get("SKIPLOCK_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
)

DATABASES: dict[str, dict[str, Any]] = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("DJANGO_SKIPLOCK_TEST_DB")
        or f"skiplock_django_{uuid.uuid4().hex[:8]}",
        "USER": urllib.parse.unquote(_url.username or "postgres"),
        "PASSWORD": urllib.parse.unquote(_url.password or ""),
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or 5432),
    }
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "skiplock.integrations.django",
    "tests.django_integration.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

TASKS: dict[str, dict[str, Any]] = {
    "default": {
        "BACKEND": "skiplock.integrations.django.SkiplockBackend",
        "QUEUES": ["default", "emails", "reports"],
        "OPTIONS": {
            # Fast retries and polls, so that waits in the tests are short.
            "SETTINGS": {
                "poll_interval": 0.05,
                "backoff_base": 0.01,
                "backoff_cap": 0.05,
                "heartbeat_interval": 1,
                "shutdown_timeout": 5,
            },
            "TASKS": {
                "tests.django_integration.testapp.tasks.flaky": {"max_attempts": 5},
                "tests.django_integration.testapp.tasks.always_fails": {"max_attempts": 2},
                "tests.django_integration.testapp.tasks.slow": {"max_attempts": 1, "timeout": 3},
                "tests.django_integration.testapp.tasks.returns_object": {"max_attempts": 1},
                "tests.django_integration.testapp.tasks.exits": {"max_attempts": 1},
                "tests.django_integration.testapp.tasks.interrupted": {"max_attempts": 1},
            },
        },
    }
}

ROOT_URLCONF = "tests.django_integration.urls"
SECRET_KEY = "skiplock-tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ALLOWED_HOSTS = ["testserver", "localhost"]
