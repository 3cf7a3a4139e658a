"""The ``skiplock_*`` commands are the command tree of :mod:`skiplock.cli` mounted on a
backend's engine: the options, messages and exit statuses of ``skiplock``, plus
``--backend`` (docs/django.md)."""

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


class MountedCommand(BaseCommand):
    """``manage.py skiplock_<name>``: the tree's command ``name`` on the backend's engine.
    A non-zero exit status ends the command with ``SystemExit`` (its error already
    printed, as ``skiplock`` prints it)."""

    name: ClassVar[str]
    #: The mounted commands run without Django's system checks first; the worker's
    #: command sets ``"__all__"`` to keep them.
    requires_system_checks: tuple[str, ...] | Literal["__all__"] = ()

    def add_arguments(self, parser: CommandParser) -> None:
        add_backend_option(parser)
        cli.add_arguments(parser, self.name)

    def handle(self, *args: Any, **options: Any) -> None:
        backend = backend_named(options["backend"])
        self.prepare(options)
        # What call_command(stdout=..., stderr=...) passes receives what the command prints.
        with (
            contextlib.redirect_stdout(options.get("stdout") or sys.stdout),
            contextlib.redirect_stderr(options.get("stderr") or sys.stderr),
        ):
            try:
                status = cli.run_parsed(
                    self.name,
                    argparse.Namespace(**options),
                    self.engine(backend),
                    label=f"manage.py skiplock_{self.name}",
                )
            finally:
                self.done(backend)
        if status:
            raise SystemExit(status)

    def prepare(self, options: dict[str, Any]) -> None:
        """Before the command runs: adjust its parsed ``options`` in place."""

    def engine(self, backend: SkiplockBackend) -> Engine:
        """The engine the command runs on."""
        return backend.engine

    def done(self, backend: SkiplockBackend) -> None:
        """After the command (also after an error)."""
