"""README.md is PyPI's long description: its links must work there too.

PyPI renders the README without the repository around it, so a relative link
(``docs/architecture.md``) is broken there. Links into the repository are absolute
GitHub URLs; those into ``docs/`` must name a page that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
REPO = "https://github.com/skiplock/skiplock/"
# Inline links and images, reference definitions, and HTML src/href attributes.
_LINK_RE = re.compile(
    r"\]\(\s*<?([^)\s>]+)|^\s*\[[^\]]+\]:\s*<?(\S+?)>?\s*$|(?:src|href)=[\"']([^\"']+)",
    re.MULTILINE,
)


def links(text: str) -> list[str]:
    """Every link target of Markdown ``text`` (outside code spans and blocks)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    return [next(g for g in m.groups() if g) for m in _LINK_RE.finditer(text)]


def test_links_finds_every_kind_of_link() -> None:
    text = '[a](docs/a.md) ![b](img.png "t")\n[c]: ../c.md\n<img src="d.png"> `[e](x.md)`\n'
    assert links(text) == ["docs/a.md", "img.png", "../c.md", "d.png"]


def test_readme_has_no_relative_links() -> None:
    found = links(README.read_text(encoding="utf-8"))
    assert found, "no link found: the pattern is broken"
    relative = [t for t in found if not re.match(r"https?://|mailto:", t)]
    assert relative == [], "README.md is PyPI's long description: make these absolute"


def test_readme_links_into_the_repository_name_files_that_exist() -> None:
    for target in links(README.read_text(encoding="utf-8")):
        if not target.startswith(REPO):
            continue
        path = re.sub(r"^(blob|tree)/main/", "", target.removeprefix(REPO)).partition("#")[0]
        assert (ROOT / path).exists(), f"README links to {target}: {path} does not exist"
