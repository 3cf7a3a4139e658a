"""Every command of the tree, walked from the ``skiplock`` parser itself: each one's
``--help`` is its own, and each one that reaches PostgreSQL refuses a malformed DSN with
one line and exit status 1, no traceback, through psycopg and through asyncpg (issue 41);
so does ``worker APP`` when the application's factory builds the store."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from skiplock import Engine, cli
from skiplock.adapters.memory import InMemoryJobStore

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

#: A connection string neither libpq nor asyncpg can parse.
MALFORMED = "this is = not a dsn '"
#: One asyncpg parses only when it connects, then raises a plain ValueError.
BAD_PORT = "postgresql://postgres@127.0.0.1:notaport/postgres"
#: The arguments each command that reaches the database needs besides --dsn. A new
#: command fails test_every_database_command_is_listed until it is listed here.
NEEDS: dict[tuple[str, ...], list[str]] = {
    ("schema", "apply"): [],
    ("schema", "status"): [],
    ("schema", "index"): [],
    ("health",): [],
    ("jobs", "list"): [],
    ("jobs", "show"): ["1"],
    ("jobs", "why"): ["1"],
    ("jobs", "retry"): ["1"],
    ("jobs", "cancel"): ["1"],
    ("jobs", "fail"): ["1"],
    ("jobs", "delete"): ["1"],
    ("dlq",): [],
    ("dlq", "purge"): ["--yes"],
    ("counts",): [],
    ("retention",): [],
    ("metrics", "print"): [],
    ("metrics", "serve"): ["--port", "1"],
    ("pause",): ["--kind", "mail.send"],
    ("resume",): ["--kind", "mail.send"],
    ("paused",): [],
    ("limits", "list"): [],
    ("limits", "set"): ["--kind", "mail.send", "--rps", "1", "--burst", "1"],
    ("limits", "clear"): ["--kind", "mail.send"],
    ("concurrency", "list"): [],
    ("concurrency", "set"): ["--kind", "mail.send", "--limit", "1"],
    ("concurrency", "clear"): ["--kind", "mail.send"],
    ("workers",): [],
    ("drain-worker",): ["w1"],
    ("stop-worker",): ["w1"],
    ("demo",): ["--no-live"],
}
#: Commands that take --dsn but need no database.
NO_DATABASE = {("schema", "sql")}
#: Commands that need psycopg whatever else is installed.
PSYCOPG_ONLY = {("demo",)}


def _subparsers(
    parser: argparse.ArgumentParser,
) -> argparse._SubParsersAction[argparse.ArgumentParser] | None:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return found[0] if found else None


def _walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, bool]]:
    """Every command line of the tree: its words, its parser, and whether it is complete
    (runs as it is, not only with an action after it)."""
    subparsers = _subparsers(parser)
    actions = [a for a in parser._actions if a.dest == "action" and not a.option_strings]
    if actions and actions[0].choices is not None and subparsers is None:
        # A positional action (schema apply|sql|status): each one is a command line.
        yield path, parser, False
        for choice in actions[0].choices:
            yield (*path, str(choice)), parser, True
        return
    yield path, parser, subparsers is None or not subparsers.required
    if subparsers is not None:
        for name, child in subparsers.choices.items():
            yield from _walk(child, (*path, name))


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser, bool]]:
    return [entry for entry in _walk(cli.build_parser()) if entry[0]]


def _takes_dsn(parser: argparse.ArgumentParser) -> bool:
    return any("--dsn" in a.option_strings for a in parser._actions)


COMMANDS = [path for path, _, _ in _commands()]
DATABASE_COMMANDS = sorted(
    path
    for path, parser, complete in _commands()
    if complete and _takes_dsn(parser) and path not in NO_DATABASE
)


def test_the_walk_sees_the_whole_tree() -> None:
    assert {("schema", "apply"), ("jobs", "list"), ("dlq", "purge"), ("limits", "set")} <= set(
        COMMANDS
    )
    assert ("worker",) in COMMANDS


def test_every_database_command_is_listed() -> None:
    assert set(DATABASE_COMMANDS) == set(NEEDS)


# ---- --help ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_a_help_of_its_own(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    usage = " ".join(out.split("\n\n", 1)[0].split())
    assert usage.startswith(f"usage: skiplock {' '.join(path)} ") or usage == (
        f"usage: skiplock {' '.join(path)}"
    ), out
    if len(path) > 1:
        # The action's own words, not its parent's list of actions.
        assert "{" not in usage, out


def test_an_actions_help_lists_only_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["schema", "apply", "--help"]) == 0
    apply_help = capsys.readouterr().out
    assert "Run the pending migrations" in apply_help
    assert "--from" not in apply_help  # schema sql's
    assert cli.main(["schema", "sql", "--help"]) == 0
    assert "--from N" in capsys.readouterr().out
    assert cli.main(["metrics", "print", "--help"]) == 0
    assert "--port" not in capsys.readouterr().out  # metrics serve's
    assert cli.main(["schema", "--help"]) == 0  # before the action: the command's help
    assert "{apply,sql,status,index}" in capsys.readouterr().out


def test_a_doors_action_help_is_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    engine = Engine(InMemoryJobStore())
    assert cli.run_mounted("schema", ["apply", "--help"], engine, prog="flask skiplock schema") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: flask skiplock schema apply [-h]")
    assert "--dsn" not in out  # the door supplies the engine


# ---- a malformed DSN ----------------------------------------------------------------------


def _use(driver: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reach PostgreSQL with ``driver``: psycopg, or asyncpg where psycopg is hidden (as in
    an image without the extra)."""
    if driver == "psycopg":
        return
    for name in list(sys.modules):
        if name.partition(".")[0] in {"psycopg", "psycopg_pool"} or name.startswith(
            "skiplock.adapters.psycopg"
        ):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)


#: The drivers this environment has: each tox env runs the cases of its own (the memory
#: env none, psycopg's the psycopg ones, asyncpg's the asyncpg ones).
DRIVERS = tuple(name for name in ("psycopg", "asyncpg") if importlib.util.find_spec(name))

#: (command, driver, DSN): libpq parses BAD_PORT (the connection then fails as
#: unreachable), asyncpg only when it connects.
DSN_CASES = [
    pytest.param(path, driver, dsn, id=f"{' '.join(path)}-{driver}-{name}")
    for path in DATABASE_COMMANDS
    for driver in DRIVERS
    for name, dsn in (("malformed", MALFORMED), ("bad-port", BAD_PORT))
    if not (driver == "asyncpg" and path in PSYCOPG_ONLY)
    and not (driver == "psycopg" and dsn == BAD_PORT)
]


@pytest.mark.parametrize(("path", "driver", "dsn"), DSN_CASES)
def test_a_malformed_dsn_is_one_line_and_exit_1(
    path: tuple[str, ...],
    driver: str,
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _use(driver, monkeypatch)
    status = cli.main([*path, *NEEDS[path], "--dsn", dsn])
    out, err = capsys.readouterr()
    assert status == 1, err
    assert out == ""
    assert err.count("\n") == 1, err
    assert err.startswith("skiplock: error: invalid connection string (--dsn): "), err


@pytest.mark.skipif("psycopg" not in DRIVERS, reason="psycopg's message (the psycopg env)")
def test_a_malformed_dsn_from_the_environment_names_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "skiplock", "health"],
        env={**os.environ, "SKIPLOCK_DSN": MALFORMED},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr == (
        "skiplock: error: invalid connection string ($SKIPLOCK_DSN): "
        'missing "=" after "this" in connection info string\n'
    )
    assert done.stdout == ""


APPS = {
    "psycopg": """
        from skiplock import Engine
        from skiplock.adapters.psycopg import PsycopgJobStore

        def make():
            engine = Engine(PsycopgJobStore(DSN))
            engine.processor("mail.send")(print)
            return engine
    """,
    "psycopg-async-module": """
        from skiplock import AsyncEngine
        from skiplock.adapters.psycopg import AsyncPsycopgJobStore

        engine = AsyncEngine(AsyncPsycopgJobStore(DSN))
        engine.processor("mail.send")(print)
        make = lambda: engine
    """,
    "asyncpg": """
        from skiplock import AsyncEngine
        from skiplock.adapters.asyncpg import AsyncpgJobStore

        def make():
            engine = AsyncEngine(AsyncpgJobStore(DSN))
            engine.processor("mail.send")(print)
            return engine
    """,
}


@pytest.mark.parametrize(
    ("app", "dsn"),
    [
        pytest.param(app, dsn, id=app if dsn == MALFORMED else f"{app}-bad-port")
        for app, dsn in [*((app, MALFORMED) for app in APPS), ("asyncpg", BAD_PORT)]
        if app.partition("-")[0] in DRIVERS
    ],
)
def test_worker_of_an_app_with_a_malformed_dsn_is_one_line_and_exit_1(
    app: str, dsn: str, make_app: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    module = make_app(f"DSN = {dsn!r}\n" + textwrap.dedent(APPS[app]))
    status = cli.main(["worker", f"{module}:make", "--until-idle"])
    out, err = capsys.readouterr()
    assert (status, out) == (1, ""), err
    [line] = err.splitlines()
    assert line.startswith("skiplock: error: cannot "), line
    assert "Traceback" not in err
    if app.startswith("psycopg"):
        assert line == (
            f"skiplock: error: cannot load '{module}:make': "
            'missing "=" after "this" in connection info string'
        )
    else:
        assert "DSN" in line
