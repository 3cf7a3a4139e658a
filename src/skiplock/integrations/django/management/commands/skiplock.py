"""``manage.py skiplock <command>``: every command of the ``skiplock`` command that runs
on an application's engine (all but ``demo``), on a backend's engine: the same options,
messages and exit statuses, plus ``--backend`` (and the worker's ``--queue-name``)."""

from __future__ import annotations

import argparse
import copy
from typing import TYPE_CHECKING, Any

from django.core.management.base import BaseCommand

from skiplock import cli

from ._mount import Mount
from ._worker import HELP as WORKER_HELP
from ._worker import WorkerMount

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

#: The mounts that are more than the tree's command on the backend's engine.
_SPECIAL: dict[str, type[Mount]] = {"worker": WorkerMount}
#: What a command's ``--help`` says in Django, where the tree's words are not enough.
_DESCRIPTIONS = {"worker": WORKER_HELP}


class Command(BaseCommand):
    help = (
        "skiplock's commands on a skiplock backend's engine: those of the 'skiplock' "
        "command (all but demo) with the same options, plus --backend ALIAS (the "
        "settings.TASKS alias, default: default)."
    )
    #: Only the worker runs Django's system checks first (see execute).
    requires_system_checks = "__all__"

    def add_arguments(self, parser: CommandParser) -> None:
        django = _django_options(parser)
        commands = parser.add_subparsers(
            title="commands", metavar="COMMAND", dest="skiplock_command", required=True
        )
        self.mounts: dict[str, Mount] = {}
        for name in cli.MOUNTABLE:
            sub = commands.add_parser(
                name,
                help=cli.summary(name),
                description=_DESCRIPTIONS.get(name) or cli.description(name),
                formatter_class=parser.formatter_class,
            )
            self.mounts[name] = _SPECIAL.get(name, Mount)(name)
            self.mounts[name].add_arguments(sub, django)

    def execute(self, *args: Any, **options: Any) -> str | None:
        if not self.mounts[options["skiplock_command"]].system_checks:
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        name = options["skiplock_command"]
        self.mounts[name].run(options, label=f"manage.py skiplock {name}")


def _django_options(parser: CommandParser) -> cli.Leaf:
    """What gives a command line's last parser Django's own options (``--verbosity``,
    ``--settings``, ...), which ``parser`` has: so they may follow the command too
    (``manage.py skiplock worker -v 0``). Unset there, they keep the value given before
    the command, or Django's default."""
    # The options Django's create_parser added, before add_arguments.
    own = [
        action
        for action in parser._actions
        if action.option_strings
        and not isinstance(action, argparse._HelpAction | argparse._VersionAction)
    ]

    def add(ending: argparse.ArgumentParser) -> None:
        for action in own:
            twin = copy.copy(action)
            twin.default = argparse.SUPPRESS
            ending._add_action(twin)

    return add
