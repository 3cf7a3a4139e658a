"""Every requirement ID the repository cites is defined in docs/requirements.md, and no file
points at documents that live outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "docs" / "requirements.md"
SELF = Path(__file__).resolve()
SCANNED = ("README.md", "src", "tests", "docs", "benchmarks", "tools")
# Caches and run output, not sources (benchmarks/results is git-ignored benchmark output);
# hidden folders and *.egg-info are skipped too.
SKIPPED_DIRS = frozenset({"__pycache__"})
SKIPPED_PATHS = frozenset({"benchmarks/results"})

# A requirement ID: R, J or X, then a number without a leading zero (0..99), then at most
# one lower-case letter (R6b). Case matters (``r12`` is not an ID). It must stand alone:
# no letter, digit or underscore on either side, so ``AR12``, ``R2D2``, ``_X1``, ``X1_max``
# and ``R012`` are not IDs; nor is a token glued to ``.``/``$`` before it (``obj.X1``,
# ``$R1``) or to ``/``, ``+``, ``=`` on either side (paths, base64 text).
ID_RE = re.compile(r"(?<![\w.$/+=])[RJX](?:0|[1-9]\d?)[a-z]?(?![\w/+=])")

# How docs/requirements.md defines an ID: a heading ``### R12 — title`` or the first cell of
# a table row ``| J7 | ... |`` (the aliases table).
_DEFINITION_RE = re.compile(r"^(?:### (\S+) — |\| (\S+) \|)", re.MULTILINE)

# References to documents outside the repository, which a reader cannot follow: the
# external architecture document and requirement catalog (upper-case names; ours are
# docs/architecture.md and docs/requirements.md), the shared folder they live in, and the
# original briefs. Point to a section of docs/architecture.md or an ID instead.
FORBIDDEN_RE = re.compile(
    r"\bARCHITECTURE\b|\bSPEC\b|\bMODELS\.md\b|\.\./shared\b|\bshared/(?:SPEC|ARCHITECTURE)"
    r"|\bseeds/|\bthe seeds?\b"
)

# Files still holding such references while others rewrite them. The lead empties this
# set once those files are fixed; only paths under these folders may be listed.
PENDING: frozenset[str] = frozenset()
_PENDING_FOLDERS = ("src/skiplock/engine/", "src/skiplock/adapters/", "src/skiplock/testing/")


def _text_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        top = root / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            rel = path.relative_to(root)
            if not path.is_file() or any(
                part in SKIPPED_DIRS or part.startswith(".") or part.endswith(".egg-info")
                for part in rel.parts
            ):
                continue
            if any(rel.as_posix().startswith(f"{skipped}/") for skipped in SKIPPED_PATHS):
                continue
            files.append(path)
    return files


def _read(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None  # binary
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def defined_ids(catalog: str) -> list[str]:
    """IDs defined by the catalog's headings and table rows, in order (duplicates kept)."""
    found = (heading or row for heading, row in _DEFINITION_RE.findall(catalog))
    return [name for name in found if ID_RE.fullmatch(name)]


def undefined_ids(root: Path, defined: set[str]) -> list[str]:
    """``path:line: ID`` for every cited ID that ``defined`` lacks."""
    problems: list[str] = []
    for path in _text_files(root):
        text = _read(path)
        if text is None:
            continue
        for match in ID_RE.finditer(text):
            if match.group() not in defined:
                rel = path.relative_to(root).as_posix()
                problems.append(f"{rel}:{_line(text, match.start())}: {match.group()}")
    return problems


def outside_references(root: Path, allowed: frozenset[str]) -> list[str]:
    """``path:line: text`` for every reference to a document outside the repository."""
    problems: list[str] = []
    for path in _text_files(root):
        rel = path.relative_to(root).as_posix()
        text = _read(path)
        if text is None or rel in allowed or path.resolve() == SELF:
            continue
        for match in FORBIDDEN_RE.finditer(text):
            problems.append(f"{rel}:{_line(text, match.start())}: {match.group()!r}")
    return problems


# ---- the repository ---------------------------------------------------------------------


def test_catalog_defines_each_id_once() -> None:
    ids = defined_ids(CATALOG.read_text(encoding="utf-8"))
    assert len(ids) > 30, "docs/requirements.md defines (almost) no IDs: format changed?"
    duplicates = sorted({name for name in ids if ids.count(name) > 1})
    assert not duplicates, f"defined more than once in docs/requirements.md: {duplicates}"


def test_every_cited_id_is_defined() -> None:
    defined = set(defined_ids(CATALOG.read_text(encoding="utf-8")))
    problems = undefined_ids(ROOT, defined)
    assert not problems, "IDs not defined in docs/requirements.md:\n" + "\n".join(problems)


def test_no_reference_to_documents_outside_the_repository() -> None:
    problems = outside_references(ROOT, PENDING)
    assert not problems, (
        "references that cannot resolve (point to docs/architecture.md or an ID in "
        "docs/requirements.md instead):\n" + "\n".join(problems)
    )


def test_pending_lists_only_files_being_rewritten_elsewhere() -> None:
    assert all(path.startswith(_PENDING_FOLDERS) for path in PENDING), PENDING


def test_catalog_links_resolve() -> None:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens.
    catalog = CATALOG.read_text(encoding="utf-8")
    anchors = {
        re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        for title in re.findall(r"^#+ (.+)$", catalog, re.MULTILINE)
    }
    broken = sorted(set(re.findall(r"\]\(#([^)]+)\)", catalog)) - anchors)
    assert not broken, f"links to missing headings in docs/requirements.md: {broken}"


# ---- the checks themselves can fail -----------------------------------------------------

# Built from pieces so that this file itself cites no undefined ID.
_BOGUS = "R" + "99"


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("(R12)", ["R12"]),
        ("(R13 / J8), X1; R6b.", ["R13", "J8", "X1", "R6b"]),
        ("J8's replay, R0: rollback", ["J8", "R0"]),
        ("AR12 R2D2 _X1 X1_max r12 R012 obj.X1 $R1 a/R1/b x+J1=", []),
    ],
)
def test_id_pattern(text: str, ids: list[str]) -> None:
    assert ID_RE.findall(text) == ids


def test_an_undefined_id_is_reported_with_file_and_line(tmp_path: Path) -> None:
    source = tmp_path / "src" / "pkg"
    source.mkdir(parents=True)
    (source / "mod.py").write_text(f'"""Doc."""\n\n# see {_BOGUS} and R12\n', encoding="utf-8")
    (tmp_path / "README.md").write_text("R12 only\n", encoding="utf-8")
    assert undefined_ids(tmp_path, {"R12"}) == [f"src/pkg/mod.py:3: {_BOGUS}"]


def test_an_outside_reference_is_reported_unless_pending(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("ok\nsee ARCHITECTURE §8\n", encoding="utf-8")
    (docs / "b.md").write_text("see ../shared/SPEC.md\n", encoding="utf-8")
    assert outside_references(tmp_path, frozenset({"docs/b.md"})) == ["docs/a.md:2: 'ARCHITECTURE'"]
