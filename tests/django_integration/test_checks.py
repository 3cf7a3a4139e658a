"""``python -m django check`` with the app installed reports skiplock's system checks."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.django_integration.helpers import django_command, settings_module

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.postgres


def check(tmp_path: Path, code: str = "", *arguments: str) -> tuple[int, str]:
    env = settings_module(tmp_path, "check_settings", code)
    done = django_command("check", *arguments, env=env)
    return done.returncode, done.stdout + done.stderr


def test_a_configured_project_has_no_issues(tmp_path: Path) -> None:
    status, output = check(tmp_path)
    assert (status, output.strip()) == (0, "System check identified no issues (0 silenced).")


def test_invalid_options_are_an_error_naming_the_key(tmp_path: Path) -> None:
    status, output = check(tmp_path, 'TASKS["default"]["OPTIONS"]["SCHEMA"] = "Bad-Name"')
    assert status == 1
    assert "skiplock.E001" in output
    assert "TASKS['default']['OPTIONS']['SCHEMA']: invalid identifier 'Bad-Name'" in output


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ('TASKS["default"]["OPTIONS"]["COLOUR"] = "blue"', "unknown key(s) ['COLOUR']"),
        ('TASKS["default"]["OPTIONS"]["DATABASE"] = "nowhere"', "'nowhere' is not an alias"),
        ('TASKS["default"]["OPTIONS"]["SETTINGS"] = {"concurrency": 0}', "concurrency"),
        (
            'TASKS["default"]["OPTIONS"]["TASKS"] = {"app.tasks.x": {"priority": 3}}',
            "['priority'] cannot be set here",
        ),
        (
            'TASKS["default"]["OPTIONS"]["TASKS"] = {"app.tasks.x": {"max_attempts": 0}}',
            "max_attempts",
        ),
    ],
)
def test_each_invalid_option_is_reported(tmp_path: Path, code: str, message: str) -> None:
    status, output = check(tmp_path, code)
    assert status == 1
    assert "skiplock.E001" in output
    assert message in output


def test_the_app_without_a_skiplock_backend_is_a_warning(tmp_path: Path) -> None:
    code = (
        'TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", '
        '"QUEUES": []}}'
    )
    status, output = check(tmp_path, code)
    assert status == 0
    assert "skiplock.W001" in output


def test_pgbouncer_transaction_pooling_refuses_only_a_pool_statement_timeout(
    tmp_path: Path,
) -> None:
    # The store runs with pgbouncer=True there: only a session setting cannot pass.
    code = 'DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True'
    assert check(tmp_path, code)[0] == 0
    timeout = f'{code}\nTASKS["default"]["OPTIONS"]["POOL"] = {{"statement_timeout": 5}}'
    status, output = check(tmp_path, timeout)
    assert status == 1
    assert "skiplock.E004" in output
    assert "transaction pooling" in output
    direct = 'TASKS["default"]["OPTIONS"]["DSN"] = "postgresql://postgres@127.0.0.1/app"'
    assert check(tmp_path, f"{timeout}\n{direct}")[0] == 0
    session = 'TASKS["default"]["OPTIONS"]["PGBOUNCER"] = "session"'
    assert check(tmp_path, f"{timeout}\n{session}")[0] == 0


def test_a_database_that_is_not_postgresql_is_an_error(tmp_path: Path) -> None:
    code = (
        'DATABASES["queue"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}\n'
        'TASKS["default"]["OPTIONS"]["DATABASE"] = "queue"'
    )
    status, output = check(tmp_path, code)
    assert status == 1
    assert "skiplock.E002" in output


@pytest.mark.django_db
def test_the_database_check_reads_the_schema(tmp_path: Path) -> None:
    status, output = check(tmp_path, "", "--database", "default")
    assert (status, output.strip()) == (0, "System check identified no issues (0 silenced).")


def test_options_for_a_task_that_does_not_exist_are_an_error_with_close_matches(
    tmp_path: Path,
) -> None:
    code = (
        'TASKS["default"]["OPTIONS"]["TASKS"] = {'
        '"tests.django_integration.testapp.tasks.flakey": {"max_attempts": 2}, '
        '"nowhere.tasks.x": {"max_attempts": 2}}'
    )
    status, output = check(tmp_path, code)
    assert status == 1
    assert output.count("skiplock.E005") == 2
    assert "'tests.django_integration.testapp.tasks.flakey', which is no Django task" in output
    assert "Did you mean 'tests.django_integration.testapp.tasks.flaky'? " in output
    assert "'nowhere.tasks.x', which is no Django task" in output


def urlconf(tmp_path: Path, *entries: str) -> str:
    """Settings whose ROOT_URLCONF includes ``entries`` (``path(...)`` calls) in module
    ``check_urls`` beside them."""
    (tmp_path / "check_urls.py").write_text(
        "from django.urls import include, path, re_path\n"
        "from skiplock.integrations.django import urls as skiplock_urls\n"
        f"urlpatterns = [{', '.join(entries)}]\n",
        encoding="utf-8",
    )
    return 'ROOT_URLCONF = "check_urls"'


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            (
                'path("ops/", include(skiplock_urls.rest_api()))',
                'path("ops/", include(skiplock_urls.dashboard()))',
            ),
            "the dashboard included at '/ops' overlaps the REST API included at '/ops', which "
            "Django tries first and which answers '/ops/'",
        ),
        (
            (
                'path("ops/", include(skiplock_urls.dashboard()))',
                'path("ops/jobs/api/", include(skiplock_urls.rest_api()))',
            ),
            "the REST API included at '/ops/jobs/api' overlaps the dashboard included at "
            "'/ops', which Django tries first and which answers '/ops/jobs/api/jobs'",
        ),
        (
            (
                'path("ops/", include([path("", include(skiplock_urls.dashboard()))]))',
                're_path(r"^ops/", include(skiplock_urls.probes()))',
            ),
            "the probes included at '/ops/livez' overlaps the dashboard included at '/ops'",
        ),
        (
            (
                'path("ops/", include(skiplock_urls.probes()))',
                'path("ops/", include(skiplock_urls.probes(backend="default")))',
            ),
            "the probes included at '/ops/livez' overlaps the probes included at '/ops/livez'",
        ),
    ],
    ids=["same-prefix", "inside", "nested-includes", "same-probes"],
)
def test_a_door_that_a_door_before_it_answers_is_an_error_naming_both(
    tmp_path: Path, entries: tuple[str, ...], message: str
) -> None:
    status, output = check(tmp_path, urlconf(tmp_path, *entries))
    assert status == 1, output
    assert "skiplock.E006" in output
    assert message in output


def test_doors_at_their_own_prefixes_pass(tmp_path: Path) -> None:
    entries = (
        # docs/django-admin.md's layout: the API first, the dashboard has no path under api/.
        'path("ops/jobs/api/", include(skiplock_urls.rest_api()))',
        'path("ops/jobs/", include(skiplock_urls.dashboard()))',
        'path("ops/", include(skiplock_urls.probes()))',
        'path("<str:site>/ops/", include(skiplock_urls.rest_api()))',
    )
    status, output = check(tmp_path, urlconf(tmp_path, *entries))
    assert (status, output.strip()) == (0, "System check identified no issues (0 silenced).")
