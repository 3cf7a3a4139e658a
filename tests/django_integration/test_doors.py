"""``manage.py skiplock <command>`` and ``manage.py skiplock_worker|skiplock_health|
skiplock_schema|skiplock_metrics`` mount the ``skiplock`` command tree: the same options,
the same messages and the same exit statuses as ``skiplock`` (tests/integrations has the
same test for ``flask skiplock``; test_command_tree.py compares the parsers)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tests.django_integration.helpers import django_command
from tests.doors import (
    MOUNTED,
    PARSE_ERROR,
    USAGE_ERROR,
    Outcome,
    assert_refused_alike,
    standalone_options,
    usage_options,
)

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("jobs")]

#: The options of every Django management command, and the one the skiplock commands add.
DJANGO_OWN = frozenset(
    {
        "-h",
        "--version",
        "-v",
        "--settings",
        "--pythonpath",
        "--traceback",
        "--no-color",
        "--force-color",
        "--skip-checks",
        "--backend",
        "--queue-name",  # the worker's: Django's word for --tenants
    }
)


def manage(command: str, *arguments: str) -> Outcome:
    """``manage.py skiplock_<command> <arguments>``."""
    done = django_command(f"skiplock_{command}", *arguments)
    return Outcome(done.returncode, done.stdout, done.stderr)


def manage_skiplock(*arguments: str) -> Outcome:
    """``manage.py skiplock <arguments>``."""
    done = django_command("skiplock", *arguments)
    return Outcome(done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("command", ["worker", "health", "schema", "metrics"])
def test_manage_py_offers_the_options_of_skiplock(command: str) -> None:
    helped = manage(command, "--help")
    assert helped.status == 0, helped.stderr
    assert usage_options(helped.stdout) - DJANGO_OWN == standalone_options(command) - {"-h"}


@pytest.mark.parametrize("command", MOUNTED)
def test_manage_py_skiplock_offers_the_options_of_skiplock(command: str) -> None:
    helped = manage_skiplock(command, "--help")
    assert helped.status == 0, helped.stderr
    assert f" skiplock {command} [-h]" in helped.stdout.split("\n\n", 1)[0]
    assert usage_options(helped.stdout) - DJANGO_OWN == standalone_options(command) - {"-h"}


@pytest.mark.parametrize("arguments", [PARSE_ERROR, USAGE_ERROR])
def test_manage_py_refuses_alike(arguments: tuple[str, ...]) -> None:
    command, *rest = arguments
    assert_refused_alike(arguments, manage(command, *rest))
    assert_refused_alike(arguments, manage_skiplock(*arguments))


def test_manage_py_metrics_prints_one_scrape() -> None:
    done = manage("metrics", "print")
    if find_spec("prometheus_client") is None:
        assert done.status == 2
        assert "pip install 'skiplock[prometheus]'" in done.error
    else:
        assert done.status == 0, done.stderr
        assert "skiplock_up 1.0" in done.stdout


@pytest.mark.parametrize(("command", "action"), [("schema", "apply"), ("metrics", "serve")])
def test_manage_py_shows_an_actions_own_help(command: str, action: str) -> None:
    helped = manage(command, action, "--help")
    assert helped.status == 0, helped.stderr
    usage = helped.stdout.split("\n\n", 1)[0]
    assert f" skiplock_{command} {action} [-h]" in usage, usage
    assert "{apply," not in usage  # not the list of actions
    assert "{print," not in usage
    # Django's own options and --backend are the action's too.
    assert {"--backend", "--settings"} <= usage_options(helped.stdout)


def test_manage_py_adds_lists_and_drops_a_search_index() -> None:
    # On the backend's own store (Django's database and the backend's schema).
    added = manage_skiplock("schema", "index", "add", "payload")
    assert added.status == 0, added.stderr
    assert added.stdout.splitlines()[-1] in {
        "search index 'payload' (jobs_payload_search_idx) built",
        "search index 'payload' (jobs_payload_search_idx) already exists",
    }
    listed = manage_skiplock("schema", "index")
    assert listed.status == 0, listed.stderr
    states = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines()[2:]}
    assert states["payload"] == "present"
    dropped = manage_skiplock("schema", "index", "drop", "payload")
    assert dropped.status == 0, dropped.stderr
    assert dropped.stdout.splitlines()[-1] == (
        "search index 'payload' (jobs_payload_search_idx) dropped"
    )
