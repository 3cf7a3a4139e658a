"""The layering rules that import-linter cannot express: what core/ may import at all, and
that its contracts leave no module of the package out."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import skiplock

PACKAGE = Path(skiplock.__file__).parent
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
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
    drivers |= {"prometheus_client", "opentelemetry"}  # R7: only skiplock.contrib has them
    offenders = {
        f"{path.relative_to(PACKAGE)}: {root}"
        for layer in ("core", "ports", "engine")
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for root in _imported_roots(path) & drivers
    }
    assert not offenders, offenders


def _contracts(kind: str) -> list[dict[str, Any]]:
    config = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]
    return [c for c in config["contracts"] if c["type"] == kind]


def _modules() -> list[str]:
    """Every module and package under src/skiplock, as dotted names."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _layer_names(contract: dict[str, Any]) -> set[str]:
    # Siblings share a layer: "a | b" (independent) or "a : b".
    names = [name.strip() for entry in contract["layers"] for name in re.split(r"[|:]", entry)]
    containers = contract.get("containers", [])
    return {f"{c}.{name}" for c in containers for name in names} if containers else set(names)


def _uncovered(contract: dict[str, Any]) -> list[str]:
    containers = contract.get("containers", [])
    layers = _layer_names(contract)
    return [
        module
        for module in _modules()
        if any(module.startswith(c + ".") for c in containers) or not containers
        if not any(module == layer or module.startswith(layer + ".") for layer in layers)
    ]


def test_only_the_core_imports_its_private_modules() -> None:
    # The import contract lists the core's private modules (import-linter has no wildcard
    # for a part of a name): a new one must be listed, else it is unguarded.
    private = {f"skiplock.core.{path.stem}" for path in (PACKAGE / "core").glob("_*.py")}
    private.discard("skiplock.core.__init__")
    [contract] = [
        c for c in _contracts("forbidden") if c["name"].startswith("Only the core imports")
    ]
    assert set(contract["forbidden_modules"]) == private
    outside = {name for name in _modules() if name.count(".") == 1} - {"skiplock.core"}
    assert set(contract["source_modules"]) == outside


def test_every_module_is_in_a_layer() -> None:
    # A new top-level module (skiplock/_x.py) or package must be placed in the layers,
    # else nothing checks what it imports or who imports it.
    [contract] = [c for c in _contracts("layers") if c.get("containers") == ["skiplock"]]
    # The container itself is the package's facade; its own contract places it.
    facades = {m for c in _contracts("protected") for m in c["protected_modules"]}
    assert set(contract["containers"]) <= facades, (
        "the layers' container needs a contract of its own"
    )
    uncovered = _uncovered(contract)
    assert not uncovered, f"modules in no layer of [tool.importlinter]: {uncovered}"


def test_every_engine_module_is_in_a_layer_of_the_engine() -> None:
    # The engine's own contract places each of its modules and subpackages (a new
    # engine/_x.py or engine/x/ must say what it may import).
    [contract] = [c for c in _contracts("layers") if c.get("containers") == ["skiplock.engine"]]
    assert contract.get("exhaustive") is True
    uncovered = _uncovered(contract)
    assert not uncovered, f"engine modules in no layer of the engine's contract: {uncovered}"


def test_engine_keeps_few_modules_at_its_top() -> None:
    # engine/ shows the architecture through its subpackages (worker/, enqueue/, admin/,
    # periodic/, settings/); its top holds the engine classes and what they share.
    top = sorted(p.name for p in (PACKAGE / "engine").glob("*.py"))
    assert len(top) <= 20, top


def _absolute_imports(path: Path) -> set[str]:
    """Every module ``path`` imports (type-checking imports too), relative ones resolved."""
    package = ["skiplock", *path.relative_to(PACKAGE).parent.parts]
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            # ``from pkg import name`` may name a module: check both.
            modules.add(module)
            modules.update(f"{module}.{alias.name}" for alias in node.names)
    return modules


def test_integrations_reach_adapters_and_the_cli_by_their_public_modules() -> None:
    # The framework integrations are users of the adapters and of the command tree: they
    # import what those publish (skiplock.adapters.psycopg, skiplock.cli), never a private
    # module behind it, so an adapter's or the CLI's insides can change freely.
    offenders = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in sorted((PACKAGE / "integrations").rglob("*.py"))
        for module in _absolute_imports(path)
        if module.startswith(("skiplock.adapters.", "skiplock.cli."))
        and any(part.startswith("_") for part in module.split(".")[2:])
    }
    assert not offenders, f"integrations import private adapter or CLI modules: {offenders}"
