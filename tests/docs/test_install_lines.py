"""A page's install line installs what its examples need (issue 41, item 14).

For each framework page: a fresh virtual environment gets skiplock (the wheel of this
checkout) with exactly the page's install line (its first ``pip install ...``), nothing
else, and the page's code blocks run there against PostgreSQL by the docs convention
(tests/docs/examples.py). A missing extra or package fails as the reader would see it.
The Flask page also checks that ``flask skiplock`` reports an app's import error rather
than "No such command". ``tox -e docs`` runs these (pip reaches the package index).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from typing import TYPE_CHECKING

import pytest

from tests import pgfixtures

from .examples import ROOT, wants_schema

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: The pages whose examples run in an environment of their install line alone.
PAGES = ("docs/flask.md", "docs/fastapi.md", "docs/rest.md", "docs/rest-operations.md")
#: The first ``pip install ...`` of a page, in a code span or a shell block.
INSTALL_RE = re.compile(r"pip install (?P<args>[^`\n#]+)")
PIP_TIMEOUT = 600.0
RUN_TIMEOUT = 300.0


def install_line(page: Path) -> list[str]:
    """The arguments of the page's first ``pip install`` (its install line)."""
    match = INSTALL_RE.search(page.read_text(encoding="utf-8"))
    assert match, f"{page.name} has no install line"
    return shlex.split(match["args"])


def _pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel, built once."""
    out = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(ROOT))
    (built,) = out.glob("skiplock-*.whl")
    return built


def fresh_env(where: Path, wheel: Path, args: list[str]) -> Path:
    """A virtual environment with the install line ``args`` (skiplock from ``wheel``);
    its python. The running pip installs into it (``--python``): no pip inside."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    requirements = [
        re.sub(r"^skiplock(\[[^\]]*\])?$", rf"skiplock\1 @ {wheel.as_uri()}", arg) for arg in args
    ]
    assert any(" @ " in req for req in requirements), args
    _pip("--python", str(python), "install", "--quiet", *requirements)
    return python


RUN_PAGE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    sys.path.insert(0, sys.argv[1])
    from tests.docs.examples import ExampleFailed, run_file

    try:
        run_file(Path(sys.argv[2]), lambda: sys.argv[3])
    except ExampleFailed as exc:
        sys.exit(str(exc))
    """
)


def test_the_install_line_is_the_first_pip_install_of_the_page() -> None:
    assert install_line(ROOT / "docs/flask.md")[0].startswith("skiplock[")
    assert "httpx2" in install_line(ROOT / "docs/fastapi.md")


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_with_its_install_line_alone(
    page: str, wheel: Path, tmp_path: Path, make_database: Callable[[], str]
) -> None:
    path = ROOT / page
    python = fresh_env(tmp_path / "venv", wheel, install_line(path))
    dsn = make_database()
    if wants_schema(path):
        pgfixtures.apply_schema(dsn)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-c", RUN_PAGE, str(ROOT), str(path), dsn],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_flask_skiplock_reports_the_apps_import_error(wheel: Path, tmp_path: Path) -> None:
    python = fresh_env(tmp_path / "venv", wheel, install_line(ROOT / "docs/flask.md"))
    (tmp_path / "shop.py").write_text(
        "from flask import Flask\nimport not_installed_anywhere  # noqa\napp = Flask(__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(python), "-m", "flask", "--app", "shop", "skiplock", "health"],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode != 0
    assert "No module named 'not_installed_anywhere'" in done.stderr, done.stderr
    assert "No such command" not in done.stderr, done.stderr
