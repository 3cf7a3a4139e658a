"""Type-check the Django integration: ``python tools/mypy_django.py`` (``tox -e django``).

The project's mypy configuration excludes ``src/skiplock/integrations/django`` and
``tests/django_integration``: they need Django 6 (Python 3.12+) and django-stubs, which
the other type-checking environments do not have. Files named on mypy's command line are
checked whatever ``exclude`` says, so this passes them one by one, with the rest of the
configuration (strict) unchanged and ``--python-version 3.12``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("src/skiplock/integrations/django", "tests/django_integration")


def main() -> int:
    files = sorted(
        str(path.relative_to(ROOT)) for f in FOLDERS for path in (ROOT / f).rglob("*.py")
    )
    stdout, stderr, status = api.run(["--python-version", "3.12", *files])
    sys.stdout.write(stdout)
    sys.stderr.write(stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
