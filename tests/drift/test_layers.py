"""The layering rules that import-linter cannot express: what core/ may import at all."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import skiplock

PACKAGE = Path(skiplock.__file__).parent
ALLOWED_THIRD_PARTY = {"attrs"}


def _imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_core_imports_only_stdlib_attrs_and_itself() -> None:
    files = sorted((PACKAGE / "core").rglob("*.py"))
    assert files, "core/ has no modules"
    offenders = {
        f"{path.relative_to(PACKAGE)}: {root}"
        for path in files
        for root in _imported_roots(path)
        if root not in sys.stdlib_module_names and root not in ALLOWED_THIRD_PARTY
    }
    assert not offenders, f"core/ must import only the standard library and attrs: {offenders}"


def test_core_does_no_io_or_time_or_randomness() -> None:
    # The core is deterministic: time comes in as `now`, randomness as `jitter`.
    forbidden = {"asyncio", "threading", "random", "time", "socket", "os", "subprocess"}
    offenders = {
        f"{path.relative_to(PACKAGE)}: {root}"
        for path in sorted((PACKAGE / "core").rglob("*.py"))
        for root in _imported_roots(path) & forbidden
    }
    assert not offenders, f"core/ must stay pure: {offenders}"


def test_engine_ports_core_import_no_driver_or_framework() -> None:
    drivers = {"psycopg", "psycopg_pool", "asyncpg", "sqlalchemy", "django", "fastapi", "flask"}
    offenders = {
        f"{path.relative_to(PACKAGE)}: {root}"
        for layer in ("core", "ports", "engine")
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for root in _imported_roots(path) & drivers
    }
    assert not offenders, offenders
