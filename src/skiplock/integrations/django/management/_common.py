"""What the ``skiplock`` commands share: the ``--backend`` option and its backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

if TYPE_CHECKING:
    import argparse

    from .._backend import SkiplockBackend


def add_backend_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default="default",
        metavar="ALIAS",
        help="the settings.TASKS alias of the skiplock backend (default: default)",
    )


def backend_named(alias: str) -> SkiplockBackend:
    """The skiplock backend ``alias`` with valid ``OPTIONS``; CommandError otherwise."""
    from django.tasks import task_backends
    from django.tasks.exceptions import InvalidTaskBackend

    from .._backend import SkiplockBackend

    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise CommandError(str(exc)) from None
    if not isinstance(backend, SkiplockBackend):
        raise CommandError(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__qualname__}, "
            "not skiplock.integrations.django.SkiplockBackend"
        )
    try:
        backend.config  # noqa: B018 - parsed and checked here, once
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from None
    return backend
