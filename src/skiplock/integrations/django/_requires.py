"""What the Django integration needs, checked before it imports Django: an ImportError
that says what to install instead of a bare ``ModuleNotFoundError`` (the ``[django]``
extra installs no Django on a Python older than 3.12, which Django 6 needs)."""

from __future__ import annotations

import importlib.util
import sys

#: The oldest Python and Django the integration runs on (Django 6 needs Python 3.12).
PYTHON = (3, 12)
DJANGO = (6, 0)

_INSTALL = "pip install 'skiplock[django]'"


def problem(python: tuple[int, ...], django: tuple[int, ...] | None) -> str | None:
    """Why the integration cannot run on ``python`` with ``django`` (None: not
    installed), or None if it can."""
    if python[:2] < PYTHON:
        return (
            "skiplock.integrations.django needs Django 6, which needs Python "
            f"{PYTHON[0]}.{PYTHON[1]} or later; this is Python {python[0]}.{python[1]} "
            f"(on Python {PYTHON[0]}.{PYTHON[1]}+: {_INSTALL})"
        )
    if django is None:
        return f"skiplock.integrations.django needs Django 6, which is not installed: {_INSTALL}"
    if django[:2] < DJANGO:
        shown = ".".join(map(str, django[:3]))
        return (
            f"skiplock.integrations.django needs Django {DJANGO[0]}.{DJANGO[1]} or later "
            f"(django.tasks); Django {shown} is installed: {_INSTALL} or pip install -U django"
        )
    return None


def require() -> None:
    """Raise ImportError naming what is needed if this Python or Django cannot run the
    integration."""
    django: tuple[int, ...] | None = None
    if sys.version_info[:2] >= PYTHON and importlib.util.find_spec("django") is not None:
        import django as found

        django = tuple(found.VERSION[:3])
    message = problem(tuple(sys.version_info[:3]), django)
    if message is not None:
        raise ImportError(message, name="skiplock.integrations.django")
