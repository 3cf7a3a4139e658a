"""``flask skiplock ...``: the command tree of :mod:`skiplock.cli` mounted on the app's
engine (the options, messages and exit statuses of ``skiplock``; docs/flask.md).

The group is also a Flask plugin command (the ``flask.commands`` entry point), so
``flask skiplock`` exists before the app is loaded: when the app cannot be imported, the
command loads it and Flask reports that error, not "No such command 'skiplock'"."""

from __future__ import annotations

import sys

import click
from flask.cli import with_appcontext

from skiplock import cli

from ._flask_state import current_state


@click.group("skiplock", help="skiplock commands for this app's engine.")
def commands() -> None:
    """``flask skiplock``."""


def _mount(name: str) -> click.Command:
    """``flask skiplock <name>``: the tree's parser and code (``--help`` included)."""

    @click.command(
        name,
        help=cli.summary(name),
        context_settings={"ignore_unknown_options": True, "help_option_names": []},
        add_help_option=False,
    )
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    @with_appcontext
    def run(args: tuple[str, ...]) -> None:
        try:
            engine = current_state().engine
        except RuntimeError as exc:  # an app without the extension (the plugin command)
            raise click.UsageError(str(exc)) from None
        sys.exit(cli.run_mounted(name, args, engine, prog=f"flask skiplock {name}"))

    return run


for _name in cli.MOUNTABLE:
    commands.add_command(_mount(_name))
