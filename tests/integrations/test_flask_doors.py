"""``flask skiplock ...`` mounts the ``skiplock`` command tree: the same options, the
same messages and the same exit statuses as ``skiplock`` (tests/django_integration has
the same test for ``manage.py skiplock_*``)."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from skiplock import Engine, cli
from skiplock.adapters.psycopg import PsycopgJobStore
from skiplock.integrations.flask import Skiplock
from tests.doors import (
    MOUNTED,
    PARSE_ERROR,
    USAGE_ERROR,
    Outcome,
    assert_refused_alike,
    standalone_options,
    usage_options,
)


@pytest.fixture
def flask_skiplock() -> Flask:
    # A store on a database nobody reaches: nothing here connects.
    app = Flask("doors")
    Skiplock(app, engine=Engine(PsycopgJobStore("postgresql://nowhere/db")))
    return app


def flask(app: Flask, *arguments: str) -> Outcome:
    result = app.test_cli_runner().invoke(args=["skiplock", *arguments])
    return Outcome(result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize("command", MOUNTED)
def test_flask_skiplock_offers_the_options_of_skiplock(flask_skiplock: Flask, command: str) -> None:
    helped = flask(flask_skiplock, command, "--help")
    assert helped.status == 0
    assert helped.stdout.startswith(f"usage: flask skiplock {command} ")
    assert usage_options(helped.stdout) == standalone_options(command)


@pytest.mark.parametrize("arguments", [PARSE_ERROR, USAGE_ERROR])
def test_flask_skiplock_refuses_alike(flask_skiplock: Flask, arguments: tuple[str, ...]) -> None:
    assert_refused_alike(arguments, flask(flask_skiplock, *arguments))


def test_flask_skiplock_lists_every_mounted_command_with_its_summary(
    flask_skiplock: Flask,
) -> None:
    listed = flask(flask_skiplock, "--help")
    assert listed.status == 0
    for command in cli.MOUNTABLE:
        # click shortens a long help text in the listing: the summary's first words.
        line = rf"^  {command} +{re.escape(cli.summary(command)[:20])}"
        assert re.search(line, listed.stdout, re.MULTILINE), (command, listed.stdout)
