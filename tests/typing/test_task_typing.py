"""Task handles are typed: mypy --strict accepts a correct app and reports exactly the
expected errors in a wrong one (tests/typing/samples/). The samples are left out of the
project's own mypy run (pyproject's ``exclude``) and checked here, file by file."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = Path(__file__).resolve().parent / "samples"
OK = SAMPLES / "tasks_ok.py"
BAD = SAMPLES / "tasks_bad.py"

# "# E: <error code> <text the message contains>" marks an expected error on its line.
_EXPECTED_RE = re.compile(r"#\s*E:\s*(?P<code>[a-z-]+)\s*(?P<text>.*?)\s*$")
_ERROR_RE = re.compile(
    r"^(?P<path>.+?):(?P<line>\d+): error: (?P<message>.*)  \[(?P<code>[a-z-]+)\]$"
)

Errors = dict[tuple[int, str], list[str]]


@pytest.fixture(scope="module")
def mypy_errors() -> dict[Path, Errors]:
    """Run mypy --strict once over both samples (with the project's configuration, so
    its cache is shared) and group its errors by file, line and code."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-color-output",
            "--no-error-summary",
            "--show-error-codes",
            "--no-pretty",
            str(OK.relative_to(ROOT)),
            str(BAD.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode in (0, 1), result.stdout + result.stderr  # 2: mypy crashed
    errors: dict[Path, Errors] = {OK: {}, BAD: {}}
    for line in result.stdout.splitlines():
        match = _ERROR_RE.match(line)
        if match is None:
            assert ": note: " in line, f"unexpected mypy output: {line}"
            continue
        path = (ROOT / match["path"]).resolve()
        errors.setdefault(path, {}).setdefault((int(match["line"]), match["code"]), []).append(
            match["message"]
        )
    return errors


def _expected(path: Path) -> dict[tuple[int, str], str]:
    expected: dict[tuple[int, str], str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _EXPECTED_RE.search(line)
        if match is not None:
            expected[(number, match["code"])] = match["text"]
    return expected


def test_mypy_accepts_the_correct_sample(mypy_errors: dict[Path, Errors]) -> None:
    assert mypy_errors[OK] == {}
    assert set(mypy_errors) == {OK, BAD}  # nothing reported about skiplock itself


def test_mypy_reports_exactly_the_marked_errors(mypy_errors: dict[Path, Errors]) -> None:
    expected = _expected(BAD)
    assert len(expected) == 11  # the sample marks them; none lost while editing it
    assert sorted(mypy_errors[BAD]) == sorted(expected)
    for (line, code), text in expected.items():
        messages = mypy_errors[BAD][(line, code)]
        assert any(text in message for message in messages), (line, code, text, messages)


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"skiplock_typing_{path.stem}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.anyio
async def test_the_correct_sample_runs() -> None:
    sample = _load(OK)
    results = await sample.web()
    assert [r.created for r in results] == [True, True, True]
    sample.worker()
