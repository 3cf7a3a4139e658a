"""Check the built sdist and wheel ship what an installed skiplock needs.

Usage::

    python tools/check_dist.py DIST_DIR     # after `python -m build --outdir DIST_DIR`

The wheel must hold every ``*.sql`` file and ``py.typed`` of ``src/skiplock`` (the
migrations are read at run time, the marker tells type checkers the package is typed),
the LICENSE, and metadata naming the MIT license; it must hold no tests. The sdist must
hold the LICENSE, the docs and the tests. Exit status 1 with one line per problem.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.parser import HeaderParser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "skiplock"


def required_package_files() -> set[str]:
    """Paths inside the wheel (``skiplock/...``) of the data files the code reads."""
    files = {p for p in PACKAGE.rglob("*.sql")} | {PACKAGE / "py.typed"}
    return {p.relative_to(PACKAGE.parent).as_posix() for p in files}


def check_wheel(path: Path) -> list[str]:
    """Problems of the wheel at ``path``."""
    with zipfile.ZipFile(path) as wheel:
        names = set(wheel.namelist())
        metadata_name = next((n for n in names if n.endswith(".dist-info/METADATA")), None)
        if metadata_name is None:
            return [f"{path.name}: no METADATA"]
        metadata = HeaderParser().parsestr(wheel.read(metadata_name).decode())
    problems = [f"{path.name}: missing {name}" for name in sorted(required_package_files() - names)]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        problems.append(f"{path.name}: missing the LICENSE file")
    license_expression = metadata.get("License-Expression")
    if license_expression != "MIT":
        problems.append(f"{path.name}: License-Expression is {license_expression!r}")
    if any(n.startswith("tests/") for n in names):
        problems.append(f"{path.name}: ships the tests")
    if not metadata.get_payload():
        problems.append(f"{path.name}: no long description (the README)")
    return problems


def check_sdist(path: Path) -> list[str]:
    """Problems of the sdist at ``path``."""
    with tarfile.open(path) as sdist:
        names = {name.partition("/")[2] for name in sdist.getnames()}
    wanted = ["LICENSE", "README.md", "docs/architecture.md", "tests/conftest.py", "pyproject.toml"]
    wanted += sorted("src/" + name for name in required_package_files())
    return [f"{path.name}: missing {name}" for name in wanted if name not in names]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    dist = Path(argv[0])
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        print(f"expected one wheel and one sdist in {dist}, found {wheels + sdists}")
        return 1
    problems = check_wheel(wheels[0]) + check_sdist(sdists[0])
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"ok: {wheels[0].name}, {sdists[0].name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
