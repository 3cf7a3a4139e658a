"""``manage.py skiplock <command>`` is the ``skiplock`` command's tree (issue 42, item 6):
every command of ``skiplock`` but ``demo`` (which runs on no application's engine), each
with the same actions, options and help, plus Django's own options and ``--backend``. A
command added to the tree without its Django twin fails here."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError

from skiplock import cli
from tests.doors import STANDALONE_ONLY

#: The ``skiplock`` command's only: it runs on no application's engine.
STANDALONE_COMMANDS = frozenset({"demo"})
#: How ``skiplock`` finds the engine: its worker's APP, and the connection options.
STANDALONE = STANDALONE_ONLY | {"app"}
#: The options Django's mount adds: ``--backend``, and the worker's ``--queue-name``.
MOUNT_OWN = frozenset({"--backend", "--queue-name"})


def _commands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any]:
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands


def _shape(parser: argparse.ArgumentParser, leave_out: frozenset[str]) -> dict[str, Any]:
    """A parser's command line: its options (with their choices and whether required),
    its positionals, and its actions' command lines, ``leave_out`` left out."""
    shape: dict[str, Any] = {"options": {}, "positionals": [], "actions": {}}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            shape["actions"] = {
                name: (_help(action, name), _shape(sub, leave_out))
                for name, sub in action.choices.items()
            }
        elif action.option_strings:
            if not leave_out & set(action.option_strings):
                choices = None if action.choices is None else sorted(map(str, action.choices))
                shape["options"][tuple(action.option_strings)] = (
                    action.dest,
                    action.metavar,
                    choices,
                    action.required,
                    action.help,
                )
        elif action.dest not in leave_out:
            shape["positionals"].append((action.dest, action.nargs, action.help))
    return shape


def _help(commands: argparse._SubParsersAction[Any], name: str) -> str | None:
    """The one-line help ``commands`` lists for ``name``."""
    return next(c.help for c in commands._choices_actions if c.dest == name)


def manage_py_parser() -> argparse.ArgumentParser:
    command = load_command_class("skiplock.integrations.django", "skiplock")
    return command.create_parser("manage.py", "skiplock")


def test_manage_py_skiplock_offers_every_command_of_skiplock_alike() -> None:
    tree = _commands(cli.build_parser())
    django_parser = manage_py_parser()
    mounted = _commands(django_parser)
    assert set(mounted.choices) == set(tree.choices) - STANDALONE_COMMANDS
    assert tuple(mounted.choices) == cli.MOUNTABLE
    # Django's own options (-v, --settings, ...), on every command line too.
    django_own = frozenset(
        option for a in django_parser._actions for option in a.option_strings
    ) | {"-h"}
    for name, parser in mounted.choices.items():
        assert _help(mounted, name) == _help(tree, name) == cli.summary(name)
        if name != "worker":  # Django's words: its tasks, --queue-name
            assert parser.description == tree.choices[name].description
        assert _shape(parser, django_own | MOUNT_OWN) == _shape(
            tree.choices[name], STANDALONE | {"-h"}
        ), name


def _leaves(parser: argparse.ArgumentParser, line: tuple[str, ...] = ()) -> list[Any]:
    """Each command line's last parser, with the words that reach it."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not actions:
        return [(line, parser)]
    found = [(line, parser)] if not actions[0].required else []
    for name, sub in actions[0].choices.items():
        found += _leaves(sub, (*line, name))
    return found


def test_every_command_line_ends_with_djangos_options_and_backend() -> None:
    parser = manage_py_parser()
    django_own = {o for a in parser._actions for o in a.option_strings if o != "--version"}
    leaves = _leaves(parser)
    assert len(leaves) > len(cli.MOUNTABLE)  # jobs, limits, dlq: actions
    for line, leaf in leaves:
        taken = {o for a in leaf._actions for o in a.option_strings}
        assert django_own | {"--backend"} <= taken, line
    # Given after the command, an option of Django's is that command's; not given, the
    # value before the command (or Django's default) stands.
    assert parser.parse_args(["health", "-v", "0"]).verbosity == 0
    assert parser.parse_args(["-v", "2", "health"]).verbosity == 2
    assert parser.parse_args(["jobs", "list"]).verbosity == 1
    assert parser.parse_args(["jobs", "list", "--backend", "other"]).backend == "other"


def test_manage_py_skiplock_needs_a_command() -> None:
    with pytest.raises(CommandError, match="the following arguments are required: COMMAND"):
        call_command("skiplock")
