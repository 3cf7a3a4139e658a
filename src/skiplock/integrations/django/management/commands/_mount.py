"""The command tree of :mod:`skiplock.cli` mounted on a backend's engine: ``manage.py
skiplock <command>`` offers every command a door can mount, ``manage.py skiplock_<name>``
four of them (worker, schema, health, metrics); both with the options, messages and exit
statuses of ``skiplock``, plus ``--backend`` (docs/django.md)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from django.core.management.base import BaseCommand

from skiplock import cli

from .._common import add_backend_option, backend_named

if TYPE_CHECKING:
    from django.core.management.base import CommandParser

    from skiplock.engine import Engine

    from ..._backend import SkiplockBackend


class Mount:
    """The tree's command ``name`` in Django: the options it adds to the tree's, and
    how it runs on a backend's engine. One per parser (it keeps the parser, whose usage
    its errors print)."""

    #: Whether Django's system checks run before the command (the worker's do).
    system_checks: ClassVar[bool] = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.parser: argparse.ArgumentParser | None = None

    def add_arguments(self, parser: CommandParser, django: cli.Leaf | None = None) -> None:
        """Add the tree's options of the command to ``parser``; on each parser that
        ends a command line, ``django`` (Django's own options, when ``parser`` is not
        the command's own) then :meth:`leaf`."""
        self.parser = parser

        def leaf(ending: argparse.ArgumentParser) -> None:
            if django is not None:
                django(ending)
            self.leaf(ending)

        cli.add_arguments(parser, self.name, leaf)

    def leaf(self, parser: argparse.ArgumentParser) -> None:
        """The mount's own options, on a parser that ends a command line."""
        add_backend_option(parser)

    def run(self, options: dict[str, Any], *, label: str) -> None:
        """Run the command with the parsed ``options`` (``label`` names it in errors).
        A non-zero exit status ends it with ``SystemExit`` (its error already printed,
        as ``skiplock`` prints it)."""
        self.check(options)
        backend = backend_named(options["backend"])
        self.prepare(options)
        # What call_command(stdout=..., stderr=...) passes receives what the command prints.
        with (
            contextlib.redirect_stdout(options.get("stdout") or sys.stdout),
            contextlib.redirect_stderr(options.get("stderr") or sys.stderr),
        ):
            try:
                status = cli.run_parsed(
                    self.name, argparse.Namespace(**options), self.engine(backend), label=label
                )
            finally:
                self.done(backend)
        if status:
            raise SystemExit(status)

    def check(self, options: dict[str, Any]) -> None:
        """Usage checks of the mount's own options, before anything runs."""

    def prepare(self, options: dict[str, Any]) -> None:
        """Before the command runs: adjust its parsed ``options`` in place."""

    def engine(self, backend: SkiplockBackend) -> Engine:
        """The engine the command runs on."""
        return backend.engine

    def done(self, backend: SkiplockBackend) -> None:
        """After the command (also after an error)."""


class MountedCommand(BaseCommand):
    """``manage.py skiplock_<name>``: the tree's command ``name`` on the backend's engine,
    as ``manage.py skiplock <name>``."""

    name: ClassVar[str]
    mount_class: ClassVar[type[Mount]] = Mount
    #: Django's system checks run first only for the worker (its command sets
    #: ``"__all__"``).
    requires_system_checks: tuple[str, ...] | Literal["__all__"] = ()

    def add_arguments(self, parser: CommandParser) -> None:
        self.mount = self.mount_class(self.name)
        self.mount.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.mount.run(options, label=f"manage.py skiplock_{self.name}")
