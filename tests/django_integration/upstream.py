"""Django's own tests of the tasks framework (``tests/tasks`` of the Django sdist), adapted to
``SkiplockBackend``: ``python -m tests.django_integration.upstream DIR`` (tox's
``commands_pre``) or, on a plain ``pytest`` run, :func:`prepare` from ``test_upstream.py``.

The sdist of the installed Django is downloaded from the package index (``pip download
--no-binary :all:``), ``tests/tasks`` extracted to ``DIR/tasks`` (the package name the
tests' module paths assume) and adapted in settings and fixtures only, never in an
assertion:

- the backends the tests configure become skiplock backends
  (:mod:`tests.django_integration.upstream_support`): ``ImmediateBackend`` a
  ``SkiplockBackend`` whose enqueue is followed by a worker run, ``DummyBackend`` a
  ``SkiplockBackend`` (which runs nothing by itself) with the two helpers the tests call
  (``results``, ``clear()``);
- ``SimpleTestCase`` and ``TransactionTestCase`` become a ``TransactionTestCase`` that may
  use the database and starts with skiplock's tables empty.

``test_custom_backend.py`` is left out: it tests backends of its own, none of them a
database backend. Tests left out of the other modules are listed, each with its reason,
in ``test_upstream.py`` and docs/django.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import django

#: The modules of ``tests/tasks`` that are adapted (the others are left out).
MODULES = ("tasks", "test_tasks", "test_immediate_backend", "test_dummy_backend")

SUPPORT = "tests.django_integration.upstream_support"

#: What the adaptation replaces in the modules' text: backend paths, and the test case
#: classes (rebound after the imports).
BACKENDS = {
    "django.tasks.backends.immediate.ImmediateBackend": f"{SUPPORT}.ImmediateSkiplockBackend",
    "django.tasks.backends.dummy.DummyBackend": f"{SUPPORT}.DummySkiplockBackend",
}
REBIND = (
    f"from {SUPPORT} import UpstreamTestCase as SimpleTestCase  # adapted\n"
    f"from {SUPPORT} import UpstreamTestCase as TransactionTestCase  # adapted\n"
)
_MARKER = "ADAPTED"


def version() -> str:
    """The installed Django's version (its sdist is the one adapted)."""
    return django.__version__


def default_dir() -> Path:
    """Where the adapted tests go: ``DJANGO_UPSTREAM_DIR`` (tox), else a folder of the
    system's temporary directory per Django version."""
    given = os.environ.get("DJANGO_UPSTREAM_DIR")
    if given:
        return Path(given)
    return Path(tempfile.gettempdir()) / f"skiplock-django-upstream-{version()}"


def adapt(text: str) -> str:
    """One upstream module adapted: its backends skiplock's, its test case classes
    :class:`~tests.django_integration.upstream_support.UpstreamTestCase`."""
    for old, new in BACKENDS.items():
        text = text.replace(f'"{old}"', f'"{new}"')
    # After the last top-level import: the adapted classes win over Django's.
    imports = list(re.finditer(r"^(?:from \S+ import (?:\([^)]*\)|.*)|import .*)\n", text, re.M))
    if not imports:
        return text
    end = imports[-1].end()
    return text[:end] + REBIND + text[end:]


def prepare(target: Path | None = None) -> Path:
    """Download, extract and adapt the tests into ``target`` (default :func:`default_dir`)
    once; returns the folder to put on ``sys.path`` (it holds the package ``tasks``)."""
    target = target or default_dir()
    package = target / "tasks"
    if (package / _MARKER).exists():
        return target
    package.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as download:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-binary",
                ":all:",
                "--no-deps",
                f"django=={version()}",
                "--dest",
                download,
            ],
            check=True,
        )
        [sdist] = Path(download).glob("*.tar.gz")
        with tarfile.open(sdist) as archive:
            for name in MODULES:
                member = archive.getmember(
                    f"{sdist.name.removesuffix('.tar.gz')}/tests/tasks/{name}.py"
                )
                source = archive.extractfile(member)
                assert source is not None
                text = source.read().decode("utf-8")
                adapted = text if name == "tasks" else adapt(text)
                (package / f"{name}.py").write_text(adapted, encoding="utf-8")
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / _MARKER).write_text(version(), encoding="utf-8")
    return target


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
