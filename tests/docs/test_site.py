"""The docs site builds from a fresh environment (``tox -e docs``, docs/contributing.md).

``mkdocs build --strict`` runs as the docs env's last command; these tests check what a
build with today's releases does not say by itself: an option of the mkdocstrings Python
handler it does not know (some releases refuse it, others drop it without a word), and a
pip too old to read ``--group`` (pip 25.1).
"""

from __future__ import annotations

import configparser
import dataclasses
import re

from mkdocstrings_handlers.python import PythonInputOptions
from packaging.requirements import Requirement
from packaging.version import Version

from .examples import ROOT

#: The first pip that installs PEP 735 dependency groups (``pip install --group docs``).
PIP_WITH_GROUPS = Version("25.1")


def _option_keys(text: str) -> set[str]:
    """The keys of every ``options:`` mapping of a YAML-like text (mkdocs.yml, or the
    ``::: identifier`` blocks of an API page): the lines one indentation level under it."""
    keys: set[str] = set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() != "options:":
            continue
        indent = len(line) - len(line.lstrip())
        child: int | None = None
        for below in lines[i + 1 :]:
            if not below.strip() or below.lstrip().startswith("#"):
                continue
            depth = len(below) - len(below.lstrip())
            if depth <= indent:
                break
            child = depth if child is None else child
            match = re.match(r"\s*(\w+):", below)
            if depth == child and match:
                keys.add(match[1])
    return keys


def test_the_option_reader_reads_nested_mappings() -> None:
    text = "a:\n  options:\n    # note\n    one: 1\n    two:\n      - x\n    three: 3\n  b: 2\n"
    assert _option_keys(text) == {"one", "two", "three"}


def test_every_mkdocstrings_option_is_one_the_python_handler_knows() -> None:
    known = {field.name for field in dataclasses.fields(PythonInputOptions)}
    sources = [ROOT / "mkdocs.yml", *sorted((ROOT / "docs" / "api").glob("*.md"))]
    used = {path.relative_to(ROOT).as_posix(): _option_keys(path.read_text()) for path in sources}
    assert used["mkdocs.yml"], "mkdocs.yml has the handler's options"
    unknown = {name: sorted(keys - known) for name, keys in used.items() if keys - known}
    assert unknown == {}


def test_the_docs_env_installs_a_pip_that_reads_dependency_groups() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini", encoding="utf-8")
    deps = [Requirement(line) for line in tox["testenv:docs"]["deps"].split("\n") if line]
    pip = [req for req in deps if req.name == "pip"]
    assert pip, "tox.ini's docs env installs pip"
    # Any pip the requirement allows reads --group: 25.0.1, the last without it, is out.
    assert not pip[0].specifier.contains(Version("25.0.1"))
    assert pip[0].specifier.contains(PIP_WITH_GROUPS)
