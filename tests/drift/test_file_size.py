"""No hand-written Python module under src/ is over 500 lines (issue 42).

Hand-written means every module but the sync twins tools/unasync.py generates; a twin's
async source is hand-written and counts. The tool's own mapping (``discover`` and
``target_for``) says which files are twins, so a twin is never guessed from its name.
SQL files are not Python modules and are left out (the schema and the named queries are
one file each on purpose).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
MAX_LINES = 500


def _unasync() -> ModuleType:
    """tools/unasync.py, loaded once (test_unasync.py loads it under the same name)."""
    loaded = sys.modules.get("unasync")
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "tools" / "unasync.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["unasync"] = module
    spec.loader.exec_module(module)
    return module


def _generated() -> set[Path]:
    """The sync twins the tool writes (under ROOT)."""
    tool = _unasync()
    return {tool.target_for(source).resolve() for source in tool.discover(ROOT)}


def _line_counts() -> dict[str, int]:
    """Lines of every hand-written module under src/, by path relative to src/."""
    generated = _generated()
    return {
        path.relative_to(SRC).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(SRC.rglob("*.py"))
        if path.resolve() not in generated
    }


def test_the_twin_mapping_is_the_tools() -> None:
    # A twin the tool generates carries its header: the mapping really names twins, and
    # async sources are among the hand-written files that count.
    tool = _unasync()
    generated = _generated()
    assert generated, "tools/unasync.py generates no twin"
    assert all(tool.is_generated(path) for path in generated)
    counted = _line_counts()
    assert "skiplock/ports/_store_async.py" in counted
    assert "skiplock/ports/_store.py" not in counted
    # A sync module the tool does not generate (its EXCLUDE) is hand-written.
    assert "skiplock/_compat.py" in counted


def test_no_hand_written_module_is_over_500_lines() -> None:
    over = {path: lines for path, lines in _line_counts().items() if lines > MAX_LINES}
    assert not over, f"hand-written modules over {MAX_LINES} lines (split them): {over}"
