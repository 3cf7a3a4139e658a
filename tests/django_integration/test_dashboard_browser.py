"""The dashboard mounted in Django (``include(dashboard())``) in a real headless chromium,
served by Django's live server: a staff user with ``change_job`` retries a dead job from
its page (a form post through Django's CSRF middleware) and is the audit actor; a user
with ``view_job`` only sees no button and is refused a forged post.

The browser is Debian's chromium (tests/chromium.py; a missing one fails, never skips)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.test import Client

from skiplock.integrations.dashboard._render import version
from tests.chromium import browser  # noqa: F401  (the fixture)
from tests.django_integration.helpers import audit_actors, backend, with_options
from tests.django_integration.test_operator_urls import DASHBOARD, dead_job, user
from tests.django_integration.testapp import tasks

if TYPE_CHECKING:
    from collections.abc import Iterator

    from django.contrib.auth.models import User
    from playwright.sync_api import Browser, Page

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]


@pytest.fixture(scope="module", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    """Playwright's sync API keeps an event loop running in this thread, and Django's ORM
    refuses to run in a thread with one (SynchronousOnlyOperation) although nothing here
    is async: Django's documented switch, for this module's tests and their teardown."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        yield


@pytest.fixture
def signed_in(browser: Browser, live_server: Any) -> Iterator[Any]:  # noqa: F811
    """``signed_in(user)``: a page of a fresh browser context with ``user``'s Django
    session cookie (``force_login``)."""
    contexts = []

    def open_page(who: User) -> Page:
        client = Client()
        client.force_login(who)
        context = browser.new_context(base_url=live_server.url)
        contexts.append(context)
        cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": cookie, "url": live_server.url}]
        )
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def test_a_staff_user_retries_a_dead_job_and_is_the_actor(signed_in: Any) -> None:
    with with_options(SETTINGS={"audit": True}):
        job_id = dead_job()
        page = signed_in(user("alice", "view_job", "change_job"))
        assert page.goto(f"{DASHBOARD}/").ok
        page.goto(f"{DASHBOARD}/jobs/{job_id}")
        assert page.get_by_test_id("job-state").inner_text() == "dead"
        with page.expect_navigation() as navigation:
            page.get_by_test_id(f"retry-{job_id}").click()
        response = navigation.value
        assert response is not None
        assert response.ok, response.status
        assert tasks.always_fails.get_result(str(job_id)).status == "READY"
        assert audit_actors(job_id, "replay") == {"alice"}
        page.goto(f"{DASHBOARD}/jobs/{job_id}")
        assert page.get_by_test_id("job-state").inner_text() == "pending"


def test_a_user_without_change_job_is_refused(signed_in: Any) -> None:
    job_id = dead_job()
    page = signed_in(user("reader", "view_job"))
    page.goto(f"{DASHBOARD}/jobs/{job_id}")
    assert page.get_by_test_id("job-state").inner_text() == "dead"
    # No button that acts (the live bar's pause switch is every reader's).
    assert page.locator("button:not([data-live-toggle]), summary").count() == 0
    assert page.get_by_test_id("live-toggle").is_visible()  # the script ran under Django
    # A form posted anyway, complete as a writer's button (the reader's valid tokens,
    # Django's and the dashboard's; the job's state and version): only the permission
    # refuses it (with change_job, the same post retries the job).
    job = backend().engine.store.get(job_id)
    assert job is not None
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    with page.expect_navigation() as navigation:
        page.evaluate(
            """([action, fields]) => {
                const form = document.createElement("form");
                form.method = "post";
                form.action = action;
                for (const [name, value] of Object.entries(fields)) {
                    const field = document.createElement("input");
                    field.name = name;
                    field.value = value;
                    form.appendChild(field);
                }
                document.body.appendChild(form);
                form.submit();
            }""",
            [
                f"{DASHBOARD}/jobs/{job_id}/retry",
                {
                    "csrfmiddlewaretoken": cookies[settings.CSRF_COOKIE_NAME],
                    "csrf_token": cookies["skiplock_csrf"],
                    "state": job.state.value,
                    "version": version(job),
                    "next": "job",
                },
            ],
        )
    response = navigation.value
    assert response is not None
    assert response.status == 403
    assert b"CSRF" not in response.body()  # refused by the permission, not Django's CSRF
    assert tasks.always_fails.get_result(str(job_id)).status == "FAILED"
