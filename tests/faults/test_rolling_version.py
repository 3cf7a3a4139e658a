"""The rolling deploy's previous version: an earlier commit of this checkout whose
migrations the current ones extend, so that ``skiplock schema apply`` of the current code
upgrades the schema it made. No database; needs the git history (CI runs on a clone)."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest
from benchmarks._procs import ROOT
from benchmarks.faults.rolling import MIGRATIONS, previous_version

if TYPE_CHECKING:
    from pathlib import Path


def _shallow() -> bool:
    out = subprocess.run(
        ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
    )
    return out.stdout.strip() != "false"


@pytest.mark.skipif(_shallow(), reason="the rolling deploy needs the git history")
def test_the_previous_version_is_upgraded_by_the_current_migrations(tmp_path: Path) -> None:
    # A merge that renumbered a branch's migration once made the commit "before the
    # latest migration was added" undefined; the previous version is chosen by content.
    commit, src = previous_version(tmp_path)
    current = sorted(p.name for p in (ROOT / MIGRATIONS).iterdir())
    old_folder = tmp_path / "old" / MIGRATIONS
    old = sorted(p.name for p in old_folder.iterdir())
    assert commit
    assert 0 < len(old) < len(current)
    assert old == current[: len(old)]
    assert (tmp_path / "old" / "src" / "skiplock" / "__init__.py").is_file()
    assert src == str(tmp_path / "old" / "src")
